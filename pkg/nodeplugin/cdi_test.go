package nodeplugin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/machine"
	nvidiacdi "github.com/accel-dra/accel-dra/pkg/cdi/nvidia"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// fakeHook is a file standing in for the nvidia-cdi-hook the plugin ships.
func fakeHook(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), nvidiacdi.HookName)
	if err := os.WriteFile(p, []byte("the plugin's hook"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// enumerateSource enumerates be's devices and resolves their driver, as the plugin does at
// start-up.
func enumerateSource(ctx context.Context, t *testing.T, o *Options, be device.Backend) (*device.Inventory, *driverSource) {
	t.Helper()
	inv, err := be.Enumerate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src, err := newDriverSource(ctx, o, be, inv.Kind)
	if err != nil {
		t.Fatal(err)
	}
	return inv, src
}

// TestCommonEditsOfMockBackends: each mock backend generates its driver root in the mock
// directory, and the same generators as on a real node find the driver there.
func TestCommonEditsOfMockBackends(t *testing.T) {
	for name, want := range map[string]string{
		backend.Mock:    "/usr/bin/nvidia-smi",
		backend.NPUMock: "/usr/local/Ascend/driver/lib64",
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			o := NewOptions()
			o.Backend, o.NodeName, o.MockDir = name, "node-a", t.TempDir()
			// Ignored by the mocks: they bring their own driver.
			o.NVIDIADriverRoot, o.AscendDriverRoot = "/nonexistent", "/nonexistent"
			o.PluginDataDir, o.NVIDIACDIHookSource = t.TempDir(), fakeHook(t)
			be, err := backend.New(ctx, backend.Options{Name: name, NodeName: o.NodeName, MockDir: o.MockDir})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = be.Close() }()
			_, src := enumerateSource(ctx, t, o, be)
			e, err := src.edits(ctx)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, m := range e.Mounts {
				if m.ContainerPath == want {
					found = true
					if rel, err := filepath.Rel(o.MockDir, m.HostPath); err != nil || filepath.IsAbs(rel) || rel[:2] == ".." {
						t.Errorf("mount %s from %s, outside the mock directory %s", want, m.HostPath, o.MockDir)
					}
				}
			}
			if !found {
				t.Errorf("no mount of %s in %+v", want, e.Mounts)
			}
			// GPU specs run the hook the plugin installed under its data directory, which the
			// runtime sees at the same path; a node need not have the toolkit.
			for _, h := range e.Hooks {
				if dir := filepath.Dir(filepath.Dir(h.Path)); dir != filepath.Join(o.PluginDataDir, nvidiacdi.HookName) {
					t.Errorf("hook %v runs %s, want the copy under %s", h.Args, h.Path, o.PluginDataDir)
				}
				if data, err := os.ReadFile(h.Path); err != nil || string(data) != "the plugin's hook" {
					t.Errorf("hook %s: %q, %v; want the installed copy of the plugin's hook", h.Path, data, err)
				}
			}
			if name == backend.Mock && len(e.Hooks) == 0 {
				t.Error("GPU edits without hooks")
			}
			// A recomputation (after a driver change) opens its own backend, the enumerating one
			// being closed by then, and finds the same driver.
			_ = be.Close()
			again, err := src.edits(ctx)
			if err != nil {
				t.Fatalf("recomputing: %v", err)
			}
			a, _ := json.Marshal(e)
			b, _ := json.Marshal(again)
			if string(a) != string(b) {
				t.Errorf("recomputed edits differ:\n%s\n%s", a, b)
			}
		})
	}
	t.Run("no driver root", func(t *testing.T) {
		o := NewOptions()
		o.Backend, o.NVIDIADriverRoot, o.AscendDriverRoot = backend.NPU, "", ""
		src, err := newDriverSource(context.Background(), o, nil, "npu")
		if err != nil {
			t.Fatal(err)
		}
		if e, err := src.edits(context.Background()); e != nil || err != nil {
			t.Errorf("got %v, %v; want no edits and no error", e, err)
		}
	})
	t.Run("unknown kind", func(t *testing.T) {
		o := NewOptions()
		if _, err := newDriverSource(context.Background(), o, nil, "tpu"); err == nil {
			t.Error("unknown kind accepted")
		}
	})
}

// TestMockDriverRootForContainers: the GPU mock's driver root holds the mock's tools (from
// --mock-tools-source) as the driver binaries that the specs mount, and the specs mount the
// machine's description, which the tools read in the container, where the driver root puts it.
// A --mock-tools-source that does not exist is an error.
func TestMockDriverRootForContainers(t *testing.T) {
	ctx := context.Background()
	newOptions := func(t *testing.T) *Options {
		o := NewOptions()
		o.Backend, o.NodeName, o.MockDir = backend.Mock, "node-a", t.TempDir()
		o.PluginDataDir, o.NVIDIACDIHookSource = t.TempDir(), fakeHook(t)
		o.MockToolsSource = filepath.Join(t.TempDir(), "accel-dra-mock-nvidia")
		if err := os.WriteFile(o.MockToolsSource, []byte("the mock's tools"), 0o755); err != nil {
			t.Fatal(err)
		}
		return o
	}
	o := newOptions(t)
	be, err := backend.New(ctx, backend.Options{Name: o.Backend, NodeName: o.NodeName, MockDir: o.MockDir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = be.Close() }()
	src, err := newDriverSource(ctx, o, be, "gpu")
	if err != nil {
		t.Fatal(err)
	}
	e, err := src.edits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mounts := map[string]string{}
	for _, m := range e.Mounts {
		mounts[m.ContainerPath] = m.HostPath
	}
	for _, bin := range []string{"/usr/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-control"} {
		if data, err := os.ReadFile(mounts[bin]); err != nil || string(data) != "the mock's tools" {
			t.Errorf("%s is mounted from %q: %q, %v; want the mock's tools", bin, mounts[bin], data, err)
		}
	}
	desc, ok := mounts["/"+machine.Path]
	if !ok {
		t.Fatalf("no mount of the machine's description /%s in %v", machine.Path, mounts)
	}
	// In the container the tools find it beside themselves.
	if want := machine.Beside("/usr/bin/nvidia-smi"); want != "/"+machine.Path {
		t.Errorf("the tools look for the description at %s, the specs mount it at /%s", want, machine.Path)
	}
	m, err := machine.Read(desc)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.GPUs) != 8 {
		t.Errorf("the description has %d GPUs, want the 8 of the default profile", len(m.GPUs))
	}

	bad := newOptions(t)
	bad.MockToolsSource = filepath.Join(t.TempDir(), "missing")
	if _, err := newDriverSource(ctx, bad, be, "gpu"); err == nil || !strings.Contains(err.Error(), bad.MockToolsSource) {
		t.Errorf("a missing --mock-tools-source: error %v, want one naming it", err)
	}
}
