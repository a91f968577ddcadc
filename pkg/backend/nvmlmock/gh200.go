package nvmlmock

import (
	"path"
	"strconv"
	"testing/fstest"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GH200 Grace Hopper: an arm64 node whose GPU is an H100 with 96 GB of HBM3, joined to its
// 72-core Grace CPU by the cache-coherent NVLink-C2C. What such a node reports (sources in
// docs/device-attributes.md):
//
//   - NVML names the GPU "NVIDIA GH200 480GB" (480 GB is the Grace's LPDDR5X), PCI device ID
//     0x2342, 97871 MiB of memory, compute capability 9.0, at bus ID 0009:01:00.0 behind the
//     Grace's root port 0009:00:00.0.
//   - The kernel onlines the GPU's HBM as NUMA nodes without CPUs: lscpu shows 9 NUMA nodes, node
//     0 with the CPUs and nodes 1-8 with none. Node 1 is the whole GPU's memory (NVML's
//     nvmlDeviceGetNumaNodeId and CUDA's "NUMA node ID of GPU memory" say 1); nodes 2-8 are kept
//     for MIG instances and are empty while MIG is off.
//   - The GPU's PCI device, like any PCI device, has the NUMA node of its root port from ACPI
//     (_PXM): node 0, the Grace. That is the node the standard numaNode attribute publishes, so
//     that a claim can align the GPU with CPUs and NICs; NVML's memory node has no CPUs.
var gh200 = model{name: "NVIDIA GH200 480GB", arch: nvml.DEVICE_ARCH_HOPPER, ccMajor: 9, ccMinor: 0, memory: 97871 << 20, pciDevice: 0x2342, mig: true}

var gh200x1 = profile{
	description:       "1x NVIDIA GH200 480GB (Grace Hopper, arm64): GPU at 0009:01:00.0 on the Grace's NUMA node 0; its HBM is CPU-less NUMA node 1 (nodes 2-8 kept for MIG)",
	driverVersion:     driverVersion,
	cudaDriverVersion: cudaDriverVersion,
	gpus: []gpu{
		{model: gh200, busID: "0009:01:00.0", root: "pci0009:00", bridges: []string{"0009:00:00.0"}, numa: 0},
	},
}

// coherentNUMA describes the NUMA nodes of a machine whose GPU memory the kernel onlines as NUMA
// nodes (Grace Hopper, Grace Blackwell): the CPU nodes come first, then 8 nodes per GPU, the
// first of them the whole GPU's memory and the other 7 for MIG instances.
type coherentNUMA struct {
	// cpus are the cpulist of each CPU node, by node number.
	cpus []string
}

// coherentProfiles are the profiles with coherent GPU memory, by profile name.
var coherentProfiles = map[string]coherentNUMA{
	"gh200-1x": {cpus: []string{"0-71"}},
}

// nodesPerGPU is how many NUMA nodes the driver reserves per coherent GPU.
const nodesPerGPU = 8

// memoryNode is the NUMA node of GPU i's memory.
func (c coherentNUMA) memoryNode(i int) int { return len(c.cpus) + nodesPerGPU*i }

// addCoherentMemory makes a coherent profile's machine what such a node reports: NVML's
// GetNumaNodeId answers with the node of the GPU's memory (not the PCI device's numa_node), and
// /sys/devices/system/node lists the CPU nodes with their CPUs and the GPU memory nodes without.
// Other profiles are left alone.
func (s *Server) addCoherentMemory(profileName string) {
	c, ok := coherentProfiles[profileName]
	if !ok {
		return
	}
	for i, d := range s.Devices {
		node := c.memoryNode(i)
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return node, nvml.SUCCESS }
	}
	file := func(name, content string) {
		s.SysFS[path.Join("devices/system/node", name)] = &fstest.MapFile{Data: []byte(content + "\n"), Mode: 0o444}
	}
	total := c.memoryNode(len(s.Devices))
	for n := 0; n < total; n++ {
		cpus := ""
		if n < len(c.cpus) {
			cpus = c.cpus[n]
		}
		file("node"+strconv.Itoa(n)+"/cpulist", cpus)
	}
	all := make([]int, total)
	for n := range all {
		all[n] = n
	}
	file("possible", nodeList(all))
	file("online", nodeList(all))
	file("has_cpu", nodeList(all[:len(c.cpus)]))
	// With MIG off, only each GPU's first node has memory.
	withMemory := append([]int{}, all[:len(c.cpus)]...)
	for i := range s.Devices {
		withMemory = append(withMemory, c.memoryNode(i))
	}
	file("has_memory", nodeList(withMemory))
}

// nodeList formats sorted node numbers as the kernel's node lists do: "0-1,9".
func nodeList(nodes []int) string {
	out := ""
	for i := 0; i < len(nodes); {
		j := i
		for j+1 < len(nodes) && nodes[j+1] == nodes[j]+1 {
			j++
		}
		if out != "" {
			out += ","
		}
		out += strconv.Itoa(nodes[i])
		if j > i {
			out += "-" + strconv.Itoa(nodes[j])
		}
		i = j + 1
	}
	return out
}
