package sharing

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

func TestMPSDaemon(t *testing.T) {
	bin := standin.Build(t, "github.com/accel-dra/accel-dra/e2e/fakempscontrol", "nvidia-cuda-mps-control")
	m := MPS{Control: bin, Root: t.TempDir()}
	ctx := context.Background()
	started, err := m.Ensure(ctx, "c1", []string{"GPU-a", "GPU-b"}, MPSLimits{ActiveThreadPercentage: 50, PinnedMemoryMiB: map[string]int64{"GPU-b": 10240}})
	if err != nil || !started {
		t.Fatalf("Ensure: started %v, %v", started, err)
	}
	pid, ok := m.Running("c1")
	if !ok {
		t.Fatal("daemon not running after Ensure")
	}
	_, logDir := m.Dirs("c1")
	log, err := os.ReadFile(filepath.Join(logDir, "control.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", "command set_default_active_thread_percentage 50", "command set_default_device_pinned_mem_limit GPU-b 10240M"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("daemon log lacks %q:\n%s", want, log)
		}
	}
	// A second Ensure (a restarted plugin) adopts the running daemon.
	if started, err := m.Ensure(ctx, "c1", []string{"GPU-a", "GPU-b"}, MPSLimits{}); err != nil || started {
		t.Errorf("second Ensure: started %v, %v; want the daemon adopted", started, err)
	}
	if again, _ := m.Running("c1"); again != pid {
		t.Errorf("daemon pid %d, was %d", again, pid)
	}
	if err := m.Stop(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Running("c1"); ok {
		t.Error("daemon still running after Stop")
	}
	if _, err := os.Stat(filepath.Join(m.Root, "c1")); !os.IsNotExist(err) {
		t.Errorf("claim directory left after Stop: %v", err)
	}
	if err := m.Stop(ctx, "c1"); err != nil {
		t.Errorf("Stop of a stopped claim: %v", err)
	}
	// A pid file naming a live process that is not the claim's daemon (the pid was reused after
	// a reboot or in a new pid namespace): it is neither adopted nor stopped.
	pipe, _ := m.Dirs("c3")
	if err := os.MkdirAll(pipe, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.Root, "c3", "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Running("c3"); ok {
		t.Error("a foreign process counts as the claim's daemon")
	}
	if err := m.Stop(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
	// A control binary that cannot start a daemon is an error, and leaves nothing.
	bad := MPS{Control: filepath.Join(t.TempDir(), "missing"), Root: m.Root}
	if _, err := bad.Ensure(ctx, "c2", nil, MPSLimits{}); err == nil {
		t.Error("Ensure with a missing binary succeeded")
	}
	if _, err := os.Stat(filepath.Join(m.Root, "c2")); !os.IsNotExist(err) {
		t.Errorf("a daemon that did not start left its directory: %v", err)
	}
}
