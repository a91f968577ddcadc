package npumock

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
	f := writeShape(t, "model: ascend310p\ncount: 3\nnumaNodes: -1\nnpusPerPCIeRoot: 3\n")
	if !IsShape(f) {
		t.Fatal("not taken for an NPU shape")
	}
	be, err := New(t.TempDir(), ShapePrefix+f, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := be.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 3 {
		t.Fatalf("%d devices, want 3", len(inv.Devices))
	}
	for _, d := range inv.Devices {
		if d.ProductName != "Ascend 310P" || d.NUMANode != nil || d.PCIeRoot != inv.Devices[0].PCIeRoot || d.UUID == "" {
			t.Errorf("%s: %s NUMA %v root %s uuid %q", d.Name, d.ProductName, d.NUMANode, d.PCIeRoot, d.UUID)
		}
	}
	for name, tc := range map[string]struct{ content, want string }{
		"GPU model":      {"model: h100-sxm-80gb\ncount: 1\n", `unknown model "h100-sxm-80gb"`},
		"misspelt field": {"model: ascend910b\ncount: 1\nserial: true\n", `unknown field "serial"`},
		"zero NPUs":      {"model: ascend910b\n", "count 0"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(t.TempDir(), ShapePrefix+writeShape(t, tc.content), "node-a")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A plugin runs a shape as it runs a profile: the driver root of the shape's version too.
func TestShapeDriverRoot(t *testing.T) {
	f := writeShape(t, "model: ascend910b\ncount: 2\ndriverVersion: 25.0.rc1\n")
	dir := t.TempDir()
	root, err := WriteDriverRoot(dir, ShapePrefix+f)
	if err != nil {
		t.Fatal(err)
	}
	if root != DriverRoot(dir, ShapePrefix+f) || !strings.HasPrefix(root, dir+"/shape-") {
		t.Errorf("driver root %s, DriverRoot says %s", root, DriverRoot(dir, ShapePrefix+f))
	}
	v, err := os.ReadFile(filepath.Join(root, "usr/local/Ascend/driver/version.info"))
	if err != nil || !strings.HasPrefix(string(v), "Version=25.0.rc1\n") {
		t.Errorf("version.info %q, %v", v, err)
	}
}
