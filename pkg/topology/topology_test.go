package topology_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/topology"
)

// machine is a mock profile enumerated by the real NVML backend, with the truth to check it
// against: which GPUs are NVLink peers, by name, from the mock's own wiring.
type machine struct {
	inv   *device.Inventory
	peers map[[2]string]bool
}

func load(t *testing.T, profile string) machine {
	t.Helper()
	s, err := nvmlmock.NewServer(profile, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	b := s.Backend()
	defer func() { _ = b.Close() }()
	inv, err := b.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return machine{inv: inv, peers: s.NVLinkPeers()}
}

func (m machine) clique(devs []*device.Device) bool {
	for i, a := range devs {
		for _, c := range devs[i+1:] {
			if !m.peers[[2]string{a.Name, c.Name}] {
				return false
			}
		}
	}
	return true
}

func (m machine) whole() []*device.Device {
	var out []*device.Device
	for i := range m.inv.Devices {
		out = append(out, &m.inv.Devices[i])
	}
	return out
}

// subsets calls f with every k-subset of devs.
func subsets(devs []*device.Device, k int, f func([]*device.Device)) {
	var rec func(start int, cur []*device.Device)
	rec = func(start int, cur []*device.Device) {
		if len(cur) == k {
			f(slices.Clone(cur))
			return
		}
		for i := start; i < len(devs); i++ {
			rec(i+1, append(cur, devs[i]))
		}
	}
	rec(0, nil)
}

// The asks of docs/device-attributes.md as the scheduler evaluates them: a claim for k GPUs
// with matchAttribute on one attribute is satisfied by a k-subset whose GPUs all have the
// attribute with one value (for the list of cliques: one value in common).
func sameString(devs []*device.Device, f func(*device.Topology) string) bool {
	v := ""
	for _, d := range devs {
		if d.Topology == nil || f(d.Topology) == "" || v != "" && f(d.Topology) != v {
			return false
		}
		v = f(d.Topology)
	}
	return true
}

func commonClique(devs []*device.Device) bool {
	var common []string
	for i, d := range devs {
		if d.Topology == nil {
			return false
		}
		if i == 0 {
			common = slices.Clone(d.Topology.Cliques)
			continue
		}
		common = slices.DeleteFunc(common, func(c string) bool { return !slices.Contains(d.Topology.Cliques, c) })
	}
	return len(common) > 0
}

// TestEveryProfile checks, on every mock profile through the real NVML backend, that each
// published set is what it claims against the mock's P2P truth: a GPU with an active link
// and a peer has an island; the island is the peers' connected component; islandFullMesh is
// exact; every aligned group and clique is pairwise connected; the cliques are maximal and
// every pairwise-connected set of GPUs has one in common (so a list matchAttribute is exact);
// and GPUs without peers, MIG devices and MIG parents have no island.
func TestEveryProfile(t *testing.T) {
	for _, p := range nvmlmock.Profiles() {
		t.Run(p, func(t *testing.T) {
			m := load(t, p)
			devs := m.whole()
			for _, d := range devs {
				tp := d.Topology
				if d.MIG != nil || len(d.Consumes) > 0 {
					if tp != nil {
						t.Errorf("%s: MIG device or parent with topology %+v", d.Name, tp)
					}
					continue
				}
				hasPeer := false
				for _, o := range devs {
					hasPeer = hasPeer || m.peers[[2]string{d.Name, o.Name}]
				}
				if hasPeer != (tp != nil && tp.Island != "") {
					t.Errorf("%s: has an NVLink peer: %v, topology %+v", d.Name, hasPeer, tp)
				}
				if tp != nil && tp.Links <= 0 {
					t.Errorf("%s: topology without links: %+v", d.Name, tp)
				}
			}
			for k := 2; k <= min(len(devs), 8); k++ {
				subsets(devs, k, func(s []*device.Device) {
					isClique := m.clique(s)
					if commonClique(s) != isClique {
						t.Errorf("%d GPUs %v: pairwise connected %v, but a common maximal clique %v", k, names(s), isClique, commonClique(s))
					}
					for size, f := range map[int]func(*device.Topology) string{
						2: func(t *device.Topology) string { return t.Group2 },
						4: func(t *device.Topology) string { return t.Group4 },
						8: func(t *device.Topology) string { return t.Group8 },
					} {
						if sameString(s, f) && !isClique {
							t.Errorf("%v share nvlinkGroup%d but are not pairwise connected", names(s), size)
						}
					}
					fullMeshIsland := sameString(s, func(t *device.Topology) string {
						if !t.IslandFullMesh {
							return ""
						}
						return t.Island
					})
					if fullMeshIsland && !isClique {
						t.Errorf("%v share a full-mesh island but are not pairwise connected", names(s))
					}
				})
			}
		})
	}
}

func names(devs []*device.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

// TestProfiles pins what each NVLink profile publishes, by count: how many GPUs have each
// attribute and how many distinct values it takes.
func TestProfiles(t *testing.T) {
	type counts struct{ gpus, values int }
	for _, tc := range []struct {
		profile  string
		island   counts
		fullMesh int // GPUs whose island is a full mesh
		group    map[int]counts
		cliques  int // distinct maximal cliques
		links    map[string]int
		version  string
		clique   string // the fabric clique of every GPU with topology
	}{
		{profile: "h100-8x-nvswitch", island: counts{8, 1}, fullMesh: 8, group: map[int]counts{2: {8, 4}, 4: {8, 2}, 8: {8, 1}}, cliques: 1,
			links: map[string]int{"gpu-0": 18, "gpu-7": 18}, version: "4.0"},
		{profile: "a100-8x-nvswitch", island: counts{8, 1}, fullMesh: 8, group: map[int]counts{2: {8, 4}, 4: {8, 2}, 8: {8, 1}}, cliques: 1,
			links: map[string]int{"gpu-0": 12}, version: "3.0"},
		// gpu-7 lost every link: the island is gpu-0..6, the second group of 4 and the group
		// of 8 are gone, and gpu-6's pair is gone; gpu-3 runs on 17 links.
		{profile: "h100-8x-nvswitch-link-down", island: counts{7, 1}, fullMesh: 7, group: map[int]counts{2: {6, 3}, 4: {4, 1}, 8: {0, 0}}, cliques: 1,
			links: map[string]int{"gpu-3": 17, "gpu-6": 18}, version: "4.0"},
		{profile: "h100-nvl-4x", island: counts{4, 2}, fullMesh: 4, group: map[int]counts{2: {4, 2}, 4: {0, 0}, 8: {0, 0}}, cliques: 2,
			links: map[string]int{"gpu-0": 12, "gpu-3": 12}, version: "4.0"},
		{profile: "a100-pcie-4x", island: counts{4, 2}, fullMesh: 4, group: map[int]counts{2: {4, 2}, 4: {0, 0}, 8: {0, 0}}, cliques: 2,
			links: map[string]int{"gpu-0": 12}, version: "3.0"},
		// The hybrid cube mesh: one island that is no full mesh; the quads are the groups of 4,
		// and the maximal cliques are the two quads and the four cross pairs.
		{profile: "v100-8x-cube-mesh", island: counts{8, 1}, fullMesh: 0, group: map[int]counts{2: {8, 4}, 4: {8, 2}, 8: {0, 0}}, cliques: 6,
			links: map[string]int{"gpu-0": 6, "gpu-5": 6}, version: "2.0"},
		{profile: "l40s-4x", group: map[int]counts{2: {}, 4: {}, 8: {}}, links: map[string]int{"gpu-0": 0}},
		{profile: "gb200-4x", island: counts{4, 1}, fullMesh: 4, group: map[int]counts{2: {4, 2}, 4: {4, 1}, 8: {0, 0}}, cliques: 1,
			links: map[string]int{"gpu-0": 18}, version: "5.0", clique: "7a1d3c52-9e04-4b8f-a16e-2d905bc37701.32766"},
		{profile: "gb200-4x-rack2", island: counts{4, 1}, fullMesh: 4, group: map[int]counts{2: {4, 2}, 4: {4, 1}, 8: {0, 0}}, cliques: 1,
			links: map[string]int{"gpu-0": 18}, version: "5.0", clique: "7a1d3c52-9e04-4b8f-a16e-2d905bc37702.32766"},
		{profile: "gb200-4x-fabric-in-progress", island: counts{4, 1}, fullMesh: 4, group: map[int]counts{2: {4, 2}, 4: {4, 1}, 8: {0, 0}}, cliques: 1,
			links: map[string]int{"gpu-0": 18}, version: "5.0"},
		{profile: "h100-8x-2numa", group: map[int]counts{2: {}, 4: {}, 8: {}}, links: map[string]int{"gpu-0": 0}},
		{profile: "mig-mixed", group: map[int]counts{2: {}, 4: {}, 8: {}}},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			m := load(t, tc.profile)
			count := func(f func(*device.Topology) string) counts {
				values := map[string]bool{}
				n := 0
				for _, d := range m.inv.Devices {
					if d.Topology != nil && f(d.Topology) != "" {
						n++
						values[f(d.Topology)] = true
					}
				}
				return counts{n, len(values)}
			}
			if got := count(func(t *device.Topology) string { return t.Island }); got != tc.island {
				t.Errorf("island: %+v, want %+v", got, tc.island)
			}
			full := 0
			cliques := map[string]bool{}
			for _, d := range m.inv.Devices {
				if d.Topology == nil {
					continue
				}
				if d.Topology.IslandFullMesh {
					full++
				}
				for _, c := range d.Topology.Cliques {
					cliques[c] = true
				}
				if d.Topology.Version != tc.version {
					t.Errorf("%s: version %q, want %q", d.Name, d.Topology.Version, tc.version)
				}
				if d.Topology.FabricClique != tc.clique {
					t.Errorf("%s: fabric clique %q, want %q", d.Name, d.Topology.FabricClique, tc.clique)
				}
			}
			if full != tc.fullMesh {
				t.Errorf("%d GPUs in a full-mesh island, want %d", full, tc.fullMesh)
			}
			if len(cliques) != tc.cliques {
				t.Errorf("%d maximal cliques, want %d", len(cliques), tc.cliques)
			}
			for k, want := range tc.group {
				got := count(func(t *device.Topology) string {
					return map[int]string{2: t.Group2, 4: t.Group4, 8: t.Group8}[k]
				})
				if got != want {
					t.Errorf("group %d: %+v, want %+v", k, got, want)
				}
			}
			for name, want := range tc.links {
				for _, d := range m.inv.Devices {
					if d.Name != name {
						continue
					}
					got := 0
					if d.Topology != nil {
						got = d.Topology.Links
					}
					if got != want {
						t.Errorf("%s: %d links, want %d", name, got, want)
					}
				}
			}
		})
	}
}

// TestCubeMeshIslandIsNotEnough is why the island alone is no answer to "4 connected GPUs" on
// a hybrid cube mesh, and the published alternatives are: some 4 GPUs of the one island are
// not pairwise connected, and none of them shares a group of 4 or a clique.
func TestCubeMeshIslandIsNotEnough(t *testing.T) {
	m := load(t, "v100-8x-cube-mesh")
	var bad, good int
	subsets(m.whole(), 4, func(s []*device.Device) {
		if !sameString(s, func(t *device.Topology) string { return t.Island }) {
			t.Fatalf("%v: not one island", names(s))
		}
		if m.clique(s) {
			good++
			return
		}
		bad++
		if sameString(s, func(t *device.Topology) string { return t.Group4 }) || commonClique(s) {
			t.Errorf("%v: not pairwise connected, yet matched by group or clique", names(s))
		}
	})
	// 70 subsets of 4 of 8 GPUs; the two quads are the only 4-cliques.
	if good != 2 || bad != 68 {
		t.Errorf("%d pairwise-connected and %d other 4-GPU sets of the island, want 2 and 68", good, bad)
	}
}

// TestDeterministic: the input's order does not change any ID, and IDs are the sets' own.
func TestDeterministic(t *testing.T) {
	g := topology.Graph{}
	for _, b := range []string{"0000:0a:00.0", "0000:0b:00.0", "0000:0c:00.0", "0000:0d:00.0", "0000:0e:00.0"} {
		g.GPUs = append(g.GPUs, topology.GPU{BusID: b, Links: 4, Version: "3.0"})
	}
	// A square 0a-0b-0c-0d-0a with the diagonal 0a-0c, and 0e alone.
	g.Peers = [][2]string{{"0000:0a:00.0", "0000:0b:00.0"}, {"0000:0b:00.0", "0000:0c:00.0"}, {"0000:0c:00.0", "0000:0d:00.0"}, {"0000:0d:00.0", "0000:0a:00.0"}, {"0000:0a:00.0", "0000:0c:00.0"}}
	want := topology.Compute(g)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		h := topology.Graph{GPUs: slices.Clone(g.GPUs), Peers: slices.Clone(g.Peers)}
		r.Shuffle(len(h.GPUs), func(i, j int) { h.GPUs[i], h.GPUs[j] = h.GPUs[j], h.GPUs[i] })
		r.Shuffle(len(h.Peers), func(i, j int) { h.Peers[i], h.Peers[j] = h.Peers[j], h.Peers[i] })
		for i := range h.Peers {
			if r.IntN(2) == 0 {
				h.Peers[i] = [2]string{h.Peers[i][1], h.Peers[i][0]}
			}
		}
		if diff := cmp.Diff(want, topology.Compute(h)); diff != "" {
			t.Fatalf("another input order gives other attributes (-want +got):\n%s", diff)
		}
	}
	a := want["0000:0a:00.0"]
	if a.Island != topology.SetID([]string{"0000:0d:00.0", "0000:0c:00.0", "0000:0b:00.0", "0000:0a:00.0"}) || a.IslandFullMesh {
		t.Errorf("0a: island %q full mesh %v", a.Island, a.IslandFullMesh)
	}
	// Aligned pairs 0a+0b and 0c+0d are peers; the aligned 4 is not a clique (0b-0d missing).
	if a.Group2 == "" || want["0000:0c:00.0"].Group2 == "" || a.Group4 != "" {
		t.Errorf("groups: 0a %+v, 0c %+v", a, want["0000:0c:00.0"])
	}
	wantCliques := []string{topology.SetID([]string{"0000:0a:00.0", "0000:0b:00.0", "0000:0c:00.0"}), topology.SetID([]string{"0000:0a:00.0", "0000:0c:00.0", "0000:0d:00.0"})}
	slices.Sort(wantCliques)
	if diff := cmp.Diff(wantCliques, a.Cliques); diff != "" {
		t.Errorf("0a's cliques (-want +got):\n%s", diff)
	}
	if e := want["0000:0e:00.0"]; e == nil || e.Island != "" || e.Links != 4 {
		t.Errorf("0e, active links and no peer: %+v, want links and no island", e)
	}
}

// TestLinkFailureShrinksIsland: the same graph without the links of one GPU loses it from the
// island, and the island's ID changes with its members; a GPU without active links gets
// nothing at all, and a peer pair naming it is ignored.
func TestLinkFailureShrinksIsland(t *testing.T) {
	bus := []string{"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"}
	g := topology.Graph{}
	for _, b := range bus {
		g.GPUs = append(g.GPUs, topology.GPU{BusID: b, Links: 18, Version: "4.0"})
	}
	for i := range bus {
		for j := i + 1; j < len(bus); j++ {
			g.Peers = append(g.Peers, [2]string{bus[i], bus[j]})
		}
	}
	before := topology.Compute(g)
	g.GPUs[3].Links = 0
	after := topology.Compute(g)
	if after[bus[3]] != nil {
		t.Errorf("GPU without links: %+v, want none", after[bus[3]])
	}
	if before[bus[0]].Island == after[bus[0]].Island || after[bus[0]].Island != topology.SetID(bus[:3]) {
		t.Errorf("island before %q after %q, want the 3 remaining GPUs' ID", before[bus[0]].Island, after[bus[0]].Island)
	}
	if after[bus[0]].Group4 != "" || after[bus[2]].Group2 != "" || after[bus[0]].Group2 == "" {
		t.Errorf("groups after: %+v %+v", after[bus[0]], after[bus[2]])
	}
}
