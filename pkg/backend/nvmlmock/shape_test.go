package nvmlmock

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeShape(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "shape.yaml")
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestShape(t *testing.T) {
	f := writeShape(t, "customModel: {name: NVIDIA H200 NVL, architecture: hopper, computeCapability: \"9.0\", memoryMiB: 143771, pciDeviceID: \"0x233b\"}\ncount: 4\nnumaNodes: 2\ngpusPerPCIeRoot: 2\n")
	be, err := New(ShapePrefix+f, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := be.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 4 || len(inv.Failed) != 0 {
		t.Fatalf("%d devices, %d failed; want 4, 0", len(inv.Devices), len(inv.Failed))
	}
	for i, d := range inv.Devices {
		if d.ProductName != "NVIDIA H200 NVL" || d.MemoryBytes != 143771<<20 || d.Architecture != "Hopper" || d.CUDAComputeCapability != "9.0" {
			t.Errorf("%s: %s %d %s %s", d.Name, d.ProductName, d.MemoryBytes, d.Architecture, d.CUDAComputeCapability)
		}
		if d.NUMANode == nil || *d.NUMANode != int64(i/2) {
			t.Errorf("%s: NUMA node %v, want %d", d.Name, d.NUMANode, i/2)
		}
	}
	if a, b, c := inv.Devices[0].PCIeRoot, inv.Devices[1].PCIeRoot, inv.Devices[2].PCIeRoot; a == "" || a != b || b == c {
		t.Errorf("PCIe roots %q %q %q: want gpu-0 and gpu-1 on one, gpu-2 on another", a, b, c)
	}
}

func TestShapeErrors(t *testing.T) {
	for name, tc := range map[string]struct{ content, want string }{
		"unknown model":     {"model: b300\ncount: 1\n", `unknown model "b300"`},
		"both models":       {"model: l4\ncustomModel: {name: x, architecture: ada, computeCapability: \"8.9\", memoryMiB: 1, pciDeviceID: \"0x1\"}\ncount: 1\n", "not both"},
		"no model":          {"count: 1\n", "model or customModel is required"},
		"misspelt field":    {"model: l4\ncuont: 1\n", `unknown field "cuont"`},
		"zero GPUs":         {"model: l4\n", "count 0"},
		"MIG without table": {"model: l4\ncount: 1\nmigMode: true\n", "no MIG profiles for NVIDIA L4"},
		"bad architecture":  {"customModel: {name: x, architecture: rubin2, computeCapability: \"9.0\", memoryMiB: 1, pciDeviceID: \"0x1\"}\ncount: 1\n", `architecture "rubin2"`},
		"bad capability":    {"customModel: {name: x, architecture: ada, computeCapability: \"9\", memoryMiB: 1, pciDeviceID: \"0x1\"}\ncount: 1\n", `computeCapability "9"`},
		"more NUMA nodes":   {"model: l4\ncount: 2\nnumaNodes: 3\n", "numaNodes 3"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(ShapePrefix+writeShape(t, tc.content), "node-a")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := New(ShapePrefix+"/nonexistent.yaml", "node-a"); err == nil {
		t.Error("no error for a missing shape file")
	}
}
