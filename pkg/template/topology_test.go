package template

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/device"
	accelslices "github.com/accel-dra/accel-dra/pkg/slices"
	"github.com/accel-dra/accel-dra/pkg/slices/slicestest"
	"github.com/accel-dra/accel-dra/pkg/topology"
)

// topologyAttrs are the NVLink and fabric attributes whose values are set IDs; nvlinkCliques is
// a list of them.
var topologyAttrs = []resourceapi.QualifiedName{
	accelslices.AttrNVLinkIsland, accelslices.AttrNVLinkGroup2, accelslices.AttrNVLinkGroup4,
	accelslices.AttrNVLinkGroup8, accelslices.AttrNVLinkCliques, accelslices.AttrFabricClique,
}

// profileSlices returns what the plugin publishes on nodeName for the nvmlmock profile, with
// nvlinkCliques (an API server with DRAListTypeAttributes). A non-zero busShift moves every GPU
// to another PCI bus number, as another node of the same model with other cards in other slots
// numbers them, and derives the topology again from the machine's NVLink peers (pkg/topology,
// as the backend does).
func profileSlices(t *testing.T, profile, nodeName string, busShift int) []resourceapi.ResourceSlice {
	t.Helper()
	inv, s, err := slicestest.MockInventory(profile, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	if busShift != 0 {
		renumber(t, inv, s.NVLinkPeers(), busShift)
	}
	out, err := slicestest.NodeSlices(inv, gpuDriver, nodeName, true)
	if err != nil {
		t.Fatalf("%s: %v", profile, err)
	}
	return out
}

// renumber adds shift to the bus number of every GPU's PCI bus ID, keeping their order, and
// recomputes their topology from peers (device names).
func renumber(t *testing.T, inv *device.Inventory, peers map[[2]string]bool, shift int) {
	t.Helper()
	bus := map[string]string{}
	var g topology.Graph
	for i := range inv.Devices {
		d := &inv.Devices[i]
		var dom, b, dev, fn int
		if _, err := fmt.Sscanf(d.PCIBusID, "%x:%x:%x.%x", &dom, &b, &dev, &fn); err != nil {
			t.Fatalf("%s: bus ID %q: %v", d.Name, d.PCIBusID, err)
		}
		d.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.%x", dom, b+shift, dev, fn)
		bus[d.Name] = d.PCIBusID
		if d.Topology != nil {
			g.GPUs = append(g.GPUs, topology.GPU{BusID: d.PCIBusID, Links: d.Topology.Links, Version: d.Topology.Version, FabricClique: d.Topology.FabricClique})
		}
	}
	for p := range peers {
		g.Peers = append(g.Peers, [2]string{bus[p[0]], bus[p[1]]})
	}
	topo := topology.Compute(g)
	for i := range inv.Devices {
		if inv.Devices[i].Topology != nil {
			inv.Devices[i].Topology = topo[inv.Devices[i].PCIBusID]
		}
	}
}

// TestTopologyPlaceholders: a template taken from a node with NVLink keeps every topology
// attribute as a placeholder that preserves which GPUs share an island, a group or a clique,
// carries none of the node's literal IDs, and is the same for another node of the group whose
// IDs differ (other bus numbers, another NVL72 rack).
func TestTopologyPlaceholders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile string
		// other is another node of the same group: the same profile with bus numbers shifted
		// by busShift, or another profile (another rack).
		other    string
		busShift int
		// want is the sharing of each attribute on the node (a check of the fixture, which
		// the template must keep); an attribute not named is absent.
		want map[resourceapi.QualifiedName]string
	}{
		{
			name: "bridged pairs", profile: "h100-nvl-4x", other: "h100-nvl-4x", busShift: 0x20,
			want: map[resourceapi.QualifiedName]string{
				"nvlinkIsland":  "gpu-0,gpu-1|gpu-2,gpu-3",
				"nvlinkGroup2":  "gpu-0,gpu-1|gpu-2,gpu-3",
				"nvlinkCliques": "gpu-0,gpu-1|gpu-2,gpu-3",
			},
		},
		{
			// One island that is no full mesh: the quads are the 4-groups, and the maximal
			// cliques are the two quads and the four cross-quad pairs {i, i+4}.
			name: "hybrid cube mesh", profile: "v100-8x-cube-mesh", other: "v100-8x-cube-mesh", busShift: 0x11,
			want: map[resourceapi.QualifiedName]string{
				"nvlinkIsland":  "gpu-0,gpu-1,gpu-2,gpu-3,gpu-4,gpu-5,gpu-6,gpu-7",
				"nvlinkGroup2":  "gpu-0,gpu-1|gpu-2,gpu-3|gpu-4,gpu-5|gpu-6,gpu-7",
				"nvlinkGroup4":  "gpu-0,gpu-1,gpu-2,gpu-3|gpu-4,gpu-5,gpu-6,gpu-7",
				"nvlinkCliques": "gpu-0,gpu-1,gpu-2,gpu-3|gpu-0,gpu-4|gpu-1,gpu-5|gpu-2,gpu-6|gpu-3,gpu-7|gpu-4,gpu-5,gpu-6,gpu-7",
			},
		},
		{
			name: "nvswitch", profile: "h100-8x-nvswitch", other: "h100-8x-nvswitch", busShift: 0x03,
			want: map[resourceapi.QualifiedName]string{
				"nvlinkIsland":  "gpu-0,gpu-1,gpu-2,gpu-3,gpu-4,gpu-5,gpu-6,gpu-7",
				"nvlinkGroup2":  "gpu-0,gpu-1|gpu-2,gpu-3|gpu-4,gpu-5|gpu-6,gpu-7",
				"nvlinkGroup4":  "gpu-0,gpu-1,gpu-2,gpu-3|gpu-4,gpu-5,gpu-6,gpu-7",
				"nvlinkGroup8":  "gpu-0,gpu-1,gpu-2,gpu-3,gpu-4,gpu-5,gpu-6,gpu-7",
				"nvlinkCliques": "gpu-0,gpu-1,gpu-2,gpu-3,gpu-4,gpu-5,gpu-6,gpu-7",
			},
		},
		{
			name: "fabric clique of another rack", profile: "gb200-4x", other: "gb200-4x-rack2",
			want: map[resourceapi.QualifiedName]string{
				"nvlinkIsland":  "gpu-0,gpu-1,gpu-2,gpu-3",
				"nvlinkGroup2":  "gpu-0,gpu-1|gpu-2,gpu-3",
				"nvlinkGroup4":  "gpu-0,gpu-1,gpu-2,gpu-3",
				"nvlinkCliques": "gpu-0,gpu-1,gpu-2,gpu-3",
				"fabricClique":  "gpu-0,gpu-1,gpu-2,gpu-3",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := profileSlices(t, tc.profile, "node-a", 0)
			node := inputDevices(in, gpuDriver)
			tmpl := mustBuild(t, in, BuildOptions{})
			otherTmpl := mustBuild(t, profileSlices(t, tc.other, "node-b", tc.busShift), BuildOptions{})

			// The node's literal IDs, to be found nowhere in the template.
			literal := map[string]bool{}
			for _, attr := range topologyAttrs {
				for _, d := range node {
					a := d.Attributes[attr]
					for _, v := range append(slices.Clone(a.StringValues), deref(a.StringValue)) {
						if v != "" {
							literal[v] = true
						}
					}
				}
			}
			doc, err := tmpl.marshal()
			if err != nil {
				t.Fatal(err)
			}
			for v := range literal {
				if strings.Contains(string(doc), v) {
					t.Errorf("the template carries the node's literal ID %q", v)
				}
			}

			out, err := tmpl.ResourceSlices("template-node")
			if err != nil {
				t.Fatal(err)
			}
			templated := devicesByName(out, gpuDriver)
			var tmplDevices map[string]resourceapi.Device
			for _, d := range tmpl.Drivers {
				if d.Name == gpuDriver {
					tmplDevices = map[string]resourceapi.Device{}
					for _, dev := range d.Devices {
						tmplDevices[dev.Name] = dev
					}
				}
			}
			for _, attr := range topologyAttrs {
				want := tc.want[attr]
				if got := partition(node, attr); got != want {
					t.Errorf("fixture: GPUs sharing %s: %q, want %q", attr, got, want)
				}
				if got := partition(tmplDevices, attr); got != want {
					t.Errorf("template: GPUs sharing %s: %q, want %q", attr, got, want)
				}
				if got := partition(templated, attr); got != want {
					t.Errorf("template node: GPUs sharing %s: %q, want %q", attr, got, want)
				}
				if want != "" && !slices.Contains(tmpl.IdentityAttributes, resourceapi.FullyQualifiedName(gpuDriver+"/"+string(attr))) {
					t.Errorf("identityAttributes %v lack %s", tmpl.IdentityAttributes, attr)
				}
			}

			if !tmpl.Equal(otherTmpl) {
				a, _ := tmpl.marshal()
				b, _ := otherTmpl.marshal()
				t.Errorf("another node of the group (%s, bus numbers +%#x) gives another template:\n%s", tc.other, tc.busShift, firstDifference(a, b))
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// firstDifference shows where two documents part, with some context.
func firstDifference(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-80)
	return fmt.Sprintf("...%s\n   vs\n...%s", a[from:min(len(a), i+80)], b[from:min(len(b), i+80)])
}
