package nvmlmock

import (
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
)

func TestGH200Inventory(t *testing.T) {
	inv := enumerate(t, "gh200-1x", "node-a")
	if len(inv.Devices) != 1 {
		t.Fatalf("got %d devices, want 1", len(inv.Devices))
	}
	d := inv.Devices[0]
	type got struct {
		Product, Arch, CC, BusID, Root string
		Memory                         int64
		NUMA                           int64
	}
	numa := int64(-1)
	if d.NUMANode != nil {
		numa = *d.NUMANode
	}
	want := got{"NVIDIA GH200 480GB", "Hopper", "9.0", "0009:01:00.0", "pci0009:00", 97871 << 20, 0}
	if diff := cmp.Diff(want, got{d.ProductName, d.Architecture, d.CUDAComputeCapability, d.PCIBusID, d.PCIeRoot, d.MemoryBytes, numa}); diff != "" {
		t.Errorf("GH200 device mismatch (-want +got):\n%s", diff)
	}
}

func readSys(t *testing.T, s *Server, name string) string {
	t.Helper()
	b, err := fs.ReadFile(s.SysFS, name)
	if err != nil {
		t.Fatalf("sysfs %s: %v", name, err)
	}
	return strings.TrimSpace(string(b))
}

// TestGH200NUMANodes checks that the mock machine is self-consistent as a real GH200 is: the
// GPU's PCI device sits on the node with the Grace's CPUs, while NVML's NUMA node of the GPU is
// its memory, a node without CPUs; and that the backend publishes the former.
func TestGH200NUMANodes(t *testing.T) {
	s, err := NewServer("gh200-1x", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	memNode, ret := s.Devices[0].GetNumaNodeId()
	if ret != nvml.SUCCESS || memNode != 1 {
		t.Fatalf("GetNumaNodeId = %d, %v; want 1 (the HBM's node)", memNode, ret)
	}
	if cpus := readSys(t, s, "devices/system/node/node"+strconv.Itoa(memNode)+"/cpulist"); cpus != "" {
		t.Errorf("GPU memory node %d has CPUs %q; the kernel shows it without", memNode, cpus)
	}
	pciNode := readSys(t, s, "devices/pci0009:00/0009:00:00.0/0009:01:00.0/numa_node")
	if pciNode != "0" {
		t.Errorf("PCI numa_node = %q, want 0", pciNode)
	}
	if cpus := readSys(t, s, "devices/system/node/node0/cpulist"); cpus != "0-71" {
		t.Errorf("node0 cpulist = %q, want the Grace's 0-71", cpus)
	}
	for name, want := range map[string]string{"online": "0-8", "possible": "0-8", "has_cpu": "0", "has_memory": "0-1"} {
		if got := readSys(t, s, "devices/system/node/"+name); got != want {
			t.Errorf("devices/system/node/%s = %q, want %q", name, got, want)
		}
	}

	inv := enumerate(t, "gh200-1x", "node-a")
	if n := inv.Devices[0].NUMANode; n == nil || *n != 0 {
		t.Errorf("published numaNode = %v, want 0: the CPUs' node from sysfs, not NVML's CPU-less memory node", n)
	}
}

func TestCoherentMemoryLeavesOtherProfiles(t *testing.T) {
	s, err := NewServer("h100-8x-2numa", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(s.SysFS, "devices/system/node"); err == nil {
		t.Error("h100-8x-2numa has a devices/system/node tree; only coherent profiles get one")
	}
	if n, ret := s.Devices[4].GetNumaNodeId(); ret != nvml.SUCCESS || n != 1 {
		t.Errorf("h100 gpu-4 GetNumaNodeId = %d, %v; want its socket's node 1", n, ret)
	}
}

func TestNodeList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1}, "0-1"},
		{[]int{0, 1, 9, 17}, "0-1,9,17"},
		{[]int{0, 1, 2, 3, 4, 12, 13}, "0-4,12-13"},
	} {
		if got := nodeList(tc.in); got != tc.want {
			t.Errorf("nodeList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
