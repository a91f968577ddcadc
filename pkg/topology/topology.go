// Package topology turns a node's NVLink graph into the attributes a claim can constrain on
// (device.Topology): NVLink islands, aligned fully-connected groups, maximal cliques, and the
// fabric clique. It is a pure function of what the backend read, so that every profile of the
// mock and every real machine go through the same code, and its tests need no NVML.
//
// The only cross-device constraint of the GA and beta DRA APIs is matchAttribute, an equality
// of one attribute over the devices of a claim. Each attribute here is therefore the ID of a
// set of GPUs that is safe to ask for by equality:
//
//   - the island (connected component): "these GPUs can reach each other over NVLink",
//     directly or through others; with IslandFullMesh also "each two are peers";
//   - aligned groups of 2, 4 and 8: a fixed partition of a full-mesh part of the island, so
//     that claims for 2 GPUs leave whole groups of 4 for others;
//   - maximal cliques, a list: with list attributes (DRAListTypeAttributes) matchAttribute
//     asks for a common value, and a common maximal clique is exactly "pairwise peers".
//
// IDs are node-local: derived from the sorted PCI bus IDs of the set, so a restart and an
// identical node give the same bytes. That two nodes share IDs is harmless: matchAttribute
// applies within one claim's allocation, and a claim's GPUs, which are node-local devices
// (their slices name the node), are always on one node. The fabric clique is the one
// cross-node ID, and it is the fabric manager's own.
package topology

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// GPU is one whole GPU of the node as its NVLink queries describe it.
type GPU struct {
	// BusID is the GPU's PCI bus ID, lower-case extended BDF: the key of the GPU and what IDs
	// are made of.
	BusID string
	// Links is the number of its active NVLink links.
	Links int
	// Version is the NVLink version of its links, "4.0"; empty if unknown.
	Version string
	// FabricClique is "<clusterUUID>.<cliqueID>" where the fabric registration completed
	// successfully, else empty.
	FabricClique string
}

// Graph is the node's whole GPUs and which pairs are NVLink peers.
type Graph struct {
	GPUs []GPU
	// Peers are pairs of bus IDs that reach each other over NVLink in one hop: a direct link,
	// or links to one NVSwitch fabric. Order does not matter; pairs naming a GPU that is not
	// in GPUs, or one without active links, are ignored.
	Peers [][2]string
}

// GroupSizes are the sizes of the aligned groups.
var GroupSizes = []int{2, 4, 8}

// Compute returns each GPU's topology by bus ID; a GPU without an active link has none (no
// entry), so that nothing is published for it.
func Compute(g Graph) map[string]*device.Topology {
	out := map[string]*device.Topology{}
	var nodes []string
	byBus := map[string]GPU{}
	for _, gpu := range g.GPUs {
		if gpu.Links <= 0 {
			continue
		}
		byBus[gpu.BusID] = gpu
		nodes = append(nodes, gpu.BusID)
		out[gpu.BusID] = &device.Topology{Links: gpu.Links, Version: gpu.Version, FabricClique: gpu.FabricClique}
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	adj := map[string]map[string]bool{}
	for _, n := range nodes {
		adj[n] = map[string]bool{}
	}
	for _, p := range g.Peers {
		a, b := p[0], p[1]
		if a == b || adj[a] == nil || adj[b] == nil {
			continue
		}
		adj[a][b], adj[b][a] = true, true
	}
	for _, island := range components(nodes, adj) {
		if len(island) < 2 {
			// No NVLink peer on the node: nothing to match with.
			continue
		}
		id := SetID(island)
		full := isClique(island, adj)
		for _, n := range island {
			out[n].Island, out[n].IslandFullMesh = id, full
		}
		for _, k := range GroupSizes {
			for start := 0; start+k <= len(island); start += k {
				block := island[start : start+k]
				if !isClique(block, adj) {
					continue
				}
				gid := SetID(block)
				for _, n := range block {
					t := out[n]
					switch k {
					case 2:
						t.Group2 = gid
					case 4:
						t.Group4 = gid
					case 8:
						t.Group8 = gid
					}
				}
			}
		}
		for _, c := range maximalCliques(island, adj) {
			cid := SetID(c)
			for _, n := range c {
				out[n].Cliques = append(out[n].Cliques, cid)
			}
		}
	}
	for _, t := range out {
		slices.Sort(t.Cliques)
	}
	return out
}

// SetID names a set of GPUs by their bus IDs: "nvl<size>-" and 12 hex digits of the SHA-256
// of the sorted IDs. The size makes an ID readable at a glance; the digest makes two sets
// differ (48 bits: a collision within one node is not a practical concern).
func SetID(busIDs []string) string {
	s := slices.Clone(busIDs)
	slices.Sort(s)
	sum := sha256.Sum256([]byte(strings.Join(s, ",")))
	return "nvl" + strconv.Itoa(len(s)) + "-" + hex.EncodeToString(sum[:6])
}

// components returns the connected components, each sorted, in order of their first member.
func components(nodes []string, adj map[string]map[string]bool) [][]string {
	seen := map[string]bool{}
	var out [][]string
	for _, n := range nodes {
		if seen[n] {
			continue
		}
		var comp []string
		stack := []string{n}
		seen[n] = true
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			comp = append(comp, x)
			for y := range adj[x] {
				if !seen[y] {
					seen[y] = true
					stack = append(stack, y)
				}
			}
		}
		slices.Sort(comp)
		out = append(out, comp)
	}
	return out
}

func isClique(set []string, adj map[string]map[string]bool) bool {
	for i, a := range set {
		for _, b := range set[i+1:] {
			if !adj[a][b] {
				return false
			}
		}
	}
	return true
}

// maximalCliques lists the maximal cliques of the subgraph on nodes (Bron–Kerbosch with a
// pivot), each sorted, the list sorted; a node has at most NVML's 18 links' worth of
// neighbours through direct links and one switch fabric's GPUs, so the search is small.
func maximalCliques(nodes []string, adj map[string]map[string]bool) [][]string {
	var out [][]string
	var bk func(r, p, x []string)
	bk = func(r, p, x []string) {
		if len(p) == 0 && len(x) == 0 {
			c := slices.Clone(r)
			slices.Sort(c)
			out = append(out, c)
			return
		}
		pivot := ""
		best := -1
		for _, u := range append(slices.Clone(p), x...) {
			n := 0
			for _, v := range p {
				if adj[u][v] {
					n++
				}
			}
			if n > best {
				pivot, best = u, n
			}
		}
		for _, v := range slices.Clone(p) {
			if adj[pivot][v] {
				continue
			}
			var np, nx []string
			for _, w := range p {
				if adj[v][w] {
					np = append(np, w)
				}
			}
			for _, w := range x {
				if adj[v][w] {
					nx = append(nx, w)
				}
			}
			bk(append(slices.Clone(r), v), np, nx)
			p = slices.DeleteFunc(p, func(w string) bool { return w == v })
			x = append(x, v)
		}
	}
	bk(nil, slices.Clone(nodes), nil)
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(strings.Join(a, ","), strings.Join(b, ",")) })
	return out
}
