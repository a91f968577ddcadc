//go:build e2e

package sharing

import (
	"context"
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

	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestMPS: a claim with sharing strategy MPS gets its own MPS control daemon (the
// e2e/fakempscontrol stand-in, which records what it was asked), whose pipe and log directories
// its container gets; a kill -9 of the plugin leaves the daemon running and the restarted plugin
// adopts it; a daemon that died with the plugin is started again; nothing is left once the pod
// and the claim are gone.
func TestMPS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ctl := standin.Build(t, "github.com/accel-dra/accel-dra/e2e/fakempscontrol", "nvidia-cuda-mps-control")
	e, _ := startEnv(ctx, t, "--nvidia-mps-control-path="+ctl)
	mps := sharing.MPS{Root: filepath.Join(e.node.PluginDataDir(framework.GPUDriver), "mps")}

	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mps"}, Spec: resourceapi.ResourceClaimSpec{
		Devices: framework.DeviceClaim("gpu", framework.GPUDriver, 1, []string{gpu0}, ""),
	}}
	claim.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
		Driver:     framework.GPUDriver,
		Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi"}}}`)},
	}}}}
	created, err := e.client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(created.UID)
	e.createPod(t, "mps-a", "mps")
	if _, err := framework.WaitForPodRunning(ctx, e.client, ns, "mps-a", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	pipe, logDir := mps.Dirs(uid)
	rec, err := e.node.CRI.WaitForContainer(ctx, ns, "mps-a", "ctr")
	if err != nil {
		t.Fatal(err)
	}
	if !contains(rec.Env, "CUDA_MPS_PIPE_DIRECTORY="+pipe) || !contains(rec.Env, "CUDA_MPS_LOG_DIRECTORY="+logDir) {
		t.Errorf("container environment lacks the MPS directories: %v", rec.Env)
	}
	mounted := map[string]bool{}
	for _, m := range rec.Mounts {
		if m.Source == m.Destination {
			mounted[m.Destination] = true
		}
	}
	if !mounted[pipe] || !mounted[logDir] {
		t.Errorf("container mounts lack %s and %s: %+v", pipe, logDir, rec.Mounts)
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
	pid, ok := mps.Running(uid)
	if !ok {
		t.Fatal("no MPS daemon running for the prepared claim")
	}

	// kill -9 of the plugin: the daemon lives on, and the restarted plugin adopts it.
	e.plugin.Kill()
	if _, ok := mps.Running(uid); !ok {
		t.Fatal("the MPS daemon died with the plugin")
	}
	if err := e.plugin.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if again, ok := mps.Running(uid); !ok || again != pid {
		t.Fatalf("after the plugin's restart: daemon %d (running %v), want %d adopted", again, ok, pid)
	}
	// The plugin and its daemon both killed (a container restart): the daemon is started again.
	e.plugin.Kill()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := e.plugin.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if again, ok := mps.Running(uid); !ok || again == pid {
		t.Fatalf("after plugin and daemon died: daemon %d (running %v), want a new one", again, ok)
	}
	if n := strings.Count(log(), "command set_default_active_thread_percentage 50"); n != 2 {
		t.Errorf("the restarted daemon was given its limits %d times in all, want 2:\n%s", n, log())
	}

	e.deletePod(t, "mps-a")
	if err := e.client.ResourceV1().ResourceClaims(ns).Delete(ctx, "mps", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, running := mps.Running(uid)
		_, statErr := os.Stat(filepath.Join(mps.Root, uid))
		return !running && os.IsNotExist(statErr), nil
	})
	if err != nil {
		t.Fatalf("MPS daemon or its directory left after the pod and claim went")
	}
	if specs, err := e.plugin.CDISpecs(); err != nil || len(specs) != 0 {
		t.Errorf("CDI specs left: %v (%v)", specs, err)
	}
}
