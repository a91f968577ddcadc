package nvml_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/devnode"
	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// capNodes are the nodes the driver's capabilities files prescribe for a MIG device: the
// nvidia-caps major of /proc/devices, the minor and the mode (0444) of the GPU- and
// compute-instance access files.
func capNodes(gpuMinor, gi, ci int) []device.Node {
	node := func(minor int) device.Node {
		return device.Node{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor), Type: "c", Major: nvmlmock.CapsMajor, Minor: int64(minor), FileMode: 0o444}
	}
	return []device.Node{node(nvmlmock.CapMinor(gpuMinor, gi, -1)), node(nvmlmock.CapMinor(gpuMinor, gi, ci))}
}

// TestMIGCapNodes: the /dev/nvidia-caps nodes of static MIG devices (made by an operator or a
// containerised MIG manager) and of the instances the plugin creates are built from /proc, never
// stat-ed under the dev root: in the plugin's container nothing creates them there (NVML makes
// the instance, not its node), and the mock's /dev has none.
func TestMIGCapNodes(t *testing.T) {
	tests := map[string]struct {
		profile string
		// create is the GPU (minor) on which to create a 1-slice instance at placement 0;
		// -1 checks the profile's static MIG devices instead.
		create int
	}{
		"static, mig-mixed":   {profile: "mig-mixed", create: -1},
		"dynamic, mig-mixed":  {profile: "mig-mixed", create: 1},
		"dynamic, A100 (DGX)": {profile: "a100-8x-mig", create: 5},
		"dynamic, H100 (DGX)": {profile: "h100-8x-mig", create: 7},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := server(t, tc.profile)
			s.UseStateDir(t.TempDir())
			var statted []string
			stat := func(p string) (devnode.Info, error) {
				statted = append(statted, p)
				return s.Stat(p)
			}
			b := s.Backend(nvmlbackend.WithStat(stat))
			inv, err := b.Enumerate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Failed) > 0 {
				t.Fatalf("failed devices: %v", inv.Failed[0].Err)
			}
			if tc.create < 0 {
				var n int
				for _, d := range inv.Devices {
					if d.MIG == nil {
						continue
					}
					n++
					in := d.MIG.Instance
					if diff := cmp.Diff(capNodes(d.Number, in.GI, in.CI), d.Nodes[1:]); diff != "" {
						t.Errorf("%s caps nodes (-want +got):\n%s", d.Name, diff)
					}
					if diff := cmp.Diff(in.CapNodes, d.Nodes[1:]); diff != "" {
						t.Errorf("%s instance's caps nodes differ from the device's (-instance +device):\n%s", d.Name, diff)
					}
				}
				if n != 4 {
					t.Errorf("%d static MIG devices, want mig-mixed's four", n)
				}
			} else {
				var parent *device.MIGParent
				for i := range inv.MIGParents {
					if inv.MIGParents[i].GPU.Number == tc.create {
						parent = &inv.MIGParents[i]
					}
				}
				if parent == nil {
					t.Fatalf("gpu-%d is not in MIG mode", tc.create)
				}
				gi, err := b.CreateGI(ctx, parent.GPU.UUID, nvml.GPU_INSTANCE_PROFILE_1_SLICE, device.MIGPlacement{Start: 0, Size: 1})
				if err != nil {
					t.Fatal(err)
				}
				in, err := b.CreateCI(ctx, parent.GPU.UUID, gi)
				if err != nil {
					t.Fatalf("CreateCI: %v", err)
				}
				if diff := cmp.Diff(capNodes(tc.create, gi, in.CI), in.CapNodes); diff != "" {
					t.Errorf("caps nodes (-want +got):\n%s", diff)
				}
			}
			for _, p := range statted {
				if strings.Contains(p, "nvidia-caps") {
					t.Errorf("stat-ed %s: caps nodes come from /proc, not the host's /dev", p)
				}
			}
		})
	}
}

// overlayFS is base with some files replaced and some gone.
type overlayFS struct {
	base    fs.FS
	replace fstest.MapFS
	gone    string
}

func (o overlayFS) Open(name string) (fs.File, error) {
	if name == o.gone {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if _, ok := o.replace[name]; ok {
		return o.replace.Open(name)
	}
	return o.base.Open(name)
}

// TestMIGCapNodesBadProc: when /proc does not say what a MIG device's caps nodes are, the GPU
// is reported as failed with the file and what is wrong with it, and the other GPUs are still
// published.
func TestMIGCapNodesBadProc(t *testing.T) {
	const gi1 = "driver/nvidia/capabilities/gpu0/mig/gi1/access"
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := map[string]struct {
		replace fstest.MapFS
		gone    string
		noProc  bool
		wantErr []string
	}{
		"no proc filesystem": {noProc: true, wantErr: []string{"no proc filesystem configured"}},
		"no /proc/devices":   {gone: "devices", wantErr: []string{"devices", "file does not exist"}},
		"driver has no nvidia-caps": {
			replace: fstest.MapFS{"devices": file("Character devices:\n195 nvidia\n510 nvidia-caps-imex-channels\n\nBlock devices:\n509 nvidia-caps\n")},
			wantErr: []string{"no character device nvidia-caps in /proc/devices", "is the NVIDIA driver loaded?"},
		},
		"access file missing": {gone: gi1, wantErr: []string{gi1, "file does not exist"}},
		"no mode":             {replace: fstest.MapFS{gi1: file("DeviceFileMinor: 12\n")}, wantErr: []string{"/proc/" + gi1, "no DeviceFileMode line"}},
		"no minor":            {replace: fstest.MapFS{gi1: file("DeviceFileMode: 292\n")}, wantErr: []string{"/proc/" + gi1, "no DeviceFileMinor line"}},
		"bad minor":           {replace: fstest.MapFS{gi1: file("DeviceFileMinor: -1\nDeviceFileMode: 292\n")}, wantErr: []string{"/proc/" + gi1, `invalid DeviceFileMinor "-1"`}},
		"mode beyond permission bits": {
			replace: fstest.MapFS{gi1: file("DeviceFileMinor: 12\nDeviceFileMode: 4096\n")},
			wantErr: []string{"/proc/" + gi1, `invalid DeviceFileMode "4096"`},
		},
		"octal mode": {
			replace: fstest.MapFS{gi1: file("DeviceFileMinor: 12\nDeviceFileMode: 0o444\n")},
			wantErr: []string{"/proc/" + gi1, `invalid DeviceFileMode "0o444"`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := server(t, "mig-mixed")
			var proc fs.FS = overlayFS{base: s.ProcFS(), replace: tc.replace, gone: tc.gone}
			if tc.noProc {
				proc = nil
			}
			inv, err := s.Backend(nvmlbackend.WithProc(proc)).Enumerate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Failed) != 1 || inv.Failed[0].Name != "gpu-0" {
				t.Fatalf("failed devices %v, want gpu-0", inv.Failed)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(inv.Failed[0].Err.Error(), w) {
					t.Errorf("error %q does not contain %q", inv.Failed[0].Err, w)
				}
			}
			if lookup := inv.Lookup(); lookup["gpu-3"] == nil || lookup["gpu-4"] == nil || len(inv.MIGParents) != 2 {
				t.Errorf("the other GPUs are not all published: %d devices, %d MIG parents", len(inv.Devices), len(inv.MIGParents))
			}
		})
	}
}
