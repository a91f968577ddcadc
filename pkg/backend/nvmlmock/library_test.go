package nvmlmock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/machine"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// TestWriteDriverIntoARoot: the mock driver installs into a root that holds other things (a
// distribution's C library, what the root's owner put there), keeps them when a driver of
// another version replaces it, and leaves no file of the version it replaced. It writes no
// description of a machine: the root serves any mock node.
func TestWriteDriverIntoARoot(t *testing.T) {
	root := t.TempDir()
	others := map[string]string{
		"usr/lib/x86_64-linux-gnu/libc.so.6": "the distribution's C library",
		"usr/lib64/ld-linux-x86-64.so.2":     "its loader",
		"usr/bin/nvidia-smi.calls":           "a record of the tools' calls",
	}
	for p, content := range others {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{"570.172.08", "580.82.07"} {
		if err := WriteDriver(root, v); err != nil {
			t.Fatal(err)
		}
	}
	for p, content := range others {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != content {
			t.Errorf("%s: %q, %v; want what was there, %q", p, b, err, content)
		}
	}
	var left []string
	if err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), "570.172.08") {
			left = append(left, p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("files of the replaced driver left: %q", left)
	}
	if lib, err := nvmlbackend.FindLibrary(root); err != nil || filepath.Base(lib) != "libnvidia-ml.so.580.82.07" {
		t.Errorf("the root's NVML: %q, %v; want libnvidia-ml.so.580.82.07", lib, err)
	}
	if _, err := os.Stat(filepath.Join(root, machine.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a machine description in the root (%v): the driver's files describe no machine", err)
	}
}

// TestWithDriverRoot: the mock's NVML "loaded" from a driver root reports the version of the
// library it finds there, as NVML reports the version of the library it is, so that a root
// replaced by another version gives backends of that version; without the driver, or with a
// library that tells no version or that the loader refuses, it fails as the real backend does.
func TestWithDriverRoot(t *testing.T) {
	writeLib := func(name, content string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			dir := filepath.Join(root, DriverLibDir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
				t.Fatal(err)
			}
			if name != nvmlbackend.LibraryName {
				if err := os.Symlink(name, filepath.Join(dir, nvmlbackend.LibraryName)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for name, tc := range map[string]struct {
		write func(t *testing.T, root string)
		// want is the driver version of the enumerated GPUs; else newErr is in New's error,
		// or enumErr in Enumerate's.
		want, newErr, enumErr string
		newIs                 error
	}{
		"installed": {write: func(t *testing.T, root string) {
			if err := WriteDriver(root, "575.57.08"); err != nil {
				t.Fatal(err)
			}
		}, want: "575.57.08"},
		"replaced": {write: func(t *testing.T, root string) {
			for _, v := range []string{"570.172.08", "580.82.07"} {
				if err := WriteDriver(root, v); err != nil {
					t.Fatal(err)
				}
			}
		}, want: "580.82.07"},
		"no driver":             {write: func(*testing.T, string) {}, newIs: nvmlbackend.ErrNoDriverLibrary},
		"no version":            {write: writeLib(nvmlbackend.LibraryName, string(sharedObject(nvmlbackend.LibraryName))), newErr: "libnvidia-ml.so.<version>"},
		"refused by the loader": {write: writeLib("libnvidia-ml.so.575.57.08", "not a library"), enumErr: nvmlbackend.ErrLibraryNotFound.Error()},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			tc.write(t, root)
			b, err := New("h100-8x-2numa", "node-a", WithDriverRoot(root))
			switch {
			case tc.newIs != nil || tc.newErr != "":
				if err == nil || tc.newIs != nil && !errors.Is(err, tc.newIs) || !strings.Contains(err.Error(), tc.newErr) {
					t.Fatalf("New = %v, want an error (%v) saying %q", err, tc.newIs, tc.newErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			defer func() { _ = b.Close() }()
			inv, err := b.Enumerate(context.Background())
			if tc.enumErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.enumErr) {
					t.Fatalf("Enumerate = %v, want an error saying %q", err, tc.enumErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(inv.Devices, func(d device.Device) bool { return d.DriverVersion != tc.want }); len(inv.Devices) == 0 || i >= 0 {
				t.Errorf("enumerated %d GPUs, want all of driver version %s: %+v", len(inv.Devices), tc.want, inv.Devices)
			}
		})
	}
}

// TestLibraryBoundToProcess: the machine's plugin process calls the first driver library it
// loaded for as long as it lives (go-nvml binds NVML's functions process-wide, nvml
// library.go): after the driver root is replaced by another version and its module loaded, a
// new backend of that process is refused (nvml.ErrLibraryBound), and NVML loaded from the new
// root without the backend answers with the old library's code, which the new module refuses;
// after Exec, the process loads the new library.
func TestLibraryBoundToProcess(t *testing.T) {
	ctx := context.Background()
	root, state := t.TempDir(), t.TempDir()
	const before, after = "570.172.08", "580.82.07"
	if err := WriteDriver(root, before); err != nil {
		t.Fatal(err)
	}
	open := func() device.Backend {
		t.Helper()
		be, err := New("h100-8x-2numa", "node-a", WithDriverRoot(root), WithStateDir(state))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = be.Close() })
		return be
	}
	version := func(be device.Backend) (string, error) {
		inv, err := be.Enumerate(ctx)
		if err != nil {
			return "", err
		}
		return inv.Devices[0].DriverVersion, nil
	}
	first := open()
	if v, err := version(first); err != nil || v != before {
		t.Fatalf("first backend: driver %q, %v; want %s", v, err, before)
	}
	_ = first.Close()
	if err := LoadModule(state, after); err != nil {
		t.Fatal(err)
	}
	if err := WriteDriver(root, after); err != nil {
		t.Fatal(err)
	}
	if v, err := version(open()); !errors.Is(err, nvmlbackend.ErrLibraryBound) || !strings.Contains(err.Error(), "libnvidia-ml.so."+before) {
		t.Errorf("a backend of the replaced root in the same process: driver %q, %v; want ErrLibraryBound naming the library the process calls", v, err)
	}
	lib := open().(interface{ Library() nvml.Interface }).Library()
	if ret := lib.Init(); ret != nvml.ERROR_LIB_RM_VERSION_MISMATCH {
		t.Errorf("NVML of the replaced root, initialised without the backend: %v; want the old library's answer under the new module, ERROR_LIB_RM_VERSION_MISMATCH", ret)
	}
	if got := nvmlbackend.BoundLibrary(Process(state)); filepath.Base(got) != "libnvidia-ml.so."+before {
		t.Errorf("the process calls %q, want the first library it loaded", got)
	}
	Exec(state)
	if v, err := version(open()); err != nil || v != after {
		t.Errorf("after exec: driver %q, %v; want %s", v, err, after)
	}
}
