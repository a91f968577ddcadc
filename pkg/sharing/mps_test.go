package sharing

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

func TestMPSDaemon(t *testing.T) {
	standin.NeedMount(t)
	bin := standin.Build(t, standin.MockTools, "nvidia-cuda-mps-control")
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
	// The daemon's /dev/shm is the claim's tmpfs: its marker is there, and it saw that
	// directory's device and inode; the host's /dev/shm has no marker.
	shm := m.ShmDir("c1")
	if _, err := os.Stat(filepath.Join(shm, "accel-dra-fakempscontrol")); err != nil {
		t.Errorf("the daemon's /dev/shm is not the claim's shm directory: %v", err)
	}
	if _, err := os.Stat("/dev/shm/accel-dra-fakempscontrol"); !os.IsNotExist(err) {
		t.Errorf("the daemon wrote into the host's /dev/shm: %v", err)
	}
	if want := shmIdentity(t, shm); !strings.Contains(string(log), want) {
		t.Errorf("daemon log lacks %q (the claim's shm directory):\n%s", want, log)
	}
	// A second Ensure (a restarted plugin) adopts the running daemon, and its tmpfs.
	if started, err := m.Ensure(ctx, "c1", []string{"GPU-a", "GPU-b"}, MPSLimits{}); err != nil || started {
		t.Errorf("second Ensure: started %v, %v; want the daemon adopted", started, err)
	}
	if again, _ := m.Running("c1"); again != pid {
		t.Errorf("daemon pid %d, was %d", again, pid)
	}
	if n := mounts(t, shm); n != 1 {
		t.Errorf("%d mounts at %s after adoption, want 1", n, shm)
	}
	// A second claim gets a tmpfs of its own.
	if _, err := m.Ensure(ctx, "c4", []string{"GPU-c"}, MPSLimits{}); err != nil {
		t.Fatal(err)
	}
	if a, b := shmIdentity(t, shm), shmIdentity(t, m.ShmDir("c4")); a == b {
		t.Errorf("two claims share one /dev/shm: %s", a)
	}
	if err := m.Stop(ctx, "c4"); err != nil {
		t.Fatal(err)
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
	for _, c := range []string{"c1", "c4"} {
		if n := mounts(t, m.ShmDir(c)); n != 0 {
			t.Errorf("%d mounts left at %s after Stop", n, m.ShmDir(c))
		}
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
	if n := mounts(t, m.ShmDir("c2")); n != 0 {
		t.Errorf("a daemon that did not start left its tmpfs mounted")
	}
}

// TestMPSDaemonShmGone: a running daemon whose claim's tmpfs is no longer mounted is not
// adopted (containers prepared now would get another /dev/shm than it has) but replaced.
func TestMPSDaemonShmGone(t *testing.T) {
	standin.NeedMount(t)
	bin := standin.Build(t, standin.MockTools, "nvidia-cuda-mps-control")
	m := MPS{Control: bin, Root: t.TempDir()}
	ctx := context.Background()
	t.Cleanup(func() { _ = m.Stop(ctx, "c1") })
	if _, err := m.Ensure(ctx, "c1", nil, MPSLimits{}); err != nil {
		t.Fatal(err)
	}
	pid, _ := m.Running("c1")
	if err := syscall.Unmount(m.ShmDir("c1"), 0); err != nil {
		t.Fatal(err)
	}
	started, err := m.Ensure(ctx, "c1", nil, MPSLimits{})
	if err != nil || !started {
		l, _ := os.ReadFile(filepath.Join(m.Root, "c1", "log", "control.log"))
		t.Fatalf("Ensure: started %v, %v; want a new daemon\n%s", started, err, l)
	}
	if again, ok := m.Running("c1"); !ok || again == pid {
		t.Errorf("daemon %d (running %v), want a new one instead of %d", again, ok, pid)
	}
	if n := mounts(t, m.ShmDir("c1")); n != 1 {
		t.Errorf("%d mounts at the claim's shm directory, want 1", n)
	}
}

// shmIdentity is how the mock's nvidia-cuda-mps-control logs a /dev/shm: the device and inode
// of dir.
func shmIdentity(t *testing.T, dir string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("daemon shm dev=%d ino=%d", st.Dev, st.Ino)
}
