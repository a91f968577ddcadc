package nvml_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/devnode"
	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
)

func server(t *testing.T, profile string) *nvmlmock.Server {
	t.Helper()
	s, err := nvmlmock.NewServer(profile, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEnumerateErrors breaks the NVML calls without which nothing can be enumerated: the error
// names the call and keeps the NVML return code reachable.
func TestEnumerateErrors(t *testing.T) {
	tests := map[string]struct {
		breakIt func(s *nvmlmock.Server)
		// wantIn are substrings the error must contain.
		wantIn []string
		// wantIs is what errors.Is must find in the error.
		wantIs error
	}{
		"init library not found": {
			breakIt: func(s *nvmlmock.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND } },
			wantIn:  []string{"libnvidia-ml.so.1 not found", "is the NVIDIA driver installed and the library mounted into the plugin container?"},
			wantIs:  nvmlbackend.ErrLibraryNotFound,
		},
		"init panics": {
			breakIt: func(s *nvmlmock.Server) { s.InitFunc = func() nvml.Return { panic("dlopen: bad ELF") } },
			wantIn:  []string{"libnvidia-ml.so.1 not found", "dlopen: bad ELF"},
			wantIs:  nvmlbackend.ErrLibraryNotFound,
		},
		"init driver not loaded": {
			breakIt: func(s *nvmlmock.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED } },
			wantIn:  []string{"kernel driver is not loaded"},
			wantIs:  nvml.ERROR_DRIVER_NOT_LOADED,
		},
		"device count": {
			breakIt: func(s *nvmlmock.Server) {
				s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNINITIALIZED }
			},
			wantIn: []string{"DeviceGetCount"},
			wantIs: nvml.ERROR_UNINITIALIZED,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := server(t, "h100-8x-2numa")
			tc.breakIt(s)
			inv, err := s.Backend().Enumerate(context.Background())
			if err == nil {
				t.Fatalf("Enumerate succeeded with %d devices, want an error", len(inv.Devices))
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %q does not wrap %v", err, tc.wantIs)
			}
		})
	}
}

// TestEnumerateOneDeviceFails breaks one NVML call of one GPU at a time: that GPU is reported in
// Failed, named as far as the calls before the failing one allow, and the other seven are
// enumerated unchanged.
func TestEnumerateOneDeviceFails(t *testing.T) {
	tests := map[string]struct {
		breakIt func(s *nvmlmock.Server)
		want    device.Failed
		wantIn  []string
		wantIs  error
	}{
		"handle": {
			breakIt: func(s *nvmlmock.Server) {
				orig := s.DeviceGetHandleByIndexFunc
				s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
					if i == 5 {
						return nil, nvml.ERROR_GPU_IS_LOST
					}
					return orig(i)
				}
			},
			want:   device.Failed{Index: 5},
			wantIn: []string{"gpu index 5", "DeviceGetHandleByIndex"},
			wantIs: nvml.ERROR_GPU_IS_LOST,
		},
		"minor number": {
			breakIt: func(s *nvmlmock.Server) {
				s.Devices[7].GetMinorNumberFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			},
			want:   device.Failed{Index: 7},
			wantIn: []string{"gpu index 7", "GetMinorNumber"},
			wantIs: nvml.ERROR_NOT_SUPPORTED,
		},
		"pci info": {
			breakIt: func(s *nvmlmock.Server) {
				s.Devices[4].GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.ERROR_NO_PERMISSION }
			},
			want:   device.Failed{Index: 4, Name: "gpu-4"},
			wantIn: []string{"gpu index 4", "GetPciInfo"},
			wantIs: nvml.ERROR_NO_PERMISSION,
		},
		"garbage bus id": {
			breakIt: func(s *nvmlmock.Server) {
				s.Devices[6].GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
					var p nvml.PciInfo
					copy(p.BusId[:], "garbage")
					return p, nvml.SUCCESS
				}
			},
			want:   device.Failed{Index: 6, Name: "gpu-6"},
			wantIn: []string{"gpu index 6", "GetPciInfo", `"garbage"`},
		},
		"uuid": {
			breakIt: func(s *nvmlmock.Server) {
				s.Devices[0].GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
			},
			want:   device.Failed{Index: 0, Name: "gpu-0", PCIBusID: "0000:1b:00.0"},
			wantIn: []string{"gpu index 0", "GetUUID"},
			wantIs: nvml.ERROR_GPU_IS_LOST,
		},
		"name": {
			breakIt: func(s *nvmlmock.Server) {
				s.Devices[1].GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
			},
			want:   device.Failed{Index: 1, Name: "gpu-1", PCIBusID: "0000:43:00.0"},
			wantIn: []string{"gpu index 1", "GetName"},
			wantIs: nvml.ERROR_UNKNOWN,
		},
		"compute capability": {
			breakIt: func(s *nvmlmock.Server) {
				s.Devices[2].GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_UNKNOWN }
			},
			want:   device.Failed{Index: 2, Name: "gpu-2", PCIBusID: "0000:52:00.0"},
			wantIn: []string{"gpu index 2", "GetCudaComputeCapability"},
			wantIs: nvml.ERROR_UNKNOWN,
		},
		"memory": {
			breakIt: func(s *nvmlmock.Server) {
				s.Devices[3].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
			},
			want:   device.Failed{Index: 3, Name: "gpu-3", PCIBusID: "0000:61:00.0"},
			wantIn: []string{"gpu index 3", "GetMemoryInfo"},
			wantIs: nvml.ERROR_GPU_IS_LOST,
		},
		"duplicate minor": {
			breakIt: func(s *nvmlmock.Server) {
				s.Devices[6].GetMinorNumberFunc = func() (int, nvml.Return) { return 2, nvml.SUCCESS }
			},
			want:   device.Failed{Index: 6, Name: "gpu-2", PCIBusID: "0000:d1:00.0"},
			wantIn: []string{"gpu index 6", "minor number 2", "gpu index 2"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := server(t, "h100-8x-2numa")
			want, err := s.Backend().Enumerate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			tc.breakIt(s)
			inv, err := s.Backend().Enumerate(context.Background())
			if err != nil {
				t.Fatalf("Enumerate failed for one bad GPU: %v", err)
			}
			if len(inv.Failed) != 1 {
				t.Fatalf("Failed = %+v, want one device", inv.Failed)
			}
			f := inv.Failed[0]
			if f.Index != tc.want.Index || f.Name != tc.want.Name || f.PCIBusID != tc.want.PCIBusID {
				t.Errorf("Failed = index %d name %q bus %q, want %d %q %q", f.Index, f.Name, f.PCIBusID, tc.want.Index, tc.want.Name, tc.want.PCIBusID)
			}
			for _, w := range tc.wantIn {
				if f.Err == nil || !strings.Contains(f.Err.Error(), w) {
					t.Errorf("error %v does not contain %q", f.Err, w)
				}
			}
			if tc.wantIs != nil && !errors.Is(f.Err, tc.wantIs) {
				t.Errorf("error %v does not wrap %v", f.Err, tc.wantIs)
			}
			// The others are exactly what an undamaged machine yields.
			var rest []device.Device
			for _, d := range want.Devices {
				if d.Index != f.Index {
					rest = append(rest, d)
				}
			}
			if diff := cmp.Diff(rest, inv.Devices); diff != "" {
				t.Errorf("other devices changed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDriverVersionFails: the host's driver version is informational; without it every GPU is
// still enumerated, without a driver version.
func TestDriverVersionFails(t *testing.T) {
	s := server(t, "h100-8x-2numa")
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
	inv, err := s.Backend().Enumerate(context.Background())
	if err != nil {
		t.Fatalf("Enumerate: %v", err)
	}
	if len(inv.Devices) != 8 || len(inv.Failed) != 0 {
		t.Fatalf("%d devices, %d failed; want 8 and 0", len(inv.Devices), len(inv.Failed))
	}
	for _, d := range inv.Devices {
		if d.DriverVersion != "" {
			t.Errorf("%s: driver version %q, want none", d.Name, d.DriverVersion)
		}
	}
}

// TestNamesFollowMinor: NVML's index order and the minor numbers differ; each device is named
// after its minor, keeps its UUID and bus ID under that name, and is published in minor order.
func TestNamesFollowMinor(t *testing.T) {
	base, err := server(t, "h100-8x-2numa").Backend().Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inv, err := server(t, "h100-8x-2numa-reordered").Backend().Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != len(base.Devices) {
		t.Fatalf("%d devices, want %d", len(inv.Devices), len(base.Devices))
	}
	moved := 0
	for i, d := range inv.Devices {
		b := base.Devices[i]
		if d.Name != b.Name || d.Number != b.Number || d.UUID != b.UUID || d.PCIBusID != b.PCIBusID || d.Nodes[0] != b.Nodes[0] {
			t.Errorf("device %d: %s number %d uuid %s bus %s node %+v; want %s %d %s %s %+v",
				i, d.Name, d.Number, d.UUID, d.PCIBusID, d.Nodes[0], b.Name, b.Number, b.UUID, b.PCIBusID, b.Nodes[0])
		}
		if d.Index != b.Index {
			moved++
		}
	}
	if moved == 0 {
		t.Error("no NVML index moved: the profile does not exercise reordering")
	}
}

func TestArchitectureNotSupported(t *testing.T) {
	s := server(t, "mixed-small")
	s.Devices[1].GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	inv, err := s.Backend().Enumerate(context.Background())
	if err != nil {
		t.Fatalf("Enumerate: %v", err)
	}
	if got := inv.Devices[1].Architecture; got != "" {
		t.Errorf("architecture = %q, want empty when NVML cannot tell", got)
	}
	if got := inv.Devices[0].Architecture; got != "Ada" {
		t.Errorf("other device's architecture = %q, want Ada", got)
	}
}

// TestDeviceNodes checks the handling of missing and broken device nodes, laid out as files in
// a host's /dev (nvmlmock.WriteDevNodes) and found by the mock's stat of the real file system.
func TestDeviceNodes(t *testing.T) {
	tests := map[string]struct {
		missing string
		statErr error
		// proc: the host's /proc is configured, so a node in no dev root is built from it.
		proc    bool
		wantErr []string
		wantCtl []string
		// wantFailed is the device that must be reported in Failed.
		wantFailed string
	}{
		"all present": {
			wantCtl: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"},
		},
		"missing control node is skipped": {
			missing: "nvidia-uvm-tools",
			wantCtl: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-modeset"},
		},
		"missing optional modeset is skipped": {
			missing: "nvidia-modeset",
			wantCtl: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"},
		},
		"missing device node without /proc fails that device": {
			missing:    "nvidia2",
			wantCtl:    []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"},
			wantFailed: "gpu-2",
		},
		"missing device node is built from /proc/devices": {
			missing: "nvidia2",
			proc:    true,
			wantCtl: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"},
		},
		"unreadable control node is an error": {
			missing: "nvidiactl",
			statErr: syscall.EACCES,
			wantErr: []string{"/dev/nvidiactl", "permission denied"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := server(t, "a100-8x")
			dev := t.TempDir()
			if err := s.WriteDevNodes(dev); err != nil {
				t.Fatal(err)
			}
			if tc.missing != "" && tc.statErr == nil {
				if err := os.Remove(filepath.Join(dev, tc.missing)); err != nil {
					t.Fatal(err)
				}
			}
			var statted []string
			stat := func(p string) (devnode.Info, error) {
				statted = append(statted, p)
				if tc.statErr != nil && path.Base(p) == tc.missing {
					return devnode.Info{}, &fs.PathError{Op: "stat", Path: p, Err: tc.statErr}
				}
				return nvmlmock.StatFile(p)
			}
			opts := []nvmlbackend.Option{nvmlbackend.WithStat(stat)}
			if tc.proc {
				opts = append(opts, nvmlbackend.WithProc(s.ProcFS()))
			}
			b := nvmlbackend.New(s.Interface, s.SysFS, dev, opts...)
			inv, err := b.Enumerate(context.Background())
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatal("Enumerate succeeded, want an error")
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Enumerate: %v", err)
			}
			var ctl []string
			for _, n := range inv.ControlNodes {
				ctl = append(ctl, n.Path)
				if n.HostPath != "" {
					t.Errorf("control node %s has host path %q; the host path is the container path", n.Path, n.HostPath)
				}
			}
			if strings.Join(ctl, ",") != strings.Join(tc.wantCtl, ",") {
				t.Errorf("control nodes = %v, want %v", ctl, tc.wantCtl)
			}
			// The dev root is where nodes are statted, not where containers see them.
			for _, p := range statted {
				if !strings.HasPrefix(p, dev+"/") {
					t.Errorf("statted %q, outside the dev root %s", p, dev)
				}
			}
			var failed []string
			for _, f := range inv.Failed {
				failed = append(failed, f.Name)
			}
			if want := []string{tc.wantFailed}; tc.wantFailed != "" && !cmp.Equal(failed, want) || tc.wantFailed == "" && len(failed) > 0 {
				t.Errorf("failed devices = %v, want %q", failed, tc.wantFailed)
			}
			for _, name := range []string{"gpu-2", "gpu-5"} {
				d, ok := inv.Lookup()[name]
				if name == tc.wantFailed {
					continue
				}
				if !ok {
					t.Fatalf("%s not enumerated", name)
				}
				minor := int64(d.Number)
				if got, want := d.Nodes[0], (device.Node{Path: "/dev/nvidia" + strconv.Itoa(d.Number), Type: "c", Major: 195, Minor: minor}); got != want {
					t.Errorf("%s node = %+v, want %+v", name, got, want)
				}
			}
		})
	}
}

// TestDeviceNodeLayouts lays a mock machine's nodes out as each way of installing the driver
// does, and checks that every GPU is found, with the host path the runtime can use:
//   - host: a driver installed on the host, nodes in the host's /dev (the driver root is "/",
//     mounted into the plugin somewhere, which must not count as a dev root);
//   - operator: the GPU operator's driver container, nodes only under its root's dev/, which the
//     host sees at /run/nvidia/driver/dev (NVIDIA/gpu-operator#1741);
//   - operator, DRM: the kernel's DRM nodes are in the host's devtmpfs whatever the layout;
//   - root without dev/: a driver root that is no dev root (a package tree) leaves the nodes to
//     the host's /dev;
//   - nowhere: nothing created the nodes yet; they are built from /proc/devices and NVML.
func TestDeviceNodeLayouts(t *testing.T) {
	const opRoot = "/run/nvidia/driver"
	tests := map[string]struct {
		profile string
		// hostDev, driverDev: lay the machine's nodes out in the host's /dev, the driver root's dev/.
		hostDev, driverDev bool
		// noDriverDevDir: the driver root has no dev/ at all.
		noDriverDevDir bool
		hostRoot       string
		// wantHost is the host path of gpu-3's node; the DRM nodes' are always the container's.
		wantHost string
	}{
		"host":                 {profile: "h100-8x-2numa", hostDev: true, hostRoot: "/"},
		"operator":             {profile: "h100-8x-2numa", driverDev: true, hostRoot: opRoot, wantHost: opRoot + "/dev/nvidia3"},
		"operator, DRM":        {profile: "h100-8x-2numa-drm", driverDev: true, hostRoot: opRoot, wantHost: opRoot + "/dev/nvidia3"},
		"operator, both":       {profile: "h100-8x-2numa", hostDev: true, driverDev: true, hostRoot: opRoot, wantHost: opRoot + "/dev/nvidia3"},
		"root without dev/":    {profile: "h100-8x-2numa", hostDev: true, noDriverDevDir: true, hostRoot: "/opt/nvidia"},
		"nowhere":              {profile: "h100-8x-2numa", hostRoot: opRoot},
		"nowhere, no dev root": {profile: "h100-8x-2numa", noDriverDevDir: true, hostRoot: "/"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := server(t, tc.profile)
			hostDev, driverRoot := t.TempDir(), t.TempDir()
			driverDev := filepath.Join(driverRoot, "dev")
			if !tc.noDriverDevDir {
				if err := os.Mkdir(driverDev, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.driverDev {
				if err := s.WriteDevNodes(driverDev); err != nil {
					t.Fatal(err)
				}
			}
			if tc.hostDev {
				if err := s.WriteDevNodes(hostDev); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.WriteDRMNodes(hostDev); err != nil {
				t.Fatal(err)
			}
			drm := 0
			for _, n := range s.DevNodes() {
				if strings.HasPrefix(n.Name, "dri/") {
					drm++
				}
			}
			b := nvmlbackend.New(s.Interface, s.SysFS, hostDev, nvmlbackend.WithStat(nvmlmock.StatFile), nvmlbackend.WithProc(s.ProcFS()),
				nvmlbackend.WithDriverRoot(driverRoot, tc.hostRoot))
			inv, err := b.Enumerate(context.Background())
			if err != nil {
				t.Fatalf("Enumerate: %v", err)
			}
			if len(inv.Failed) > 0 || len(inv.Devices) != 8 {
				t.Fatalf("enumerated %d GPUs, failed %v; want 8 and none failed", len(inv.Devices), inv.Failed)
			}
			d := inv.Lookup()["gpu-3"]
			if got, want := d.Nodes[0], (device.Node{Path: "/dev/nvidia3", HostPath: tc.wantHost, Type: "c", Major: 195, Minor: 3}); got != want {
				t.Errorf("gpu-3 node = %+v, want %+v", got, want)
			}
			if got := len(d.Nodes) - 1; got != drm/8 {
				t.Errorf("gpu-3 has %d DRM nodes, want %d", got, drm/8)
			}
			for _, n := range d.Nodes[1:] {
				if !n.DRM() || n.HostPath != "" {
					t.Errorf("gpu-3's DRM node %+v: want a DRM node from the host's /dev", n)
				}
			}
			for _, n := range inv.ControlNodes {
				if n.Path == "/dev/nvidiactl" && n.HostPath != strings.TrimSuffix(tc.wantHost, "nvidia3")+map[bool]string{true: "nvidiactl", false: ""}[tc.wantHost != ""] {
					t.Errorf("control node %+v: want the host path beside gpu-3's (%q)", n, tc.wantHost)
				}
			}
		})
	}
}

// TestSysfsGaps removes sysfs entries: a GPU without a resolvable PCIe root or NUMA node is still
// published, without those values.
func TestSysfsGaps(t *testing.T) {
	s := server(t, "h100-8x-2numa")
	delete(s.SysFS, "bus/pci/devices/0000:52:00.0") // gpu-2: no symlink, so neither value
	for name := range s.SysFS {
		if strings.HasSuffix(name, "/0000:9d:00.0/numa_node") { // gpu-4: root but no NUMA file
			delete(s.SysFS, name)
		}
	}
	inv, err := s.Backend().Enumerate(context.Background())
	if err != nil {
		t.Fatalf("Enumerate: %v", err)
	}
	if d := inv.Devices[2]; d.PCIeRoot != "" || d.NUMANode != nil {
		t.Errorf("gpu-2 without sysfs entry: pcieRoot %q, numa %v; want neither", d.PCIeRoot, d.NUMANode)
	}
	if d := inv.Devices[4]; d.PCIeRoot != "pci0000:97" || d.NUMANode != nil {
		t.Errorf("gpu-4 without numa_node: pcieRoot %q, numa %v; want pci0000:97 and none", d.PCIeRoot, d.NUMANode)
	}
	if d := inv.Devices[3]; d.PCIeRoot != "pci0000:48" || d.NUMANode == nil || *d.NUMANode != 0 {
		t.Errorf("gpu-3 untouched: pcieRoot %q, numa %v", d.PCIeRoot, d.NUMANode)
	}
}

// TestInitShutdown checks that NVML is initialised once however often Enumerate runs, and shut
// down once.
func TestInitShutdown(t *testing.T) {
	s := server(t, "mixed-small")
	b := s.Backend()
	if err := b.Close(); err != nil {
		t.Fatalf("Close before Enumerate: %v", err)
	}
	if n := len(s.ShutdownCalls()); n != 0 {
		t.Errorf("Close before Enumerate called Shutdown %d times", n)
	}
	for range 3 {
		if _, err := b.Enumerate(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.InitCalls()); n != 1 {
		t.Errorf("Init called %d times, want 1", n)
	}
	for range 2 {
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
}

func TestInitRetriedAfterFailure(t *testing.T) {
	s := server(t, "mixed-small")
	fail := true
	s.InitFunc = func() nvml.Return {
		if fail {
			return nvml.ERROR_DRIVER_NOT_LOADED
		}
		return nvml.SUCCESS
	}
	b := s.Backend()
	if _, err := b.Enumerate(context.Background()); err == nil {
		t.Fatal("Enumerate succeeded while Init fails")
	}
	fail = false
	if _, err := b.Enumerate(context.Background()); err != nil {
		t.Fatalf("Enumerate after the driver came up: %v", err)
	}
}

func TestShutdownError(t *testing.T) {
	s := server(t, "mixed-small")
	s.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	b := s.Backend()
	if _, err := b.Enumerate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err == nil || !strings.Contains(err.Error(), "Shutdown") {
		t.Errorf("Close = %v, want an error naming Shutdown", err)
	}
}

// TestNewFromSystem runs against the real library loader, with NVML by its soname. On a machine
// without the NVIDIA driver it must fail with the clear message, not panic; with the driver it
// must work.
func TestNewFromSystem(t *testing.T) {
	b, err := nvmlbackend.NewFromSystem(context.Background(), "", "/sys", "/dev")
	if err == nil {
		defer b.Close()
		inv, err := b.Enumerate(context.Background())
		if err != nil {
			t.Fatalf("NVML is present but Enumerate failed: %v", err)
		}
		t.Skipf("NVML present: %d GPUs; the missing-library path cannot be tested here", len(inv.Devices))
	}
	if !errors.Is(err, nvmlbackend.ErrLibraryNotFound) && !strings.Contains(err.Error(), "kernel driver") {
		t.Errorf("NewFromSystem without NVIDIA driver: %v; want ErrLibraryNotFound", err)
	}
	t.Logf("NewFromSystem: %v", err)
}
