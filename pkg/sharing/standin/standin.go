// Package standin builds the project's stand-ins for the NVIDIA tools (the GPU mock's tools,
// cmd/accel-dra-mock-nvidia) for unit tests, and runs tests that mount in a namespace of their
// own.
package standin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// MockTools is the GPU mock's tools: one binary that runs as the tool its name says
// (nvidia-smi, nvidia-cuda-mps-control, ...), so Build it with the name it must run as.
const MockTools = "github.com/accel-dra/accel-dra/cmd/accel-dra-mock-nvidia"

// Build builds the stand-in at importPath into a temporary directory as name and returns its
// path. It is built for the machine the test runs on, not for the test's GOOS/GOARCH: under
// `make test-arm64` the test runs under qemu-user emulation, whose children are started by the
// host kernel, which runs a host binary and cannot run an arm64 one.
func Build(t testing.TB, importPath, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, importPath)
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "GOOS", "GOARCH", "GOARM64", "CC", "CGO_ENABLED":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", importPath, err, out)
	}
	return bin
}

// mountNSEnv marks the copy of a test binary that Main started in a mount namespace of its own:
// "root" (a new mount namespace) or "user" (a new user namespace too, with the caller as root).
const mountNSEnv = "ACCEL_DRA_TEST_MOUNT_NS"

// startedEnv names the file the copy creates when it starts.
const startedEnv = "ACCEL_DRA_TEST_MOUNT_NS_STARTED"

// Main runs a package's tests in a mount namespace of their own when it can, so that the
// tmpfs mounts of MPS daemons (pkg/sharing) are real but neither seen by nor left on the
// machine, even by a test that crashes: as root it re-executes the test binary in a new mount
// namespace; otherwise in a new user namespace too, where the caller is root, if the kernel
// allows that. Where neither works the tests run here, and those that mount skip (NeedMount).
// A package's TestMain calls it after sharing.RunDaemonCommand.
func Main(m *testing.M) {
	if os.Getenv(mountNSEnv) != "" {
		if started := os.Getenv(startedEnv); started != "" {
			_ = os.WriteFile(started, nil, 0o644)
		}
		os.Exit(m.Run())
	}
	self, err := os.Executable()
	// The copy says that it started, so that a copy that could not even start (a test binary
	// run under qemu-user emulation, which the host kernel cannot execute) is told from tests
	// that failed.
	var started string
	if err == nil {
		var dir string
		if dir, err = os.MkdirTemp("", "standin-"); err == nil {
			started = filepath.Join(dir, "started")
		}
	}
	if err == nil {
		cmd := exec.Command(self, os.Args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		// Unshareflags (not Cloneflags) for the mount namespace: then exec makes / private, so
		// nothing mounted inside propagates back.
		attr := &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
		kind := "root"
		if os.Geteuid() != 0 {
			kind = "user"
			attr.Cloneflags = syscall.CLONE_NEWUSER
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
		cmd.SysProcAttr = attr
		cmd.Env = append(os.Environ(), mountNSEnv+"="+kind, startedEnv+"="+started)
		err = cmd.Run()
		_, serr := os.Stat(started)
		_ = os.RemoveAll(filepath.Dir(started))
		if serr == nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				os.Exit(exit.ExitCode())
			}
			if err == nil {
				os.Exit(0)
			}
		} else if err == nil {
			err = errors.New("the copy did not start")
		}
	}
	fmt.Fprintf(os.Stderr, "standin: tests run without a mount namespace of their own (%v); those that mount are skipped\n", err)
	os.Exit(m.Run())
}

// NeedMount skips t unless it runs (under Main) where it may mount.
func NeedMount(t testing.TB) {
	t.Helper()
	if os.Getenv(mountNSEnv) == "" {
		skipOutsideCI(t, "needs a mount namespace of its own to mount the MPS /dev/shm tmpfs: run as root or where unprivileged user namespaces are allowed, through standin.Main")
	}
}

// skipOutsideCI skips t on a developer's machine, but fails it in CI (CI=true), which runs as
// root on amd64 and must run every mount test; the arm64 run under qemu-user emulation, whose
// copies cannot start (Main), still skips: the same code is tested natively on amd64.
func skipOutsideCI(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" && runtime.GOARCH == "amd64" {
		t.Fatalf("%s (CI=true: CI runs as root on amd64, where this test must run)", why)
	}
	t.Skip(why)
}

// NeedRealRoot skips t unless the tests run as root of the machine (RealRoot), failing it in CI.
func NeedRealRoot(t testing.TB, why string) {
	t.Helper()
	if !RealRoot() {
		skipOutsideCI(t, why)
	}
}

// RealRoot reports whether the tests run as root of the machine (not of a user namespace):
// only then can a test drop to another user to see how the code fares without privileges.
func RealRoot() bool { return os.Getenv(mountNSEnv) == "root" }

// Mknod makes the character device major:minor at path, for a test's own /dev (the GPU mock's
// nvidia-smi lists the GPUs whose nodes it sees). Only root of the machine may, not root of a
// user namespace; elsewhere t is skipped, but failed in CI.
func Mknod(t testing.TB, path string, major, minor uint32) {
	t.Helper()
	err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor)))
	if errors.Is(err, unix.EPERM) {
		skipOutsideCI(t, fmt.Sprintf("mknod %s: %v: needs root of the machine (CAP_MKNOD outside a user namespace)", path, err))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Mount mounts, for a test that runs under Main, and has a new mount (not a change of
// propagation) undone when the test ends, lazily, as mounts nest.
func Mount(t testing.TB, source, target, fstype string, flags uintptr) {
	t.Helper()
	if err := syscall.Mount(source, target, fstype, flags, ""); err != nil {
		t.Fatalf("mount %q on %s (flags %#x): %v", source, target, flags, err)
	}
	if flags&(syscall.MS_SHARED|syscall.MS_SLAVE|syscall.MS_PRIVATE) == 0 {
		t.Cleanup(func() { _ = syscall.Unmount(target, syscall.MNT_DETACH) })
	}
}

// MPSDaemonPIDs are the PIDs (in the tests' PID namespace) of the mock MPS control daemons
// that started with the log directory logDir, in the order they started: the stand-in logs
// "daemon started pid=<n> ..." there. Tests use them to tell a daemon that was adopted from one
// that was started again, and to kill one.
func MPSDaemonPIDs(t testing.TB, logDir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(logDir, "control.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var pids []int
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "daemon started pid=")
		if !ok {
			continue
		}
		f, _, _ := strings.Cut(rest, " ")
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("stand-in log line %q: %v", line, err)
		}
		pids = append(pids, pid)
	}
	return pids
}
