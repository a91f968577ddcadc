package nvml_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
)

// boundChild is the environment variable that makes TestProcessCallsItsFirstLibrary's child
// process run: two library paths, separated by a colon.
const boundChild = "ACCEL_DRA_TEST_BOUND_LIBRARIES"

// TestProcessCallsItsFirstLibrary runs real go-nvml over two real shared libraries that stand
// in for libnvidia-ml (built with the C compiler cgo needs; each reports its own driver
// version), in a process of its own, since what it shows lasts for the life of the process: a
// process that initialised NVML from one library and shut it down runs that library's code
// when it loads another by path (the second reports the first's version), which is why the
// backend refuses the second with ErrLibraryBound, naming the first; and why the plugin follows
// a replaced driver by starting a new process. If go-nvml ever loads each library apart, the
// child's check of the raw second library fails, and the refusal can go.
func TestProcessCallsItsFirstLibrary(t *testing.T) {
	if libs := os.Getenv(boundChild); libs != "" {
		first, second, _ := strings.Cut(libs, ":")
		if err := runBoundChild(first, second); err != nil {
			fmt.Println("FAIL:", err)
			os.Exit(1)
		}
		fmt.Println("OK")
		os.Exit(0)
	}
	cc, err := exec.LookPath(os.Getenv("CC"))
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Skip("no C compiler to build the stand-in libraries")
		}
	}
	dir := t.TempDir()
	var libs []string
	for _, v := range []string{"570.1.1", "580.2.2"} {
		src := filepath.Join(dir, v+".c")
		// NVML's functions that go-nvml's Init and the test call, with NVML's signatures.
		code := `#include <string.h>
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "stand-in"; }
int nvmlSystemGetDriverVersion(char *v, unsigned int n) { strncpy(v, "` + v + `", n); return 0; }
`
		if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		lib := filepath.Join(dir, v, "libnvidia-ml.so."+v)
		if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-o", lib, src).CombinedOutput(); err != nil {
			t.Skipf("cannot build a stand-in library with %s: %v\n%s", cc, err, out)
		}
		libs = append(libs, lib)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcessCallsItsFirstLibrary$")
	cmd.Env = append(os.Environ(), boundChild+"="+strings.Join(libs, ":"))
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.ENOEXEC) {
		// hack/test-arm64.sh runs the test binary under qemu-user (go test -exec), which a
		// child process started here does not go through.
		t.Skipf("the test binary cannot start itself as a child here (an emulated architecture): %v", err)
	}
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Errorf("child process: %v\n%s", err, out)
	}
}

// runBoundChild is the child's part: the backend of the first library, closed; then the second.
func runBoundChild(first, second string) error {
	ctx := context.Background()
	b, err := nvmlbackend.NewFromSystem(ctx, first, "/sys", "/dev")
	if err != nil {
		return fmt.Errorf("the first library: %w", err)
	}
	if v, ret := b.Library().SystemGetDriverVersion(); ret != nvml.SUCCESS || v != "570.1.1" {
		return fmt.Errorf("the first library reports %q, %v; want 570.1.1", v, ret)
	}
	if err := b.Close(); err != nil {
		return err
	}
	if got := nvmlbackend.BoundLibrary(""); got != first {
		return fmt.Errorf("the process calls %q, want %s", got, first)
	}
	if b, err := nvmlbackend.NewFromSystem(ctx, second, "/sys", "/dev"); !errors.Is(err, nvmlbackend.ErrLibraryBound) || !strings.Contains(err.Error(), first) {
		if b != nil {
			_ = b.Close()
		}
		return fmt.Errorf("a backend of the second library: %v; want ErrLibraryBound naming %s", err, first)
	}
	// What the refusal avoids: go-nvml's NVML of the second library runs the first's code.
	raw := nvml.New(nvml.WithLibraryPath(second))
	if ret := raw.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("go-nvml Init of the second library: %v", ret)
	}
	defer raw.Shutdown()
	if v, ret := raw.SystemGetDriverVersion(); ret != nvml.SUCCESS || v != "570.1.1" {
		return fmt.Errorf("go-nvml's NVML of the second library reports %q, %v: it no longer runs the first library's code (570.1.1), so ErrLibraryBound may be unneeded", v, ret)
	}
	return nil
}
