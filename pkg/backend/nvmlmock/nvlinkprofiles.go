package nvmlmock

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU models of the NVLink profiles. Names, PCI device IDs and memory are what NVML reports on
// these products (nvidia-smi -q; PCI IDs from the pci.ids database). MIG is not modelled for
// them: they answer GetMigMode with NOT_SUPPORTED, like GPUs without MIG.
var (
	v100SXM32  = model{name: "Tesla V100-SXM2-32GB", arch: nvml.DEVICE_ARCH_VOLTA, ccMajor: 7, ccMinor: 0, memory: 32 * gib, pciDevice: 0x1db5}
	l40s       = model{name: "NVIDIA L40S", arch: nvml.DEVICE_ARCH_ADA, ccMajor: 8, ccMinor: 9, memory: 46068 << 20, pciDevice: 0x26b9}
	h100NVL    = model{name: "NVIDIA H100 NVL", arch: nvml.DEVICE_ARCH_HOPPER, ccMajor: 9, ccMinor: 0, memory: 95830 << 20, pciDevice: 0x2321}
	a100PCIe80 = model{name: "NVIDIA A100 80GB PCIe", arch: nvml.DEVICE_ARCH_AMPERE, ccMajor: 8, ccMinor: 0, memory: 81920 << 20, pciDevice: 0x20b5}
	gb200      = model{name: "NVIDIA GB200", arch: nvml.DEVICE_ARCH_BLACKWELL, ccMajor: 10, ccMinor: 0, memory: 189471 << 20, pciDevice: 0x2941}
)

// gb200Cluster is the cluster UUID the fabric manager of the mock NVL72 rack reports; the
// second rack's differs in its last byte. Every node of one rack reports the same UUID and
// clique ID: that is what makes the clique a cross-node ID.
var gb200Cluster = [16]byte{0x7a, 0x1d, 0x3c, 0x52, 0x9e, 0x04, 0x4b, 0x8f, 0xa1, 0x6e, 0x2d, 0x90, 0x5b, 0xc3, 0x77, 0x01}

// pcieQuad is a two-socket PCIe server with four GPUs, two per socket, each pair behind one
// PCIe switch: where NVLink bridges join GPUs 0-1 and 2-3 (the H100 NVL and A100 PCIe
// reference configurations bridge adjacent cards in pairs).
func pcieQuad(m model) []gpu {
	return []gpu{
		{model: m, busID: "0000:17:00.0", root: "pci0000:15", bridges: []string{"0000:15:01.0", "0000:16:00.0", "0000:16:01.0"}, numa: 0},
		{model: m, busID: "0000:18:00.0", root: "pci0000:15", bridges: []string{"0000:15:01.0", "0000:16:00.0", "0000:16:02.0"}, numa: 0},
		{model: m, busID: "0000:98:00.0", root: "pci0000:96", bridges: []string{"0000:96:01.0", "0000:97:00.0", "0000:97:01.0"}, numa: 1},
		{model: m, busID: "0000:99:00.0", root: "pci0000:96", bridges: []string{"0000:96:01.0", "0000:97:00.0", "0000:97:02.0"}, numa: 1},
	}
}

// bridgedPairs wires GPU 2k to 2k+1 with links each (NVIDIA H100 NVL product brief: three
// NVLink bridges per pair, 600 GB/s, 12 NVLink 4 links; A100 PCIe: three NVLink bridges,
// 600 GB/s, 12 NVLink 3 links).
func bridgedPairs(n, links int, v nvml.NvlinkVersion) *nvlinkGraph {
	m := make([][]int, n)
	for i := range m {
		m[i] = make([]int, n)
	}
	for i := 0; i+1 < n; i += 2 {
		m[i][i+1], m[i+1][i] = links, links
	}
	return direct(m, v)
}

// dgx1CubeMesh is the DGX-1 with V100 (NVIDIA DGX-1 With Tesla V100 System Architecture white
// paper, "hybrid cube-mesh"; nvidia-smi topo -m on a DGX-1V): two fully connected quads, 0-3
// and 4-7, with some edges doubled, and GPU i joined to i+4; six NVLink 2 links per GPU. One
// island, not a full mesh: GPU 0 and GPU 5 are no peers.
var dgx1CubeMesh = [][]int{
	{0, 1, 1, 2, 2, 0, 0, 0},
	{1, 0, 2, 1, 0, 2, 0, 0},
	{1, 2, 0, 2, 0, 0, 1, 0},
	{2, 1, 2, 0, 0, 0, 0, 1},
	{2, 0, 0, 0, 0, 1, 1, 2},
	{0, 2, 0, 0, 1, 0, 2, 1},
	{0, 0, 1, 0, 1, 2, 0, 2},
	{0, 0, 0, 1, 2, 1, 2, 0},
}

func init() {
	dgxH100 := profiles["h100-8x-2numa"]
	dgxA100 := profiles["a100-8x"]
	// The HGX baseboard's NVSwitches are PCI devices of the host (bridge class, shown by
	// lspci as "NVIDIA Corporation Device 22a3"); their bus IDs here are illustrative.
	hgxH100 := switched(8, []int{5, 4, 4, 5}, []string{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"}, nvml.NVLINK_VERSION_4_0)
	hgxA100 := switched(8, []int{2, 2, 2, 2, 2, 2}, []string{"0000:c4:00.0", "0000:c5:00.0", "0000:c6:00.0", "0000:c7:00.0", "0000:c8:00.0", "0000:c9:00.0"}, nvml.NVLINK_VERSION_3_0)

	add := func(name, description string, base profile, g *nvlinkGraph) {
		p := base
		p.description = description
		p.uuidProfile = ""
		p.nvlink = g
		profiles[name] = p
	}
	add("h100-8x-nvswitch", "HGX H100 8x (the h100-8x-2numa machine with its NVLink): 18 NVLink 4 links per GPU to four NVSwitches (5,4,4,5); one 8-GPU full-mesh island", dgxH100, hgxH100)
	add("a100-8x-nvswitch", "HGX A100 8x (the a100-8x machine with its NVLink): 12 NVLink 3 links per GPU, 2 to each of six NVSwitches; one 8-GPU full-mesh island", dgxA100, hgxA100)
	add("h100-8x-nvswitch-link-down", "h100-8x-nvswitch with every NVLink link of gpu-7 down (the island shrinks to gpu-0..6) and link 0 of gpu-3 down (17 active links)", dgxH100, hgxH100.down(7).down(3, 0))

	quad := profile{driverVersion: driverVersion, cudaDriverVersion: cudaDriverVersion, modeset: true}
	quad.gpus = pcieQuad(h100NVL)
	add("h100-nvl-4x", "4x NVIDIA H100 NVL (PCIe) with NVLink bridges joining gpu-0+gpu-1 and gpu-2+gpu-3 (12 NVLink 4 links each): two 2-GPU islands", quad, bridgedPairs(4, 12, nvml.NVLINK_VERSION_4_0))
	quad.gpus = pcieQuad(a100PCIe80)
	add("a100-pcie-4x", "4x NVIDIA A100 80GB PCIe with NVLink bridges joining gpu-0+gpu-1 and gpu-2+gpu-3 (12 NVLink 3 links each): two 2-GPU islands", quad, bridgedPairs(4, 12, nvml.NVLINK_VERSION_3_0))
	quad.gpus = pcieQuad(l40s)
	add("l40s-4x", "4x NVIDIA L40S (PCIe, no NVLink): no NVLink attributes", quad, nil)

	// DGX-1V: bus IDs of a real DGX-1; pairs of GPUs behind one PLX PCIe switch, two switches per
	// socket.
	v100 := func(bus, root, sw, port string, numa int) gpu {
		return gpu{model: v100SXM32, busID: bus, root: root, bridges: []string{root[3:7] + ":" + root[8:] + ":02.0", sw, port}, numa: numa}
	}
	dgx1 := profile{driverVersion: driverVersion, cudaDriverVersion: cudaDriverVersion, modeset: true, gpus: []gpu{
		v100("0000:06:00.0", "pci0000:00", "0000:03:00.0", "0000:04:08.0", 0),
		v100("0000:07:00.0", "pci0000:00", "0000:03:00.0", "0000:04:10.0", 0),
		v100("0000:0a:00.0", "pci0000:00", "0000:08:00.0", "0000:09:08.0", 0),
		v100("0000:0b:00.0", "pci0000:00", "0000:08:00.0", "0000:09:10.0", 0),
		v100("0000:85:00.0", "pci0000:80", "0000:82:00.0", "0000:83:08.0", 1),
		v100("0000:86:00.0", "pci0000:80", "0000:82:00.0", "0000:83:10.0", 1),
		v100("0000:89:00.0", "pci0000:80", "0000:87:00.0", "0000:88:08.0", 1),
		v100("0000:8a:00.0", "pci0000:80", "0000:87:00.0", "0000:88:10.0", 1),
	}}
	add("v100-8x-cube-mesh", "DGX-1V: 8x Tesla V100-SXM2-32GB in a hybrid cube-mesh (quads 0-3 and 4-7 fully connected, gpu-i to gpu-i+4; 6 NVLink 2 links per GPU): one island that is not a full mesh", dgx1, direct(dgx1CubeMesh, nvml.NVLINK_VERSION_2_0))

	// GB200 NVL72 compute tray: two Grace CPUs, each with two B200 GPUs behind its own root
	// port (NUMA node of its Grace); every GPU has 18 NVLink 5 links, one to each NVSwitch chip
	// of the rack's nine switch trays, which are not on the tray's PCI bus. The fabric manager
	// registers every GPU of the rack in one clique (NVIDIA GB200 NVL72 and IMEX documentation).
	// The CPU-less NUMA nodes of the GPUs' coherent memory are not modelled here (gh200.go).
	gb := func(bus string, numa int) gpu {
		dom := bus[:4]
		return gpu{model: gb200, busID: bus, root: "pci" + dom + ":00", bridges: []string{dom + ":00:00.0"}, numa: numa}
	}
	tray := profile{driverVersion: driverVersion, cudaDriverVersion: cudaDriverVersion, modeset: true, gpus: []gpu{
		gb("0008:01:00.0", 0), gb("0009:01:00.0", 0), gb("0018:01:00.0", 1), gb("0019:01:00.0", 1),
	}}
	rack := func(last byte, clique uint32, state uint8) *nvlinkGraph {
		g := switched(4, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, make([]string, 18), nvml.NVLINK_VERSION_5_0)
		u := gb200Cluster
		u[15] = last
		g.fabric = &fabric{clusterUUID: u, cliqueID: clique, state: state, status: nvml.SUCCESS}
		return g
	}
	add("gb200-4x", "GB200 NVL72 compute tray: 4x NVIDIA GB200, 18 NVLink 5 links each to the rack's NVSwitches; fabric clique 7a1d3c52-9e04-4b8f-a16e-2d905bc37701.32766, shared by every node of this profile", tray, rack(0x01, 32766, nvml.GPU_FABRIC_STATE_COMPLETED))
	add("gb200-4x-rack2", "gb200-4x in a second NVL72 rack: fabric clique 7a1d3c52-9e04-4b8f-a16e-2d905bc37702.32766", tray, rack(0x02, 32766, nvml.GPU_FABRIC_STATE_COMPLETED))
	add("gb200-4x-fabric-in-progress", "gb200-4x whose fabric registration has not completed (state IN_PROGRESS): NVLink island, no fabric clique", tray, rack(0x01, 32766, nvml.GPU_FABRIC_STATE_IN_PROGRESS))
}
