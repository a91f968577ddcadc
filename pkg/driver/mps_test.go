package driver

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

func mpsEnv(t *testing.T) (*env, *sharing.MPS) {
	bin := standin.Build(t, "github.com/accel-dra/accel-dra/e2e/fakempscontrol", "nvidia-cuda-mps-control")
	m := &sharing.MPS{Control: bin, Root: filepath.Join(t.TempDir(), "mps")}
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, dir: t.TempDir(), inv: inventory(2), kube: fake.NewClientset(), boot: bootA,
		tweak: func(o *Options) { o.MPS = m; o.ConsumableMemory = true }}
	e.start()
	t.Cleanup(func() {
		for _, uid := range []string{"m1"} {
			_ = m.Stop(e.ctx, uid)
		}
	})
	return e, m
}

func TestMPS(t *testing.T) {
	e, m := mpsEnv(t)
	c := claim("m1", []result{{Device: "gpu-0"}, {Device: "gpu-1"}},
		sharingConfig(`{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":25,"defaultPinnedDeviceMemoryLimit":"8Gi","defaultPerDevicePinnedMemoryLimit":{"gpu-1":"1.5Gi"}}}`))
	e.exist(c)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	pid, ok := m.Running("m1")
	if !ok {
		t.Fatal("no MPS daemon after prepare")
	}
	pipe, logDir := m.Dirs("m1")
	spec, err := os.ReadFile(e.specPath("m1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_MPS_LOG_DIRECTORY=" + logDir, `"hostPath":"` + pipe + `"`, `"containerPath":"` + logDir + `"`} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("CDI spec lacks %s:\n%s", want, spec)
		}
	}
	u0, u1 := e.inv.Devices[0].UUID, e.inv.Devices[1].UUID
	wantLog := []string{"CUDA_VISIBLE_DEVICES=" + u0 + "," + u1, "command set_default_active_thread_percentage 25",
		"command set_default_device_pinned_mem_limit " + u0 + " 8192M", "command set_default_device_pinned_mem_limit " + u1 + " 1536M"}
	checkLog := func(when string) {
		t.Helper()
		log, err := os.ReadFile(filepath.Join(logDir, "control.log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wantLog {
			if !strings.Contains(string(log), w) {
				t.Errorf("%s: daemon log lacks %q:\n%s", when, w, log)
			}
		}
	}
	checkLog("prepare")

	// A plugin restart adopts the running daemon.
	e.start()
	if again, ok := m.Running("m1"); !ok || again != pid {
		t.Fatalf("after a plugin restart: daemon %d running %v, want %d adopted", again, ok, pid)
	}
	// A daemon that died with the plugin (a container restart) is started again, with its limits.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := m.Running("m1"); !ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.Remove(filepath.Join(logDir, "control.log")); err != nil {
		t.Fatal(err)
	}
	e.start()
	again, ok := m.Running("m1")
	if !ok || again == pid {
		t.Fatalf("after the daemon died: running %v pid %d (was %d), want a new daemon", ok, again, pid)
	}
	checkLog("restart")

	// The kubelet's prepare of a prepared claim (after its own restart) also brings a dead
	// daemon back.
	if err := syscall.Kill(again, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := m.Running("m1"); !ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	if third, ok := m.Running("m1"); !ok || third == again {
		t.Fatalf("after prepare of a prepared claim whose daemon died: running %v pid %d", ok, third)
	}

	if err := e.unprepare("m1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Running("m1"); ok {
		t.Error("MPS daemon still running after unprepare")
	}
	if _, err := os.Stat(filepath.Join(m.Root, "m1")); !os.IsNotExist(err) {
		t.Errorf("MPS directory left after unprepare: %v", err)
	}
}

func TestMPSRefused(t *testing.T) {
	e, m := mpsEnv(t)
	share := shareClaim("s1", "gpu-0", "10Gi")
	share.Status.Allocation.Devices.Config = append(share.Status.Allocation.Devices.Config, sharingConfig(`{"strategy":"MPS"}`))
	for name, tc := range map[string]struct {
		r    func() error
		want string
	}{
		"device not in claim": {func() error {
			return e.prepare(claim("m2", []result{{Device: "gpu-0"}}, sharingConfig(`{"strategy":"MPS","mps":{"defaultPerDevicePinnedMemoryLimit":{"gpu-1":"1Gi"}}}`))).Err
		}, "sharing.mps.defaultPerDevicePinnedMemoryLimit[gpu-1]: device gpu-1 is not one of the claim's devices"},
		"share": {func() error { return e.prepare(share).Err }, "sharing.strategy: MPS cannot be used on a share of device gpu-0"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.r(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	entries, _ := os.ReadDir(m.Root)
	if len(entries) != 0 {
		t.Errorf("refused claims left MPS directories: %v", entries)
	}
}
