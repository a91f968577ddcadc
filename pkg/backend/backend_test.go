package backend

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
