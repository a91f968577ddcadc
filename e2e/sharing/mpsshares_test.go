//go:build e2e

package sharing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/fakecri"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

// testMPSShares: three pods with MPS claims of 20, 20 and 40 GiB land on one 80 GiB GPU, and
// one MPS daemon, the GPU's, serves all three: their containers get its pipe and log
// directories and its /dev/shm, and each its own memory limit as an MPS client variable. A
// CUDA process of each container (the stand-in's `alloc`, run with the environment the fake
// runtime gave the container) gets its share and not a MiB more; the claim that asked for a
// lower limit gets that. The daemon outlives the first share to go and a kill -9 of the plugin
// (adopted), and goes with the last share, with its directory, its tmpfs and the GPU's
// EXCLUSIVE_PROCESS compute mode.
func (e *env) testMPSShares(ctx context.Context, t *testing.T, ctl string, slices []resourceapi.ResourceSlice) {
	mps := e.mps(t, ctl)
	mockDir := filepath.Join(e.node.PluginDataDir(framework.GPUDriver), "mock")
	cleanupMPS(t, mps)
	var uuid1 string
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name == "gpu-1" {
				uuid1 = *d.Attributes["uuid"].StringValue
			}
		}
	}
	gpu1 := `device.attributes["gpu.accel-dra.io"].index == 1`
	shares := []struct {
		name, memory, sharing string
		limitMiB              int64
	}{
		{"mps-s0", "20Gi", `{"strategy":"MPS"}`, 20 << 10},
		{"mps-s1", "20Gi", `{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":25,"defaultPinnedDeviceMemoryLimit":"12Gi"}}`, 12 << 10},
		{"mps-s2", "40Gi", `{"strategy":"MPS"}`, 40 << 10},
	}
	for _, s := range shares {
		e.createShareClaim(t, s.name, s.memory, gpu1, s.sharing)
		e.createPod(t, "p-"+s.name, s.name)
	}
	for _, s := range shares {
		if _, err := framework.WaitForPodRunning(ctx, e.client, ns, "p-"+s.name, 2*time.Minute); err != nil {
			t.Fatalf("%v\n%s", err, framework.DescribePod(ctx, e.client, ns, "p-"+s.name))
		}
	}
	// The three prepares came at once: the second and third waited for the daemon the first
	// started, rather than fail into the kubelet's back-off (a minute and more).
	for _, s := range shares {
		evs, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=p-" + s.name + ",reason=FailedPrepareDynamicResources"})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			t.Errorf("pod p-%s: the kubelet's prepare failed (%d times): %s", s.name, ev.Count, ev.Message)
		}
	}
	pid := daemonPID(t, mps, uuid1)
	if !running(t, mps, uuid1) {
		t.Fatalf("no MPS daemon for GPU %s with three MPS shares prepared", uuid1)
	}
	pipe, logDir := mps.Dirs(uuid1)
	daemonLog := func() string {
		b, _ := os.ReadFile(filepath.Join(logDir, "control.log"))
		return string(b)
	}
	if n := strings.Count(daemonLog(), "daemon started"); n != 1 || !strings.Contains(daemonLog(), "CUDA_VISIBLE_DEVICES="+uuid1+"\n") {
		t.Errorf("the GPU's daemon started %d times, or not on the GPU alone:\n%s", n, daemonLog())
	}
	if m, err := nvmlmock.ComputeModes(mockDir); err != nil || m[uuid1] != "EXCLUSIVE_PROCESS" {
		t.Errorf("compute mode of %s with MPS shares prepared: %q (%v), want EXCLUSIVE_PROCESS", uuid1, m[uuid1], err)
	}

	// allocate runs a CUDA process of the container rec: the stand-in client, with the
	// container's environment, against the daemon its pipe directory names; here, on the host,
	// by the host's path of the directory the container has at sharing.PipeDir.
	allocate := func(rec fakecri.ContainerRecord, mib int64) error {
		cmd := exec.CommandContext(ctx, ctl, "alloc", fmt.Sprint(mib))
		cmd.Env = append(append([]string(nil), rec.Env...), "CUDA_MPS_PIPE_DIRECTORY="+pipe)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	recs := map[string]fakecri.ContainerRecord{}
	for _, s := range shares {
		rec, err := e.node.CRI.WaitForContainer(ctx, ns, "p-"+s.name, "ctr")
		if err != nil {
			t.Fatal(err)
		}
		recs[s.name] = rec
		for _, want := range []string{"CUDA_MPS_PIPE_DIRECTORY=" + sharing.PipeDir, "CUDA_MPS_LOG_DIRECTORY=" + sharing.LogDir,
			fmt.Sprintf("%s=0=%dM", driver.EnvMPSPinnedMemoryLimit, s.limitMiB)} {
			if !contains(rec.Env, want) {
				t.Errorf("pod p-%s: environment lacks %s: %v", s.name, want, rec.Env)
			}
		}
		var shm string
		for _, m := range rec.Mounts {
			if m.Destination == "/dev/shm" {
				shm = m.Source
			}
		}
		if shm != mps.ShmDir(uuid1) {
			t.Errorf("pod p-%s: /dev/shm mounted from %q, want the GPU daemon's %s", s.name, shm, mps.ShmDir(uuid1))
		}
		if err := allocate(rec, s.limitMiB); err != nil {
			t.Errorf("pod p-%s: allocating its limit of %d MiB: %v", s.name, s.limitMiB, err)
		}
		var exit *exec.ExitError
		if err := allocate(rec, s.limitMiB+1); !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(err.Error(), "out of memory") {
			t.Errorf("pod p-%s: allocating 1 MiB over its limit of %d MiB: %v, want out of memory", s.name, s.limitMiB, err)
		}
	}
	if !contains(recs["mps-s1"].Env, driver.EnvMPSActiveThreadPercentage+"=25") || strings.Contains(strings.Join(recs["mps-s0"].Env, " "), driver.EnvMPSActiveThreadPercentage) {
		t.Errorf("active thread percentage: p-mps-s1 has %v, p-mps-s0 has %v; want 25 for p-mps-s1 only", recs["mps-s1"].Env, recs["mps-s0"].Env)
	}
	if n := len(mountsAt(t, mps.ShmDir(uuid1))); n != 1 {
		t.Errorf("%d mounts at the GPU daemon's /dev/shm, want one tmpfs", n)
	}

	// The first share goes: the daemon stays for the others. kill -9 of the plugin: the
	// restarted plugin adopts it.
	e.deletePod(t, "p-mps-s0")
	if err := e.client.ResourceV1().ResourceClaims(ns).Delete(ctx, "mps-s0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.plugin.Kill()
	if err := e.plugin.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if again, ok := daemonPID(t, mps, uuid1), running(t, mps, uuid1); !ok || again != pid {
		t.Fatalf("after one share went and the plugin was killed: daemon %d (running %v), want %d", again, ok, pid)
	}
	if err := allocate(recs["mps-s2"], 40<<10); err != nil {
		t.Errorf("a remaining share cannot use the adopted daemon: %v", err)
	}

	for _, p := range []string{"p-mps-s1", "p-mps-s2"} {
		e.deletePod(t, p)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, statErr := os.Stat(filepath.Join(mps.Root, uuid1))
		return !running(t, mps, uuid1) && os.IsNotExist(statErr), nil
	})
	if err != nil {
		t.Fatalf("the GPU's MPS daemon or its directory is left after its last share went:\n%s", daemonLog())
	}
	if left := mountsUnder(t, mps.Root); len(left) != 0 {
		t.Errorf("mounts left after the shares went: %v", left)
	}
	if m, err := nvmlmock.ComputeModes(mockDir); err != nil || m[uuid1] != "DEFAULT" {
		t.Errorf("compute mode of %s after its last MPS share went: %q (%v), want DEFAULT", uuid1, m[uuid1], err)
	}
}
