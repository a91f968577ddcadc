package nvmlmock

import (
	"context"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/device"
)

var migUUIDFormat = regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// The mixed node: MIG-mode GPUs are not devices, their existing MIG devices are; the GPU not in
// MIG mode and the one without MIG support are whole devices.
func TestMIGMixedEnumeration(t *testing.T) {
	inv := enumerate(t, "mig-mixed", "node-a")
	var names []string
	for _, d := range inv.Devices {
		names = append(names, d.Name)
	}
	want := []string{"gpu-0-mig-1g5gb-2", "gpu-0-mig-1g5gb-3", "gpu-0-mig-2g10gb-0", "gpu-0-mig-3g20gb-4", "gpu-3", "gpu-4"}
	slices.Sort(names)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("devices (-want +got):\n%s", diff)
	}
	var parents []string
	for _, p := range inv.MIGParents {
		parents = append(parents, p.GPU.Name)
	}
	if diff := cmp.Diff([]string{"gpu-0", "gpu-1", "gpu-2"}, parents); diff != "" {
		t.Fatalf("MIG parents (-want +got):\n%s", diff)
	}
	gpu0 := inv.MIGParents[0]
	var profs []string
	for _, p := range gpu0.Profiles {
		profs = append(profs, p.Name)
	}
	if diff := cmp.Diff([]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}, profs); diff != "" {
		t.Errorf("A100 profiles (-want +got):\n%s", diff)
	}
	profs = nil
	for _, p := range inv.MIGParents[2].Profiles {
		profs = append(profs, p.Name)
	}
	if diff := cmp.Diff([]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}, profs); diff != "" {
		t.Errorf("H100 profiles (-want +got):\n%s", diff)
	}
	if gpu0.MemorySlices != 8 {
		t.Errorf("memory slices = %d, want 8", gpu0.MemorySlices)
	}
	for _, d := range inv.Devices {
		if d.MIG == nil {
			continue
		}
		if !migUUIDFormat.MatchString(d.UUID) {
			t.Errorf("%s: UUID %q is not a MIG UUID", d.Name, d.UUID)
		}
		if d.MIG.ParentUUID != gpu0.GPU.UUID || d.PCIBusID != gpu0.GPU.PCIBusID || d.ProductName != gpu0.GPU.ProductName {
			t.Errorf("%s: parent identity not carried: %+v", d.Name, d.MIG)
		}
		if len(d.Nodes) != 3 || d.Nodes[0].Path != "/dev/nvidia0" {
			t.Fatalf("%s: nodes %+v, want /dev/nvidia0 and two caps nodes", d.Name, d.Nodes)
		}
		in := d.MIG.Instance
		if got, want := d.Nodes[1], (device.Node{Path: "/dev/nvidia-caps/nvidia-cap" + itoa(CapMinor(0, in.GI, -1)), Type: "c", Major: CapsMajor, Minor: int64(CapMinor(0, in.GI, -1)), FileMode: 0o444}); got != want {
			t.Errorf("%s: GI caps node %+v, want %+v", d.Name, got, want)
		}
		if got := d.Nodes[2].Minor; got != int64(CapMinor(0, in.GI, in.CI)) {
			t.Errorf("%s: CI caps minor %d, want %d", d.Name, got, CapMinor(0, in.GI, in.CI))
		}
		if d.MemoryBytes != d.MIG.Profile.MemoryBytes {
			t.Errorf("%s: memory %d, want the profile's %d", d.Name, d.MemoryBytes, d.MIG.Profile.MemoryBytes)
		}
	}
}

// NVML's rules on the mock: overlapping placements, too many instances of a profile and a
// second +me are refused; what is created and destroyed persists in the state directory, so a
// second server (a restarted plugin) sees it.
func TestMIGCreateDestroyPersists(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s1, err := NewServer("mig-mixed", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	s1.UseStateDir(dir)
	b1 := s1.Backend()
	inv, err := b1.Enumerate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gpu1 := inv.MIGParents[1].GPU.UUID
	idx := func(p string) int {
		for _, pr := range inv.MIGParents[1].Profiles {
			if pr.Name == p {
				return pr.ID
			}
		}
		t.Fatalf("no profile %s", p)
		return 0
	}
	gi, err := b1.CreateGI(ctx, gpu1, idx("3g.20gb"), device.MIGPlacement{Start: 0, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b1.CreateGI(ctx, gpu1, idx("1g.5gb"), device.MIGPlacement{Start: 3, Size: 1}); err == nil {
		t.Error("overlapping GPU instance was created")
	}
	if _, err := b1.CreateGI(ctx, gpu1, idx("1g.5gb"), device.MIGPlacement{Start: 7, Size: 1}); err == nil {
		t.Error("GPU instance at a placement the profile does not offer was created")
	}
	if _, err := b1.CreateGI(ctx, gpu1, idx("1g.5gb+me"), device.MIGPlacement{Start: 4, Size: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b1.CreateGI(ctx, gpu1, idx("1g.5gb+me"), device.MIGPlacement{Start: 5, Size: 1}); err == nil {
		t.Error("a second 1g.5gb+me was created")
	}
	in, err := b1.CreateCI(ctx, gpu1, gi)
	if err != nil {
		t.Fatal(err)
	}
	if !migUUIDFormat.MatchString(in.UUID) || len(in.CapNodes) != 2 || in.Placement != (device.MIGPlacement{Start: 0, Size: 4}) {
		t.Errorf("created instance %+v", in)
	}
	if _, err := b1.CreateGI(ctx, inv.MIGParents[0].GPU.UUID, idx("1g.5gb"), device.MIGPlacement{Start: 0, Size: 1}); err == nil {
		t.Error("GPU instance over an operator's MIG device was created")
	}

	s2, err := NewServer("mig-mixed", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	s2.UseStateDir(dir)
	got, err := s2.Instances()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := s1.Instances()
	if diff := cmp.Diff(want, got); diff != "" || len(got) != 6 {
		t.Fatalf("restarted server's instances (-first +second):\n%s\n%v", diff, got)
	}
	list, err := s2.Backend().ListMIG(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, l := range list {
		if l.UUID == in.UUID && l.GI == gi {
			found = true
		}
	}
	if !found {
		t.Errorf("ListMIG after restart lacks %s: %+v", in.UUID, list)
	}
	if err := s2.Backend().DestroyMIG(ctx, gpu1, gi); err != nil {
		t.Fatal(err)
	}
	if err := s2.Backend().DestroyMIG(ctx, gpu1, gi); err != nil {
		t.Errorf("destroying a destroyed instance: %v", err)
	}
	after, _ := s1.Instances()
	if len(after) != 5 {
		t.Errorf("after destroy the first server sees %v", after)
	}
	// A re-created instance is a new MIG device with a new UUID.
	gi2, err := b1.CreateGI(ctx, gpu1, idx("3g.20gb"), device.MIGPlacement{Start: 0, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	in2, err := b1.CreateCI(ctx, gpu1, gi2)
	if err != nil {
		t.Fatal(err)
	}
	if in2.UUID == in.UUID {
		t.Errorf("re-created MIG device kept UUID %s", in.UUID)
	}
	if _, err := fs.Stat(s1.ProcFS(), CapabilitiesDir+"/gpu1/mig/gi"+itoa(gi2)+"/ci0/access"); err != nil {
		t.Errorf("capabilities entry of the new instance: %v", err)
	}
}

// The plugin never changes MIG mode: a GPU that is not in MIG mode refuses instances.
func TestMIGNotInMIGMode(t *testing.T) {
	s, err := NewServer("mig-mixed", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := s.Backend().Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		if d.Name == "gpu-3" || d.Name == "gpu-4" {
			_, err := s.Backend().CreateGI(context.Background(), d.UUID, nvml.GPU_INSTANCE_PROFILE_1_SLICE, device.MIGPlacement{Start: 0, Size: 1})
			if err == nil {
				t.Errorf("%s: GPU instance created on a GPU not in MIG mode", d.Name)
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
