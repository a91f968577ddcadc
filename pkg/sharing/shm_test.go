package sharing

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// mounts counts the entries of this process's mount table at path.
func mounts(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == path {
			n++
		}
	}
	return n
}

func TestIsMountPoint(t *testing.T) {
	dir := t.TempDir()
	for path, want := range map[string]bool{"/": true, "/proc": true, dir: false} {
		if got, err := IsMountPoint(path); err != nil || got != want {
			t.Errorf("IsMountPoint(%s) = %v, %v; want %v", path, got, err, want)
		}
	}
	if _, err := IsMountPoint(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("IsMountPoint of a missing directory: %v, want not-exist", err)
	}
}

// TestShm: the claim's tmpfs is mounted once however often it is ensured, has the size and
// mode asked, and is gone with its directory after unmountShm, which is idempotent.
func TestShm(t *testing.T) {
	standin.NeedMount(t)
	dir := filepath.Join(t.TempDir(), "c1", "shm")
	for range 2 {
		if err := mountShm(dir, "8m"); err != nil {
			t.Fatal(err)
		}
	}
	if n := mounts(t, dir); n != 1 {
		t.Fatalf("%d mounts at %s after mounting twice, want 1", n, dir)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != 0x01021994 || fs.Blocks*uint64(fs.Bsize) != 8<<20 {
		t.Errorf("statfs %s: type %#x, %d bytes; want tmpfs of 8 MiB", dir, fs.Type, fs.Blocks*uint64(fs.Bsize))
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("mode of %s: %v (%v), want 1777 as /dev/shm", dir, fi.Mode(), err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := unmountShm(dir); err != nil {
			t.Fatal(err)
		}
	}
	if n := mounts(t, dir); n != 0 {
		t.Errorf("%d mounts left at %s", n, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left: %v", dir, err)
	}
	// A size tmpfs refuses is an error that names the directory, and leaves nothing mounted.
	if err := mountShm(dir, "lots"); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("mountShm with a bad size: %v", err)
	}
	if n := mounts(t, dir); n != 0 {
		t.Errorf("%d mounts at %s after a failed mount", n, dir)
	}
}

// TestEnsureWithoutMountPrivilege: a plugin that may not mount (no CAP_SYS_ADMIN) cannot start
// an MPS daemon; Ensure says what is missing and leaves nothing of the claim, and the other
// claims' directories are untouched. The test runs Ensure in a copy of the test binary as user
// nobody, so it needs the machine's root.
func TestEnsureWithoutMountPrivilege(t *testing.T) {
	if root := os.Getenv("ACCEL_DRA_NOCAP_ROOT"); root != "" {
		m := MPS{Root: root, Daemons: Processes{Control: MPSControl{Path: "/nonexistent"}}}
		_, err := m.Ensure(context.Background(), "c1", nil, MPSLimits{})
		fmt.Printf("ENSURE-ERROR: %v\n", err)
		return
	}
	standin.NeedRealRoot(t, "needs the machine's root, to run the plugin's side as another user")
	root, err := os.MkdirTemp("", "mps-nocap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(root, "c0", "log", "control.log")
	if err := os.MkdirAll(filepath.Dir(other), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is private to root; nobody runs a copy.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "sharing.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestEnsureWithoutMountPrivilege$")
	cmd.Env = append(os.Environ(), "ACCEL_DRA_NOCAP_ROOT="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"ENSURE-ERROR: mounting a tmpfs at " + filepath.Join(root, "c1", "shm"), "operation not permitted", "needs CAP_SYS_ADMIN"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "c1")); !os.IsNotExist(err) {
		t.Errorf("the refused claim left its directory: %v", err)
	}
	if b, err := os.ReadFile(other); err != nil || string(b) != "kept\n" {
		t.Errorf("another claim's file: %q, %v", b, err)
	}
}
