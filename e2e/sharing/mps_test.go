//go:build e2e

package sharing

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/fakecri"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestMPS: a claim with sharing strategy MPS gets its own MPS control daemon (the GPU mock's
// nvidia-cuda-mps-control stand-in, which records what it was asked), whose pipe and log
// directories its container gets, and whose /dev/shm is the container's: a tmpfs of the
// claim's own, mounted on the host, which a second MPS claim does not share. The GPU is in the
// EXCLUSIVE_PROCESS compute mode while the claim is prepared. A kill -9 of the plugin leaves the
// daemon running and the restarted plugin adopts it; a daemon that died with the plugin is
// started again, on the same tmpfs; nothing (daemon, directory, mount, compute mode) is left
// once the pods and the claims are gone.
func TestMPS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ctl := standin.Build(t, standin.MockTools, "nvidia-cuda-mps-control")
	e, _ := startEnv(ctx, t, "--nvidia-mps-control-path="+ctl)
	mps := e.mps(t, ctl)
	mockDir := filepath.Join(e.node.PluginDataDir(framework.GPUDriver), "mock")
	cleanupMPS(t, mps)

	uid := e.createMPSClaim(t, "mps", gpu0)
	e.createPod(t, "mps-a", "mps")
	if _, err := framework.WaitForPodRunning(ctx, e.client, ns, "mps-a", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	pipe, logDir := mps.Dirs(uid)
	rec, err := e.node.CRI.WaitForContainer(ctx, ns, "mps-a", "ctr")
	if err != nil {
		t.Fatal(err)
	}
	// The container sees the claim's directories where a user of any UID reaches them.
	if !contains(rec.Env, "CUDA_MPS_PIPE_DIRECTORY="+sharing.PipeDir) || !contains(rec.Env, "CUDA_MPS_LOG_DIRECTORY="+sharing.LogDir) {
		t.Errorf("container environment lacks the MPS directories: %v", rec.Env)
	}
	mounted := map[string]string{}
	for _, m := range rec.Mounts {
		mounted[m.Destination] = m.Source
	}
	if mounted[sharing.PipeDir] != pipe || mounted[sharing.LogDir] != logDir {
		t.Errorf("container mounts lack %s at %s and %s at %s: %+v", pipe, sharing.PipeDir, logDir, sharing.LogDir, rec.Mounts)
	}
	slices, err := framework.WaitForSlices(ctx, e.client, framework.GPUDriver, nodeName, 8)
	if err != nil {
		t.Fatal(err)
	}
	var uuid0 string
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name == "gpu-0" {
				uuid0 = *d.Attributes["uuid"].StringValue
			}
		}
	}
	log := func() string {
		b, _ := os.ReadFile(filepath.Join(logDir, "control.log"))
		return string(b)
	}
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=" + uuid0, "command set_default_active_thread_percentage 50", "command set_default_device_pinned_mem_limit " + uuid0 + " 10240M"} {
		if !strings.Contains(log(), want) {
			t.Errorf("daemon log lacks %q:\n%s", want, log())
		}
	}
	pid := daemonPID(t, mps, uid)
	if !running(t, mps, uid) {
		t.Fatal("no MPS daemon running for the prepared claim")
	}

	// The container's /dev/shm is the claim's tmpfs, where the daemon wrote its marker, and
	// the daemon's /dev/shm is that directory.
	shm := mps.ShmDir(uid)
	checkShm := func(when string, rec fakecri.ContainerRecord, shm string, daemons int) {
		t.Helper()
		var src string
		for _, m := range rec.Mounts {
			if m.Destination == "/dev/shm" {
				src = m.Source
			}
		}
		if src != shm {
			t.Errorf("%s: container's /dev/shm mounted from %q, want the claim's %s", when, src, shm)
			return
		}
		if _, err := os.Stat(filepath.Join(src, "accel-dra-fakempscontrol")); err != nil {
			t.Errorf("%s: the daemon's /dev/shm marker is not in the container's /dev/shm source: %v", when, err)
		}
		if n := len(mountsAt(t, src)); n != 1 {
			t.Errorf("%s: %d mounts at %s, want one tmpfs", when, n, src)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(src, &st); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(src), "log", "control.log"))
		want := fmt.Sprintf("daemon shm dev=%d ino=%d", st.Dev, st.Ino)
		if got := strings.Count(string(b), want); got != daemons || strings.Count(string(b), "daemon shm ") != daemons {
			t.Errorf("%s: daemon log has %d of %d daemons on %q (the container's /dev/shm):\n%s", when, got, daemons, want, b)
		}
	}
	checkShm("prepared", rec, shm, 1)
	modes := func() map[string]string {
		t.Helper()
		m, err := nvmlmock.ComputeModes(mockDir)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := modes()[uuid0]; m != "EXCLUSIVE_PROCESS" {
		t.Errorf("compute mode of %s while its MPS claim is prepared: %q, want EXCLUSIVE_PROCESS", uuid0, m)
	}

	// A second MPS claim gets a /dev/shm of its own.
	uid2 := e.createMPSClaim(t, "mps2", `device.attributes["gpu.accel-dra.io"].index == 1`)
	e.createPod(t, "mps-b", "mps2")
	if _, err := framework.WaitForPodRunning(ctx, e.client, ns, "mps-b", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	rec2, err := e.node.CRI.WaitForContainer(ctx, ns, "mps-b", "ctr")
	if err != nil {
		t.Fatal(err)
	}
	checkShm("second claim", rec2, mps.ShmDir(uid2), 1)
	var a, b syscall.Stat_t
	if err := syscall.Stat(shm, &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(mps.ShmDir(uid2), &b); err != nil {
		t.Fatal(err)
	}
	if a.Dev == b.Dev {
		t.Errorf("two MPS claims share one tmpfs (device %d)", a.Dev)
	}

	// kill -9 of the plugin: the daemon lives on, and the restarted plugin adopts it.
	e.plugin.Kill()
	if !running(t, mps, uid) {
		t.Fatal("the MPS daemon died with the plugin")
	}
	if err := e.plugin.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if again, ok := daemonPID(t, mps, uid), running(t, mps, uid); !ok || again != pid {
		t.Fatalf("after the plugin's restart: daemon %d (running %v), want %d adopted", again, ok, pid)
	}
	checkShm("adopted", rec, shm, 1)
	// The plugin and its daemon both killed (a container restart): the daemon is started again.
	e.plugin.Kill()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := e.plugin.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if again, ok := daemonPID(t, mps, uid), running(t, mps, uid); !ok || again == pid {
		t.Fatalf("after plugin and daemon died: daemon %d (running %v), want a new one", again, ok)
	}
	if n := strings.Count(log(), "command set_default_active_thread_percentage 50"); n != 2 {
		t.Errorf("the restarted daemon was given its limits %d times in all, want 2:\n%s", n, log())
	}
	// The new daemon has the tmpfs the container has: not a second one stacked on it.
	checkShm("restarted", rec, shm, 2)

	for _, p := range []string{"mps-a", "mps-b"} {
		e.deletePod(t, p)
	}
	for _, c := range []string{"mps", "mps2"} {
		if err := e.client.ResourceV1().ResourceClaims(ns).Delete(ctx, c, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, u := range []string{uid, uid2} {
			if _, statErr := os.Stat(filepath.Join(mps.Root, u)); running(t, mps, u) || !os.IsNotExist(statErr) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("MPS daemon or its directory left after the pods and claims went")
	}
	if left := mountsUnder(t, mps.Root); len(left) != 0 {
		t.Errorf("mounts left after the pods and claims went: %v", left)
	}
	if m := modes()[uuid0]; m != "DEFAULT" {
		t.Errorf("compute mode of %s after its MPS claim went: %q, want DEFAULT", uuid0, m)
	}
	if specs, err := e.plugin.CDISpecs(); err != nil || len(specs) != 0 {
		t.Errorf("CDI specs left: %v (%v)", specs, err)
	}
}

func (e *env) createMPSClaim(t *testing.T, name, selector string) string {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourceapi.ResourceClaimSpec{
		Devices: framework.DeviceClaim("gpu", framework.GPUDriver, 1, []string{selector}, ""),
	}}
	claim.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
		Driver:     framework.GPUDriver,
		Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi"}}}`)},
	}}}}
	created, err := e.client.ResourceV1().ResourceClaims(ns).Create(e.ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(created.UID)
}

// mps is the plugin's MPS as a test sees it: the plugin's directory, and its binary as the
// runner that probes daemons, with the control binary ctl.
func (e *env) mps(t *testing.T, ctl string) sharing.MPS {
	t.Helper()
	self, err := framework.Binary("accel-dra-kubelet-plugin")
	if err != nil {
		t.Fatal(err)
	}
	return sharing.MPS{Root: filepath.Join(e.node.PluginDataDir(framework.GPUDriver), "mps"),
		Daemons: sharing.Processes{Control: sharing.MPSControl{Path: ctl}, Self: self}}
}

// running reports whether the daemon key runs and answers.
func running(t *testing.T, mps sharing.MPS, key string) bool {
	t.Helper()
	ok, err := mps.Running(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// daemonPID is the PID of the stand-in daemon that started last for key, 0 for none.
func daemonPID(t *testing.T, mps sharing.MPS, key string) int {
	t.Helper()
	_, log := mps.Dirs(key)
	if pids := standin.MPSDaemonPIDs(t, log); len(pids) > 0 {
		return pids[len(pids)-1]
	}
	return 0
}

// cleanupMPS stops, when t ends, whatever daemons and mounts it left under mps.Root. The plugin
// runs in this machine's mount namespace: what a failed test leaves there must go before the
// node's directory is removed.
func cleanupMPS(t *testing.T, mps sharing.MPS) {
	t.Cleanup(func() {
		keys, _ := mps.Keys(context.Background())
		for _, k := range keys {
			if err := mps.Stop(context.Background(), k); err != nil {
				t.Logf("cleaning up MPS daemon %s: %v", k, err)
			}
		}
		for _, m := range mountsUnder(t, mps.Root) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
}

// mountsAt and mountsUnder are the mount points of this machine's mount namespace (the
// plugin's) at dir, and at or under dir.
func mountsAt(t *testing.T, dir string) []string {
	var out []string
	for _, m := range mountsUnder(t, dir) {
		if m == dir {
			out = append(out, m)
		}
	}
	return out
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}
