package backend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
)

func TestNames(t *testing.T) {
	if diff := cmp.Diff([]string{"mock", "npu", "npu-mock", "nvml"}, Names()); diff != "" {
		t.Errorf("Names() (-want +got):\n%s", diff)
	}
}

func TestNew(t *testing.T) {
	npuDir := t.TempDir()
	sysRoot, devRoot, err := npumock.Generate(npuDir, "ascend310p-2x", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	// A driver root with the mock driver installed, as --mock-driver-root=use finds one.
	driverRoot := t.TempDir()
	if err := nvmlmock.WriteDriver(driverRoot, "575.57.08"); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		o           Options
		wantKind    device.Kind
		wantCount   int
		wantProduct string
		// wantVersion is the devices' driver version; "" for any.
		wantVersion string
		wantErr     []string
	}{
		"mock default profile": {
			o:        Options{Name: Mock, NodeName: "node-a"},
			wantKind: device.KindGPU, wantCount: 8, wantProduct: "NVIDIA H100 80GB HBM3",
		},
		"mock profile": {
			o:        Options{Name: Mock, NodeName: "node-a", MockProfile: "mixed-small"},
			wantKind: device.KindGPU, wantCount: 2, wantProduct: "NVIDIA L4",
		},
		// The mock reports the version of the driver root's library, as NVML does.
		"mock with a driver root": {
			o:        Options{Name: Mock, NodeName: "node-a", NVIDIADriverRoot: driverRoot},
			wantKind: device.KindGPU, wantCount: 8, wantProduct: "NVIDIA H100 80GB HBM3", wantVersion: "575.57.08",
		},
		"mock with a driver root without the driver": {
			o:       Options{Name: Mock, NodeName: "node-a", NVIDIADriverRoot: t.TempDir()},
			wantErr: []string{"no libnvidia-ml.so.1"},
		},
		"mock unknown profile": {
			o:       Options{Name: Mock, NodeName: "node-a", MockProfile: "nope"},
			wantErr: []string{"nope", "a100-8x", "h100-8x-2numa"},
		},
		"npu-mock default profile": {
			o:        Options{Name: NPUMock, NodeName: "node-a", MockDir: t.TempDir()},
			wantKind: device.KindNPU, wantCount: 8, wantProduct: "Ascend 910B",
		},
		"npu over a generated tree": {
			o:        Options{Name: NPU, NodeName: "node-a", SysRoot: sysRoot, DevRoot: devRoot},
			wantKind: device.KindNPU, wantCount: 2, wantProduct: "Ascend 310P",
		},
		"unknown backend": {
			o:       Options{Name: "rocm", NodeName: "node-a"},
			wantErr: []string{`"rocm"`, "mock, npu, npu-mock, nvml"},
		},
		"empty backend": {
			o:       Options{NodeName: "node-a"},
			wantErr: []string{"valid backends"},
		},
		"mock without node name": {
			o:       Options{Name: Mock},
			wantErr: []string{"node name"},
		},
		"npu-mock without node name": {
			o:       Options{Name: NPUMock, MockDir: t.TempDir()},
			wantErr: []string{"node name"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := New(context.Background(), tc.o)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("New(%+v) succeeded, want an error", tc.o)
				}
				if b != nil {
					t.Errorf("New returned a backend (%T) with its error", b)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%+v): %v", tc.o, err)
			}
			defer b.Close()
			if b.Kind() != tc.wantKind {
				t.Errorf("Kind() = %q, want %q", b.Kind(), tc.wantKind)
			}
			inv, err := b.Enumerate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Devices) != tc.wantCount || inv.Devices[0].ProductName != tc.wantProduct {
				t.Errorf("got %d devices, first %q; want %d, %q", len(inv.Devices), inv.Devices[0].ProductName, tc.wantCount, tc.wantProduct)
			}
			if tc.wantVersion != "" && inv.Devices[0].DriverVersion != tc.wantVersion {
				t.Errorf("driver version %q, want %q", inv.Devices[0].DriverVersion, tc.wantVersion)
			}
		})
	}
}

// TestNewNVML runs the real library loader: without the NVIDIA driver New must return the clear
// error and a nil backend, not a typed nil.
func TestNewNVML(t *testing.T) {
	b, err := New(context.Background(), Options{Name: NVML})
	if err == nil {
		b.Close()
		t.Skip("NVML is present on this machine")
	}
	if b != nil {
		t.Errorf("New returned a non-nil backend (%T) with error %v", b, err)
	}
	if !errors.Is(err, nvml.ErrLibraryNotFound) && !strings.Contains(err.Error(), "kernel driver") {
		t.Errorf("error %v does not wrap nvml.ErrLibraryNotFound", err)
	}
}

// TestMockDeviceLayouts runs the GPU mock as the plugin does, its device nodes files on this
// host laid out as each way of installing the driver lays them out, and checks that every GPU
// is published with the host path of a node that exists on the host:
//   - generate: the mock installs its own driver into a root under the mock directory, nodes in
//     its dev/, as a driver container does;
//   - operator: the GPU operator's driver root (seen through the chart's mount of its parent),
//     nodes only under its dev/, none in the host's /dev;
//   - host: the driver on the host (root "/"), nodes in the host's /dev;
//   - nowhere: nothing created the nodes; they are built from /proc/devices, without a host path.
func TestMockDeviceLayouts(t *testing.T) {
	const opRoot = "/run/nvidia/driver"
	s, err := nvmlmock.NewServer(DefaultMockProfile, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	// driverRoot returns a driver root with the mock driver installed, and dev/ (with the
	// machine's nodes if nodes).
	driverRoot := func(t *testing.T, dev, nodes bool) string {
		root := filepath.Join(t.TempDir(), "driver")
		if err := nvmlmock.WriteDriver(root, "575.57.08"); err != nil {
			t.Fatal(err)
		}
		if dev {
			if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if nodes {
			if err := s.WriteDevNodes(filepath.Join(root, "dev")); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	hostDev := func(t *testing.T, nodes bool) string {
		dir := t.TempDir()
		if nodes {
			if err := s.WriteDevNodes(dir); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	tests := map[string]func(t *testing.T) (o Options, hostPath string){
		"generate": func(t *testing.T) (Options, string) {
			dir := t.TempDir()
			return Options{MockDir: dir, DevRoot: hostDev(t, false)}, nvmlmock.GeneratedDriverRoot(dir) + "/dev/nvidia3"
		},
		"operator": func(t *testing.T) (Options, string) {
			return Options{NVIDIADriverRoot: driverRoot(t, true, true), NVIDIAHostDriverRoot: opRoot, DevRoot: hostDev(t, false)}, opRoot + "/dev/nvidia3"
		},
		"host": func(t *testing.T) (Options, string) {
			return Options{NVIDIADriverRoot: driverRoot(t, true, false), NVIDIAHostDriverRoot: "/", DevRoot: hostDev(t, true)}, ""
		},
		"nowhere": func(t *testing.T) (Options, string) {
			return Options{NVIDIADriverRoot: driverRoot(t, true, false), NVIDIAHostDriverRoot: opRoot, DevRoot: hostDev(t, false)}, ""
		},
	}
	for name, setup := range tests {
		t.Run(name, func(t *testing.T) {
			o, wantHost := setup(t)
			o.Name, o.NodeName = Mock, "node-a"
			b, err := New(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			inv, err := b.Enumerate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Devices) != 8 || len(inv.Failed) != 0 {
				t.Fatalf("published %d GPUs, failed %v; want 8 and none failed", len(inv.Devices), inv.Failed)
			}
			got := inv.Lookup()["gpu-3"].Nodes[0]
			if want := (device.Node{Path: "/dev/nvidia3", HostPath: wantHost, Type: "c", Major: 195, Minor: 3}); got != want {
				t.Errorf("gpu-3's node = %+v, want %+v", got, want)
			}
			if name == "generate" {
				if _, err := os.Stat(got.HostPath); err != nil {
					t.Errorf("the host path of gpu-3's node: %v", err)
				}
			}
		})
	}
}

// TestMockDriverVersionMismatch: the driver upgraded under a loaded kernel module, as a host
// package upgrade without a reboot leaves it. The mock's NVML refuses to initialise, as NVML
// does (NVML_ERROR_LIB_RM_VERSION_MISMATCH), and the backend says so with
// nvml.ErrVersionMismatch and the loaded module's version, until the module of the libraries'
// version is loaded.
func TestMockDriverVersionMismatch(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root, state := filepath.Join(t.TempDir(), "driver"), t.TempDir()
	o := Options{Name: Mock, NodeName: "node-a", NVIDIADriverRoot: root, MockDir: state}
	enumerate := func() (*device.Inventory, error) {
		t.Helper()
		// Each enumeration is a start of the plugin, a new process: a process keeps the first
		// libnvidia-ml it loaded (nvmlmock.Exec).
		nvmlmock.Exec(state)
		be, err := New(ctx, o)
		if err != nil {
			return nil, err
		}
		defer func() { _ = be.Close() }()
		return be.Enumerate(ctx)
	}
	if err := nvmlmock.WriteDriver(root, "570.172.08"); err != nil {
		t.Fatal(err)
	}
	if inv, err := enumerate(); err != nil || len(inv.Devices) != 8 {
		t.Fatalf("the driver the node booted with: %v", err)
	}
	if v, err := nvmlmock.ModuleVersion(state); err != nil || v != "570.172.08" {
		t.Fatalf("after the first Init the loaded module is %q, %v; want 570.172.08", v, err)
	}
	if err := nvmlmock.WriteDriver(root, "580.82.07"); err != nil {
		t.Fatal(err)
	}
	_, err := enumerate()
	if !errors.Is(err, nvml.ErrVersionMismatch) || !strings.Contains(err.Error(), "loaded kernel module 570.172.08") {
		t.Fatalf("the libraries upgraded under the loaded module: %v; want nvml.ErrVersionMismatch naming module 570.172.08", err)
	}
	if err := nvmlmock.LoadModule(state, "580.82.07"); err != nil {
		t.Fatal(err)
	}
	inv, err := enumerate()
	if err != nil || len(inv.Devices) != 8 || inv.Devices[0].DriverVersion != "580.82.07" {
		t.Fatalf("after the reboot: %v", err)
	}
}
