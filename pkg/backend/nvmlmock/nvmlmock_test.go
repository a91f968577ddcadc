package nvmlmock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/device"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current output")

var (
	bdfFormat  = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	uuidFormat = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

func enumerate(t *testing.T, profile, node string, opts ...Option) *device.Inventory {
	t.Helper()
	b, err := New(profile, node, opts...)
	if err != nil {
		t.Fatalf("New(%q, %q): %v", profile, node, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if b.Kind() != device.KindGPU {
		t.Errorf("Kind() = %q, want gpu", b.Kind())
	}
	inv, err := b.Enumerate(context.Background())
	if err != nil {
		t.Fatalf("Enumerate(%s): %v", profile, err)
	}
	return inv
}

func TestProfiles(t *testing.T) {
	got := Profiles()
	want := []string{"a100-8x", "a100-8x-mig", "a100-8x-nvswitch", "a100-pcie-4x", "broken-driver-version", "gb200-4x", "gb200-4x-fabric-in-progress", "gb200-4x-rack2", "gh200-1x", "h100-8x-2numa", "h100-8x-2numa-drm", "h100-8x-2numa-reordered", "h100-8x-2numa-swapped", "h100-8x-mig", "h100-8x-nvswitch", "h100-8x-nvswitch-link-down", "h100-8x-one-broken", "h100-nvl-4x", "l40s-4x", "mig-mixed", "mig-mixed-drm", "mixed-small", "v100-8x-cube-mesh"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Profiles() mismatch (-want +got):\n%s", diff)
	}
	for _, p := range got {
		if Describe(p) == "" {
			t.Errorf("profile %s has no description", p)
		}
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New("v100-4x", "node-a")
	if err == nil {
		t.Fatal("New with an unknown profile succeeded")
	}
	for _, p := range Profiles() {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not list valid profile %q", err, p)
		}
	}
	if _, err := New("a100-8x", ""); err == nil {
		t.Error("New without a node name succeeded")
	}
}

func i64(v int64) *int64 { return &v }

func TestEnumerateProfiles(t *testing.T) {
	type want struct {
		product, arch, cc string
		memory            int64
		pcieRoots         []string
		numa              []*int64
		busIDs            []string
		driverVersion     string
		controlNodes      []string
		// indices are the NVML indices in device (minor) order; nil means the same as the minor.
		indices []int
	}
	allCtl := []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}
	noModeset := allCtl[:3]
	tests := map[string]want{
		"a100-8x": {
			product: "NVIDIA A100-SXM4-40GB", arch: "Ampere", cc: "8.0", memory: 42949672960,
			pcieRoots:     []string{"pci0000:00", "pci0000:00", "pci0000:40", "pci0000:40", "pci0000:80", "pci0000:80", "pci0000:a0", "pci0000:a0"},
			numa:          []*int64{i64(0), i64(0), i64(0), i64(0), i64(1), i64(1), i64(1), i64(1)},
			busIDs:        []string{"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0", "0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"},
			driverVersion: "570.124.06",
			controlNodes:  allCtl,
		},
		"h100-8x-2numa": {
			product: "NVIDIA H100 80GB HBM3", arch: "Hopper", cc: "9.0", memory: 85899345920,
			pcieRoots:     []string{"pci0000:15", "pci0000:15", "pci0000:48", "pci0000:48", "pci0000:97", "pci0000:97", "pci0000:c7", "pci0000:c7"},
			numa:          []*int64{i64(0), i64(0), i64(0), i64(0), i64(1), i64(1), i64(1), i64(1)},
			busIDs:        []string{"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"},
			driverVersion: "570.124.06",
			controlNodes:  allCtl,
		},
		"h100-8x-2numa-reordered": {
			product: "NVIDIA H100 80GB HBM3", arch: "Hopper", cc: "9.0", memory: 85899345920,
			pcieRoots:     []string{"pci0000:15", "pci0000:15", "pci0000:48", "pci0000:48", "pci0000:97", "pci0000:97", "pci0000:c7", "pci0000:c7"},
			numa:          []*int64{i64(0), i64(0), i64(0), i64(0), i64(1), i64(1), i64(1), i64(1)},
			busIDs:        []string{"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"},
			driverVersion: "570.124.06",
			controlNodes:  allCtl,
			indices:       []int{2, 1, 3, 0, 6, 5, 7, 4},
		},
		"mixed-small": {
			pcieRoots:     []string{"pci0000:00", "pci0001:00"},
			numa:          []*int64{i64(0), nil},
			busIDs:        []string{"0000:01:00.0", "0001:00:04.0"},
			driverVersion: "570.124.06",
			controlNodes:  noModeset,
		},
		"broken-driver-version": {
			pcieRoots:     []string{"pci0000:00", "pci0001:00"},
			numa:          []*int64{i64(0), nil},
			busIDs:        []string{"0000:01:00.0", "0001:00:04.0"},
			driverVersion: "bad-version",
			controlNodes:  noModeset,
		},
	}
	for profile, w := range tests {
		t.Run(profile, func(t *testing.T) {
			inv := enumerate(t, profile, "node-a")
			if inv.Kind != device.KindGPU {
				t.Errorf("inventory kind = %q", inv.Kind)
			}
			if len(inv.Devices) != len(w.busIDs) {
				t.Fatalf("got %d devices, want %d", len(inv.Devices), len(w.busIDs))
			}
			var names, roots, busIDs []string
			var numa []*int64
			for i, d := range inv.Devices {
				wantIndex := i
				if w.indices != nil {
					wantIndex = w.indices[i]
				}
				names = append(names, d.Name)
				roots = append(roots, d.PCIeRoot)
				busIDs = append(busIDs, d.PCIBusID)
				numa = append(numa, d.NUMANode)
				if d.Number != i || d.Index != wantIndex || d.Name != device.NameFor(device.KindGPU, i) || d.Kind != device.KindGPU {
					t.Errorf("device %d: number %d, index %d, name %q, kind %q; want number %d, index %d", i, d.Number, d.Index, d.Name, d.Kind, i, wantIndex)
				}
				if !bdfFormat.MatchString(d.PCIBusID) {
					t.Errorf("%s: pciBusID %q is not a lower-case extended BDF", d.Name, d.PCIBusID)
				}
				if !uuidFormat.MatchString(d.UUID) {
					t.Errorf("%s: UUID %q is not in GPU-8-4-4-4-12 form", d.Name, d.UUID)
				}
				if d.DriverVersion != w.driverVersion {
					t.Errorf("%s: driver version %q, want %q", d.Name, d.DriverVersion, w.driverVersion)
				}
				wantNode := device.Node{Path: "/dev/nvidia" + strings.TrimPrefix(d.Name, "gpu-"), Type: "c", Major: 195, Minor: int64(i)}
				if diff := cmp.Diff([]device.Node{wantNode}, d.Nodes); diff != "" {
					t.Errorf("%s: nodes mismatch (-want +got):\n%s", d.Name, diff)
				}
				if w.product == "" {
					continue
				}
				if d.ProductName != w.product || d.Architecture != w.arch || d.CUDAComputeCapability != w.cc || d.MemoryBytes != w.memory {
					t.Errorf("%s: got %q %q cc %q %d bytes, want %q %q cc %q %d bytes", d.Name,
						d.ProductName, d.Architecture, d.CUDAComputeCapability, d.MemoryBytes, w.product, w.arch, w.cc, w.memory)
				}
			}
			if !slices.IsSorted(names) { // fewer than 10 devices: string order is index order
				t.Errorf("devices not sorted: %v", names)
			}
			if diff := cmp.Diff(w.pcieRoots, roots); diff != "" {
				t.Errorf("pcieRoots mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(w.busIDs, busIDs); diff != "" {
				t.Errorf("pciBusIDs mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(w.numa, numa); diff != "" {
				t.Errorf("NUMA nodes mismatch (-want +got):\n%s", diff)
			}
			var ctl []string
			for _, n := range inv.ControlNodes {
				ctl = append(ctl, n.Path)
				if n.Type != "c" || n.Major == 0 {
					t.Errorf("control node %+v has no type/major", n)
				}
			}
			if diff := cmp.Diff(w.controlNodes, ctl); diff != "" {
				t.Errorf("control nodes mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestVariants checks the variants of the DGX H100 against the base machine: the same GPU keeps
// its name and UUID whatever its NVML index; a swapped board shows another UUID under the same
// name; a lost GPU is reported, named, and the others are untouched.
func TestVariants(t *testing.T) {
	base := enumerate(t, "h100-8x-2numa", "node-a")
	byName := base.Lookup()
	uuidOf := func(inv *device.Inventory) map[string]string {
		m := map[string]string{}
		for _, d := range inv.Devices {
			m[d.Name] = d.UUID
		}
		return m
	}
	baseUUIDs := uuidOf(base)

	t.Run("reordered", func(t *testing.T) {
		inv := enumerate(t, "h100-8x-2numa-reordered", "node-a")
		if diff := cmp.Diff(baseUUIDs, uuidOf(inv)); diff != "" {
			t.Errorf("UUIDs by name differ from the base machine (-want +got):\n%s", diff)
		}
		for _, d := range inv.Devices {
			b := byName[d.Name]
			if d.PCIBusID != b.PCIBusID || !cmp.Equal(d.Nodes, b.Nodes) {
				t.Errorf("%s: bus %s nodes %v, want %s %v", d.Name, d.PCIBusID, d.Nodes, b.PCIBusID, b.Nodes)
			}
		}
	})
	t.Run("swapped", func(t *testing.T) {
		got := uuidOf(enumerate(t, "h100-8x-2numa-swapped", "node-a"))
		want := maps.Clone(baseUUIDs)
		want["gpu-0"], want["gpu-1"] = baseUUIDs["gpu-1"], baseUUIDs["gpu-0"]
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("UUIDs by name (-want +got):\n%s", diff)
		}
	})
	t.Run("one broken", func(t *testing.T) {
		inv := enumerate(t, "h100-8x-one-broken", "node-a")
		var rest []device.Device
		for _, d := range base.Devices {
			if d.Name != "gpu-3" {
				rest = append(rest, d)
			}
		}
		if diff := cmp.Diff(rest, inv.Devices); diff != "" {
			t.Errorf("devices other than gpu-3 (-want +got):\n%s", diff)
		}
		if len(inv.Failed) != 1 {
			t.Fatalf("failed devices %+v, want gpu-3", inv.Failed)
		}
		f := inv.Failed[0]
		if f.Name != "gpu-3" || f.Index != 3 || f.PCIBusID != "0000:61:00.0" || !errors.Is(f.Err, nvml.ERROR_GPU_IS_LOST) {
			t.Errorf("failed device %+v (%v), want gpu-3 index 3 at 0000:61:00.0, GPU_IS_LOST", f, f.Err)
		}
	})
	t.Run("other nodes differ", func(t *testing.T) {
		other := uuidOf(enumerate(t, "h100-8x-2numa-reordered", "node-b"))
		for name, u := range other {
			if u == baseUUIDs[name] {
				t.Errorf("%s has the same UUID on node-a and node-b", name)
			}
		}
	})
}

func TestMixedSmallModels(t *testing.T) {
	inv := enumerate(t, "mixed-small", "node-a")
	type model struct {
		Product, Arch, CC string
		Memory            int64
	}
	var got []model
	for _, d := range inv.Devices {
		got = append(got, model{d.ProductName, d.Architecture, d.CUDAComputeCapability, d.MemoryBytes})
	}
	want := []model{
		{"NVIDIA L4", "Ada", "8.9", 24 << 30},
		{"Tesla T4", "Turing", "7.5", 16 << 30},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mixed-small models mismatch (-want +got):\n%s", diff)
	}
}

func uuids(inv *device.Inventory) []string {
	var out []string
	for _, d := range inv.Devices {
		out = append(out, d.UUID)
	}
	return out
}

func TestUUIDStability(t *testing.T) {
	for _, profile := range Profiles() {
		t.Run(profile, func(t *testing.T) {
			first := uuids(enumerate(t, profile, "node-a"))
			again := uuids(enumerate(t, profile, "node-a"))
			if diff := cmp.Diff(first, again); diff != "" {
				t.Errorf("UUIDs changed between two backends for the same node (-first +again):\n%s", diff)
			}
			seen := map[string]bool{}
			for _, u := range first {
				if seen[u] {
					t.Errorf("UUID %s appears twice on one node", u)
				}
				seen[u] = true
			}
			for _, u := range uuids(enumerate(t, profile, "node-b")) {
				if seen[u] {
					t.Errorf("UUID %s is on both node-a and node-b", u)
				}
			}
		})
	}
}

func TestWithDeviceDriverVersion(t *testing.T) {
	inv := enumerate(t, "h100-8x-2numa", "node-a", WithDeviceDriverVersion(3, "not.a.semver.version"))
	for _, d := range inv.Devices {
		want := "570.124.06"
		if d.Index == 3 {
			want = "not.a.semver.version"
		}
		if d.DriverVersion != want {
			t.Errorf("%s: driver version %q, want %q", d.Name, d.DriverVersion, want)
		}
	}
}

func TestServerTopology(t *testing.T) {
	tests := map[string]struct {
		profile string
		a, b    int
		want    nvml.GpuTopologyLevel
	}{
		"same gpu":                 {profile: "h100-8x-2numa", a: 2, b: 2, want: nvml.TOPOLOGY_INTERNAL},
		"a100 pair on one switch":  {profile: "a100-8x", a: 0, b: 1, want: nvml.TOPOLOGY_SINGLE},
		"a100 same numa, two root": {profile: "a100-8x", a: 1, b: 2, want: nvml.TOPOLOGY_NODE},
		"h100 same root":           {profile: "h100-8x-2numa", a: 0, b: 1, want: nvml.TOPOLOGY_HOSTBRIDGE},
		"h100 same numa":           {profile: "h100-8x-2numa", a: 1, b: 3, want: nvml.TOPOLOGY_NODE},
		"h100 across sockets":      {profile: "h100-8x-2numa", a: 3, b: 4, want: nvml.TOPOLOGY_SYSTEM},
		"mixed, no numa":           {profile: "mixed-small", a: 0, b: 1, want: nvml.TOPOLOGY_SYSTEM},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := NewServer(tc.profile, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			got, ret := s.DeviceGetTopologyCommonAncestor(s.Devices[tc.a], s.Devices[tc.b])
			if ret != nvml.SUCCESS || got != tc.want {
				t.Errorf("common ancestor of %d and %d = %v, %v; want %v", tc.a, tc.b, got, ret, tc.want)
			}
		})
	}
}

func TestServerNUMAMatchesSysfs(t *testing.T) {
	s, err := NewServer("mixed-small", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if n, ret := s.Devices[0].GetNumaNodeId(); ret != nvml.SUCCESS || n != 0 {
		t.Errorf("L4 GetNumaNodeId = %d, %v; want 0, SUCCESS", n, ret)
	}
	if _, ret := s.Devices[1].GetNumaNodeId(); ret == nvml.SUCCESS {
		t.Error("T4 without NUMA affinity answered GetNumaNodeId with SUCCESS")
	}
	d, ret := s.DeviceGetHandleByPciBusId("00000001:00:04.0")
	if ret != nvml.SUCCESS || d != s.Devices[1] {
		t.Errorf("DeviceGetHandleByPciBusId(T4) = %v, %v", d, ret)
	}
}

// TestGolden pins the whole inventory of every profile for node "node-a"; run with -update to
// rewrite testdata/<profile>.golden.json after an intended change.
func TestGolden(t *testing.T) {
	for _, profile := range Profiles() {
		t.Run(profile, func(t *testing.T) {
			got, err := json.MarshalIndent(enumerate(t, profile, "node-a"), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			file := filepath.Join("testdata", profile+".golden.json")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("reading golden file (run with -update to create it): %v", err)
			}
			if !bytes.Equal(want, got) {
				t.Errorf("%s differs from the inventory (-want +got):\n%s", file, cmp.Diff(string(want), string(got)))
			}
		})
	}
}
