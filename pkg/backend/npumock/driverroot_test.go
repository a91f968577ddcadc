package npumock

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/backend/npu"
	ascendcdi "github.com/accel-dra/accel-dra/pkg/cdi/ascend"
)

// TestWriteDriverRoot: the generated tree holds every default Ascend driver path, and the real
// NPU backend reads the profile's driver version from its version.info.
func TestWriteDriverRoot(t *testing.T) {
	dir := t.TempDir()
	for _, p := range Profiles() {
		root, err := WriteDriverRoot(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range ascendcdi.DefaultDriverPaths {
			if _, err := os.Stat(filepath.Join(root, path)); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
		sys, dev, err := Generate(t.TempDir(), p, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		b, err := npu.New(npu.Config{SysRoot: sys, DevRoot: dev, NodeName: "node-a", DriverVersionFile: filepath.Join(root, npu.DefaultDriverVersionFile)})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := b.Enumerate(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got, want := inv.Devices[0].DriverVersion, profiles[p].driverVersion; got != want {
			t.Errorf("%s: driver version %q from the generated version.info, want %q", p, got, want)
		}
	}
	if _, err := WriteDriverRoot(dir, "nope"); err == nil {
		t.Error("unknown profile accepted")
	}
}
