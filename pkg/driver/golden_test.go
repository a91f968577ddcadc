package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

type profileCase struct {
	name   string
	driver string
	open   func(t *testing.T) device.Backend
}

func profileCases() []profileCase {
	var cases []profileCase
	for _, p := range nvmlmock.Profiles() {
		cases = append(cases, profileCase{name: p, driver: "gpu.accel-dra.io", open: func(t *testing.T) device.Backend {
			b, err := nvmlmock.New(p, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			return b
		}})
	}
	for _, p := range npumock.Profiles() {
		cases = append(cases, profileCase{name: p, driver: "npu.accel-dra.io", open: func(t *testing.T) device.Backend {
			b, err := npumock.New(t.TempDir(), p, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			return b
		}})
	}
	return cases
}

// TestGoldenProfiles pins, for every mock profile, the ResourceSlice content the plugin
// publishes and the CDI spec of a claim for all its devices. Building twice from fresh
// backends must give the same bytes: a restart must not churn the API.
func TestGoldenProfiles(t *testing.T) {
	for _, pc := range profileCases() {
		t.Run(pc.name, func(t *testing.T) {
			slicesJSON, specJSON := renderProfile(t, pc)
			again, specAgain := renderProfile(t, pc)
			if !bytes.Equal(slicesJSON, again) || !bytes.Equal(specJSON, specAgain) {
				t.Fatal("two builds of the same node differ")
			}
			golden(t, filepath.Join("testdata", "slices", pc.name+".json"), slicesJSON)
			switch {
			case specJSON == nil:
			case pc.driver == "npu.accel-dra.io" && os.Geteuid() != 0:
				// The mock's Ascend nodes have the driver's group only where the test may give it
				// (npumock.DriverGID); elsewhere the spec carries the test's own group.
				t.Log("Not comparing the CDI spec with its golden file: not root, the mock's nodes have a stand-in group")
			default:
				golden(t, filepath.Join("testdata", "cdi", pc.name+".json"), specJSON)
			}
		})
	}
}

func renderProfile(t *testing.T, pc profileCase) (slicesJSON, specJSON []byte) {
	t.Helper()
	be := pc.open(t)
	defer func() { _ = be.Close() }()
	inv, err := be.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: context.Background(), dir: t.TempDir(), inv: inv, boot: bootA, driver: pc.driver}
	e.start()
	res := e.drv.Resources()
	slicesJSON, err = json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var results []result
	for _, d := range inv.Devices {
		if e.drv.node.publishable[d.Name] {
			results = append(results, result{Device: d.Name, Driver: pc.driver})
		}
	}
	if len(results) == 0 {
		return slicesJSON, nil
	}
	c := claim("golden-claim", results)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	specJSON, err = os.ReadFile(e.drv.opts.CDI.Path("golden-claim"))
	if err != nil {
		t.Fatal(err)
	}
	return slicesJSON, specJSON
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Fatalf("%s differs from the golden file; run go test -update and review the diff\ngot:\n%s", path, got)
	}
}
