package slices_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/compat/nvidia"
	"github.com/accel-dra/accel-dra/pkg/device"
	accelslices "github.com/accel-dra/accel-dra/pkg/slices"
)

func fullGPU(n int) device.Device {
	numa := int64(0)
	return device.Device{
		Name: device.NameFor(device.KindGPU, n), Kind: device.KindGPU, Number: n, Index: n,
		UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", n), ProductName: "NVIDIA GB200", Architecture: "Blackwell",
		DriverVersion: "570.124.06", CUDAComputeCapability: "10.0", Brand: "Nvidia", CUDADriverVersion: "12.8",
		PCIBusID: fmt.Sprintf("0000:%02x:00.0", n+1), PCIeRoot: "pci0000:00", NUMANode: &numa, MemoryBytes: 1 << 30,
		Topology: &device.Topology{Island: "nvl4-f246e7b384e8", IslandFullMesh: true, Group2: "nvl2-6d65e555db16", Group4: "nvl4-f246e7b384e8",
			Group8: "nvl8-df25f300710f", Cliques: []string{"nvl4-f246e7b384e8"}, Links: 18, Version: "5.0",
			FabricClique: "7a1d3c52-9e04-4b8f-a16e-2d905bc37701.32766"},
	}
}

func TestTopologyAttributes(t *testing.T) {
	for _, tc := range []struct {
		name string
		topo *device.Topology
		want map[resourceapi.QualifiedName]string
	}{
		{name: "none", topo: nil, want: map[resourceapi.QualifiedName]string{}},
		{name: "links only", topo: &device.Topology{Links: 12, Version: "3.0"},
			want: map[resourceapi.QualifiedName]string{"nvlinkLinks": "12", "nvlinkVersion": "3.0.0"}},
		{name: "no links is no topology", topo: &device.Topology{Island: "nvl2-x"}, want: map[resourceapi.QualifiedName]string{}},
		{name: "bad version omitted", topo: &device.Topology{Links: 2, Version: "v?"}, want: map[resourceapi.QualifiedName]string{"nvlinkLinks": "2"}},
		{name: "full", topo: fullGPU(0).Topology, want: map[resourceapi.QualifiedName]string{
			"nvlinkLinks": "18", "nvlinkVersion": "5.0.0", "nvlinkIsland": "nvl4-f246e7b384e8", "nvlinkIslandFullMesh": "true",
			"nvlinkGroup2": "nvl2-6d65e555db16", "nvlinkGroup4": "nvl4-f246e7b384e8", "nvlinkGroup8": "nvl8-df25f300710f",
			"fabricClique": "7a1d3c52-9e04-4b8f-a16e-2d905bc37701.32766"}},
		{name: "island that is no full mesh", topo: &device.Topology{Links: 6, Island: "nvl8-a"},
			want: map[resourceapi.QualifiedName]string{"nvlinkLinks": "6", "nvlinkIsland": "nvl8-a", "nvlinkIslandFullMesh": "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := fullGPU(0)
			d.Topology = tc.topo
			dev, _, _, err := accelslices.ToAPI(&d)
			if err != nil {
				t.Fatal(err)
			}
			got := map[resourceapi.QualifiedName]string{}
			for name, a := range dev.Attributes {
				if !slices.Contains(topologyNames, name) {
					continue
				}
				switch {
				case a.StringValue != nil:
					got[name] = *a.StringValue
				case a.VersionValue != nil:
					got[name] = *a.VersionValue
				case a.IntValue != nil:
					got[name] = fmt.Sprint(*a.IntValue)
				case a.BoolValue != nil:
					got[name] = fmt.Sprint(*a.BoolValue)
				default:
					t.Errorf("%s: not a scalar: %+v", name, a)
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("topology attributes %v, want %v", got, tc.want)
			}
		})
	}
}

var topologyNames = []resourceapi.QualifiedName{
	accelslices.AttrNVLinkIsland, accelslices.AttrNVLinkIslandFullMesh, accelslices.AttrNVLinkGroup2, accelslices.AttrNVLinkGroup4,
	accelslices.AttrNVLinkGroup8, accelslices.AttrNVLinkLinks, accelslices.AttrNVLinkVersion, accelslices.AttrFabricClique, accelslices.AttrNVLinkCliques,
}

// TestTopologyAtTheAttributeLimit: a GPU with every attribute accel-dra can publish (its own,
// the topology's with the list, the NVIDIA compatibility mode's) fits the API's 32 attributes
// and capacities; padded to exactly 32 it is published, at 33 it is left out and reported.
func TestTopologyAtTheAttributeLimit(t *testing.T) {
	all := func(d *device.Device) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		out := nvidia.Attributes(d)
		maps.Copy(out, accelslices.TopologyListAttributes(d))
		return out
	}
	inv := &device.Inventory{Kind: device.KindGPU, Devices: []device.Device{fullGPU(0)}}
	res := accelslices.Build(inv, "node-a", accelslices.WithAttributes(all))
	dev := res.Resources.Pools["node-a"].Slices[0].Devices[0]
	used := len(dev.Attributes) + len(dev.Capacity)
	for _, name := range topologyNames {
		if _, ok := dev.Attributes[name]; !ok {
			t.Errorf("attribute %s missing", name)
		}
	}
	if used > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		t.Fatalf("a full GPU uses %d attributes and capacities, over the limit", used)
	}
	t.Logf("a GPU with every attribute uses %d of %d", used, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	for _, extra := range []int{resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice - used, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice - used + 1} {
		pad := func(d *device.Device) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
			out := all(d)
			for i := range extra {
				v := "x"
				out[resourceapi.QualifiedName(fmt.Sprintf("pad%d", i))] = resourceapi.DeviceAttribute{StringValue: &v}
			}
			return out
		}
		res := accelslices.Build(inv, "node-a", accelslices.WithAttributes(pad))
		over := used+extra > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice
		if over != (len(res.Rejected) == 1) || over == (len(res.Published) == 1) {
			t.Errorf("%d attributes and capacities: published %v, rejected %v", used+extra, res.Published, res.Rejected)
		}
	}
}

// TestTopologyListSplitsAt64: list attributes lower a slice's device limit to 64, as taints
// and counters do, so that the API server does not reject a whole slice of 128 GPUs.
func TestTopologyListSplitsAt64(t *testing.T) {
	inv := &device.Inventory{Kind: device.KindGPU}
	for n := range 65 {
		inv.Devices = append(inv.Devices, fullGPU(n))
	}
	for _, tc := range []struct {
		name  string
		attrs accelslices.AttributeFunc
		sizes []int
	}{
		{"scalar attributes only", nil, []int{65}},
		{"with the list of cliques", accelslices.TopologyListAttributes, []int{64, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := accelslices.Build(inv, "node-a", accelslices.WithAttributes(tc.attrs))
			var sizes []int
			for _, s := range res.Resources.Pools["node-a"].Slices {
				sizes = append(sizes, len(s.Devices))
			}
			if !slices.Equal(sizes, tc.sizes) {
				t.Errorf("slice sizes %v, want %v", sizes, tc.sizes)
			}
		})
	}
}

// TestTopologyAttributesDocumented: every topology attribute has its row in
// docs/device-attributes.md, so that the table cannot lose one the code publishes.
func TestTopologyAttributesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/device-attributes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## NVLink and fabric\n")
	if !ok {
		t.Fatal("docs/device-attributes.md has no section NVLink and fabric")
	}
	for _, name := range append(slices.Clone(topologyNames), accelslices.AttrHCCSGroup) {
		if !strings.Contains(section, "| `"+string(name)+"` |") && !strings.Contains(section, "`"+string(name)+"`, ") && !strings.Contains(section, ", `"+string(name)+"` |") {
			t.Errorf("attribute %s has no row in the NVLink table of docs/device-attributes.md", name)
		}
	}
}

// TestHCCSAttribute: an NPU's HCCS group is published on its own; NPUs have no NVLink.
func TestHCCSAttribute(t *testing.T) {
	d := device.Device{Name: "npu-5", Kind: device.KindNPU, Number: 5, Index: 5, UUID: "u", ProductName: "Ascend 910",
		Topology: &device.Topology{HCCS: "ring-1"}}
	dev, _, _, err := accelslices.ToAPI(&d)
	if err != nil {
		t.Fatal(err)
	}
	if a := dev.Attributes[accelslices.AttrHCCSGroup]; a.StringValue == nil || *a.StringValue != "ring-1" {
		t.Errorf("hccsGroup %+v, want ring-1", a)
	}
	for _, name := range topologyNames {
		if _, ok := dev.Attributes[name]; ok {
			t.Errorf("NPU with NVLink attribute %s", name)
		}
	}
}
