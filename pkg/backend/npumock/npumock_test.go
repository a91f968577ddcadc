package npumock

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/device"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current output")

var uuidFormat = regexp.MustCompile(`^NPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func enumerate(t *testing.T, dir, profile, node string) *device.Inventory {
	t.Helper()
	b, err := New(dir, profile, node)
	if err != nil {
		t.Fatalf("New(%s, %s): %v", profile, node, err)
	}
	defer b.Close()
	if b.Kind() != device.KindNPU {
		t.Errorf("Kind() = %q", b.Kind())
	}
	inv, err := b.Enumerate(context.Background())
	if err != nil {
		t.Fatalf("Enumerate(%s): %v", profile, err)
	}
	return inv
}

func TestProfiles(t *testing.T) {
	if diff := cmp.Diff([]string{"ascend310p-2x", "ascend910-8x", "ascend910b-8x", "ascend910b-8x-a2-order", "ascend910b-8x-one-unreadable"}, Profiles()); diff != "" {
		t.Errorf("Profiles() (-want +got):\n%s", diff)
	}
	for _, p := range Profiles() {
		if Describe(p) == "" {
			t.Errorf("profile %s has no description", p)
		}
	}
	_, err := New(t.TempDir(), "ascend950-1x", "node-a")
	if err == nil {
		t.Fatal("New with an unknown profile succeeded")
	}
	for _, p := range Profiles() {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not list %q", err, p)
		}
	}
	if _, _, err := Generate(t.TempDir(), "ascend910b-8x", ""); err == nil {
		t.Error("Generate without a node name succeeded")
	}
}

func TestEnumerateProfiles(t *testing.T) {
	type want struct {
		product, arch, driver string
		memory                int64
		busIDs, roots         []string
		numa                  []int64
	}
	tests := map[string]want{
		"ascend910b-8x": {
			product: "Ascend 910B", arch: "Ascend910B", driver: "24.1.rc2", memory: 64 << 30,
			busIDs: []string{"0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0", "0000:81:00.0", "0000:82:00.0", "0000:c1:00.0", "0000:c2:00.0"},
			roots:  []string{"pci0000:00", "pci0000:00", "pci0000:40", "pci0000:40", "pci0000:80", "pci0000:80", "pci0000:c0", "pci0000:c0"},
			numa:   []int64{0, 0, 0, 0, 1, 1, 1, 1},
		},
		// /dev/davinciN is the NPU the driver numbered N, whatever its bus ID.
		"ascend910b-8x-a2-order": {
			product: "Ascend 910B", arch: "Ascend910B", driver: "24.1.rc2", memory: 64 << 30,
			busIDs: []string{"0000:c1:00.0", "0000:01:00.0", "0000:c2:00.0", "0000:02:00.0", "0000:81:00.0", "0000:41:00.0", "0000:82:00.0", "0000:42:00.0"},
			roots:  []string{"pci0000:c0", "pci0000:00", "pci0000:c0", "pci0000:00", "pci0000:80", "pci0000:40", "pci0000:80", "pci0000:40"},
			numa:   []int64{1, 0, 1, 0, 1, 0, 1, 0},
		},
		"ascend310p-2x": {
			product: "Ascend 310P", arch: "Ascend310P", driver: "23.0.0", memory: 24 << 30,
			busIDs: []string{"0000:3b:00.0", "0000:af:00.0"},
			roots:  []string{"pci0000:3a", "pci0000:ae"},
			numa:   []int64{0, 1},
		},
	}
	for profile, w := range tests {
		t.Run(profile, func(t *testing.T) {
			inv := enumerate(t, t.TempDir(), profile, "node-a")
			if len(inv.Devices) != len(w.busIDs) {
				t.Fatalf("got %d devices, want %d", len(inv.Devices), len(w.busIDs))
			}
			var busIDs, roots []string
			var numa []int64
			for i, d := range inv.Devices {
				if d.Name != device.NameFor(device.KindNPU, i) || d.Index != i {
					t.Errorf("device %d is %s (index %d)", i, d.Name, d.Index)
				}
				if d.ProductName != w.product || d.Architecture != w.arch || d.MemoryBytes != w.memory || d.DriverVersion != w.driver {
					t.Errorf("%s: %q %q %d bytes driver %q", d.Name, d.ProductName, d.Architecture, d.MemoryBytes, d.DriverVersion)
				}
				if !uuidFormat.MatchString(d.UUID) {
					t.Errorf("%s: UUID %q not in NPU-8-4-4-4-12 form", d.Name, d.UUID)
				}
				want := []device.Node{{Path: "/dev/davinci" + strings.TrimPrefix(d.Name, "npu-"), Type: "c", Major: davinciMajor, Minor: int64(i), GID: standInGroup(), FileMode: nodeMode}}
				if diff := cmp.Diff(want, d.Nodes); diff != "" {
					t.Errorf("%s nodes (-want +got):\n%s", d.Name, diff)
				}
				busIDs = append(busIDs, d.PCIBusID)
				roots = append(roots, d.PCIeRoot)
				if d.NUMANode == nil {
					t.Errorf("%s has no NUMA node", d.Name)
					continue
				}
				numa = append(numa, *d.NUMANode)
			}
			if diff := cmp.Diff(w.busIDs, busIDs); diff != "" {
				t.Errorf("bus IDs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(w.roots, roots); diff != "" {
				t.Errorf("pcieRoots (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(w.numa, numa); diff != "" {
				t.Errorf("NUMA nodes (-want +got):\n%s", diff)
			}
			wantCtl := []device.Node{
				{Path: "/dev/davinci_manager", Type: "c", Major: davinciManagerMajor, GID: standInGroup(), FileMode: nodeMode},
				{Path: "/dev/devmm_svm", Type: "c", Major: devmmSvmMajor, GID: standInGroup(), FileMode: nodeMode},
				{Path: "/dev/hisi_hdc", Type: "c", Major: hisiHdcMajor, GID: standInGroup(), FileMode: nodeMode},
			}
			if diff := cmp.Diff(wantCtl, inv.ControlNodes); diff != "" {
				t.Errorf("control nodes (-want +got):\n%s", diff)
			}
		})
	}
}

// snapshot records every file, directory and symlink under root with its content or target.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[rel] = "-> " + target
			return err
		case d.IsDir():
			out[rel] = "dir"
		default:
			data, err := os.ReadFile(p)
			out[rel] = string(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGenerateIdempotent(t *testing.T) {
	for _, profile := range Profiles() {
		t.Run(profile, func(t *testing.T) {
			dir := t.TempDir()
			sys1, dev1, err := Generate(dir, profile, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			first := snapshot(t, dir)
			sys2, dev2, err := Generate(dir, profile, "node-a")
			if err != nil {
				t.Fatalf("second Generate: %v", err)
			}
			if sys1 != sys2 || dev1 != dev2 {
				t.Errorf("roots changed: %s %s then %s %s", sys1, dev1, sys2, dev2)
			}
			if diff := cmp.Diff(first, snapshot(t, dir)); diff != "" {
				t.Errorf("tree changed on regeneration (-first +second):\n%s", diff)
			}
			if !strings.HasPrefix(sys1, dir) || !strings.HasPrefix(dev1, dir) {
				t.Errorf("roots %s, %s outside %s", sys1, dev1, dir)
			}
			if target, err := os.Readlink(filepath.Join(sys1, "bus/pci/devices", "0000:3b:00.0")); profile == "ascend310p-2x" &&
				(err != nil || !strings.HasPrefix(target, "../../../devices/pci0000:3a/")) {
				t.Errorf("bus symlink target %q, %v", target, err)
			}
		})
	}
}

func uuids(inv *device.Inventory) []string {
	var out []string
	for _, d := range inv.Devices {
		out = append(out, d.UUID)
	}
	return out
}

func TestUUIDStability(t *testing.T) {
	for _, profile := range Profiles() {
		t.Run(profile, func(t *testing.T) {
			dir := t.TempDir()
			first := uuids(enumerate(t, dir, profile, "node-a"))
			if diff := cmp.Diff(first, uuids(enumerate(t, dir, profile, "node-a"))); diff != "" {
				t.Errorf("UUIDs changed across restarts (-first +second):\n%s", diff)
			}
			if diff := cmp.Diff(first, uuids(enumerate(t, t.TempDir(), profile, "node-a"))); diff != "" {
				t.Errorf("UUIDs depend on the mock directory (-first +second):\n%s", diff)
			}
			seen := map[string]bool{}
			for _, u := range first {
				if seen[u] {
					t.Errorf("UUID %s twice on one node", u)
				}
				seen[u] = true
			}
			for _, u := range uuids(enumerate(t, t.TempDir(), profile, "node-b")) {
				if seen[u] {
					t.Errorf("UUID %s on node-a and node-b", u)
				}
			}
		})
	}
}

// TestGolden pins each profile's inventory for node "node-a"; -update rewrites
// testdata/<profile>.golden.json.
func TestGolden(t *testing.T) {
	for _, profile := range Profiles() {
		t.Run(profile, func(t *testing.T) {
			got, err := json.MarshalIndent(enumerate(t, t.TempDir(), profile, "node-a"), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			file := filepath.Join("testdata", profile+".golden.json")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("reading golden file (run with -update to create it): %v", err)
			}
			if !bytes.Equal(want, got) {
				t.Errorf("%s differs (-want +got):\n%s", file, cmp.Diff(string(want), string(got)))
			}
		})
	}
}

// TestOneUnreadable: with npu-3's sysfs unreadable, npu-3 is reported as failed and the other
// seven are exactly those of the intact machine, under the same names.
func TestOneUnreadable(t *testing.T) {
	base := enumerate(t, t.TempDir(), "ascend910b-8x", "node-a")
	inv := enumerate(t, t.TempDir(), "ascend910b-8x-one-unreadable", "node-a")
	var rest []device.Device
	for _, d := range base.Devices {
		if d.Name != "npu-3" {
			rest = append(rest, d)
		}
	}
	if diff := cmp.Diff(rest, inv.Devices); diff != "" {
		t.Errorf("devices other than npu-3 (-want +got):\n%s", diff)
	}
	if len(inv.Failed) != 1 {
		t.Fatalf("failed devices %+v, want npu-3", inv.Failed)
	}
	if f := inv.Failed[0]; f.Name != "npu-3" || f.PCIBusID != "0000:42:00.0" || f.Err == nil || !strings.Contains(f.Err.Error(), "device ID") {
		t.Errorf("failed device %+v (%v), want npu-3 at 0000:42:00.0 with an error about its device ID", f, f.Err)
	}
}

// standInGroup is the group the mock's nodes have: the driver's where the test may give it
// (root), else the test's own primary group (DriverGID).
func standInGroup() uint32 {
	if os.Geteuid() == 0 {
		return DriverGID
	}
	return uint32(os.Getegid())
}
