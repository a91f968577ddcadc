package mig

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/apivalidation"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
	kslices "github.com/accel-dra/accel-dra/pkg/slices"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

// migProfiles are the mock profiles with GPUs in MIG mode.
var migProfiles = []string{"a100-8x-mig", "h100-8x-mig", "mig-mixed"}

func enumerate(t *testing.T, profile string) (*nvmlmock.Server, *device.Inventory) {
	t.Helper()
	s, err := nvmlmock.NewServer(profile, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := s.Backend().Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s, inv
}

// partition is one published device of a GPU's model, with what the allocator checks.
type partition struct {
	dev device.Device
}

// fits reports whether the allocator could give out every device of set at once: for every
// counter, the sum of what they consume is at most the counter's value. That is the whole of
// what the scheduler checks for devices with shared counters.
func fits(set []device.Device, counters device.CounterSet) bool {
	used := map[string]int64{}
	for _, d := range set {
		for _, c := range d.Consumes {
			if c.CounterSet != counters.Name {
				panic("device consumes another GPU's counters: " + d.Name)
			}
			for name, v := range c.Counters {
				used[name] += v
				cap, ok := counters.Counters[name]
				if !ok {
					panic(fmt.Sprintf("%s consumes unknown counter %s", d.Name, name))
				}
				if used[name] > cap {
					return false
				}
			}
		}
	}
	return true
}

// TestAllocatableSetsAreNVMLSets checks the counter model against NVML (the mock, which applies
// NVML's rules: placements the profile offers, no shared memory slice, per-profile instance
// counts, compute slices and media engines): for every MIG GPU model of every mock profile, a
// set of partitions is allowed by the published counters exactly when NVML creates all of them
// side by side. Both sides are closed under subsets, so a depth-first walk over the sets either
// side allows reaches the smallest set on which they disagree, if there is one.
func TestAllocatableSetsAreNVMLSets(t *testing.T) {
	for _, profile := range migProfiles {
		s, inv := enumerate(t, profile)
		dyn, err := Dynamic(inv)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, p := range inv.MIGParents {
			// One GPU per model (and one with existing instances is skipped: its free slices are
			// not the whole GPU's); the mixed profile's gpu-0 is tested through the others.
			if seen[p.GPU.ProductName] || len(p.Instances) > 0 {
				continue
			}
			seen[p.GPU.ProductName] = true
			t.Run(profile+"/"+p.GPU.Name, func(t *testing.T) {
				counters := Counters(&p)
				var parts []device.Device
				var whole *device.Device
				for i := range dyn.Devices {
					d := dyn.Devices[i]
					switch {
					case d.Name == p.GPU.Name:
						whole = &d
					case d.MIG != nil && d.MIG.Parent == p.GPU.Name:
						parts = append(parts, d)
					}
				}
				if whole == nil || len(parts) == 0 {
					t.Fatalf("no full device or partitions for %s", p.GPU.Name)
				}
				// The whole GPU fits alone and with no partition.
				if !fits([]device.Device{*whole}, counters) {
					t.Errorf("the full GPU does not fit its own counters")
				}
				for _, d := range parts {
					if fits([]device.Device{*whole, d}, counters) {
						t.Errorf("the full GPU fits together with %s", d.Name)
					}
				}
				be := s.Backend()
				ctx := context.Background()
				var sets, maxSize int
				var walk func(set []device.Device, gis []int, from int)
				walk = func(set []device.Device, gis []int, from int) {
					sets++
					maxSize = max(maxSize, len(set))
					for i := from; i < len(parts); i++ {
						d := parts[i]
						next := append(append([]device.Device(nil), set...), d)
						allocOK := fits(next, counters)
						gi, err := be.CreateGI(ctx, p.GPU.UUID, d.MIG.Profile.ID, d.MIG.Placement)
						nvmlOK := err == nil
						if allocOK != nvmlOK {
							t.Errorf("set %s: allocator allows it: %v, NVML accepts it: %v (%v)", names(next), allocOK, nvmlOK, err)
						}
						if allocOK && nvmlOK {
							walk(next, append(gis, gi), i+1)
						}
						if nvmlOK {
							if err := be.DestroyMIG(ctx, p.GPU.UUID, gi); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				walk(nil, nil, 0)
				t.Logf("%s (%s): %d partitions, %d allocatable sets, at most %d partitions at once", p.GPU.Name, p.GPU.ProductName, len(parts), sets, maxSize)
				if maxSize != 7 {
					t.Errorf("at most %d partitions at once, want 7 (seven 1g instances)", maxSize)
				}
			})
		}
	}
}

func names(ds []device.Device) string {
	var n []string
	for _, d := range ds {
		n = append(n, d.Name)
	}
	return "[" + strings.Join(n, " ") + "]"
}

// TestDynamicDevices checks the model's shape on the mixed node: MIG-mode GPUs become a full
// device and one device per profile × placement, their operator-made MIG devices go (the plugin
// manages MIG on them now), the other GPUs are untouched, and names are DNS labels.
func TestDynamicDevices(t *testing.T) {
	_, inv := enumerate(t, "mig-mixed")
	dyn, err := Dynamic(inv)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, d := range dyn.Devices {
		if err := apivalidation.DNSLabel(d.Name); err != nil {
			t.Errorf("device name %q: %v", d.Name, err)
		}
		parent := d.Name
		if d.MIG != nil {
			parent = d.MIG.Parent
			if !d.MIG.Dynamic || d.UUID != "" {
				t.Errorf("%s: partition is not dynamic or has a UUID", d.Name)
			}
		}
		count[parent]++
	}
	// A100: 7 + 7 (+me) + 4 (1g.10gb) + 3 + 2 + 1 + 1 partitions and the full device; H100 the same.
	want := map[string]int{"gpu-0": 26, "gpu-1": 26, "gpu-2": 26, "gpu-3": 1, "gpu-4": 1}
	if diff := cmp.Diff(want, count); diff != "" {
		t.Errorf("devices per GPU (-want +got):\n%s", diff)
	}
	if len(dyn.CounterSets) != 3 {
		t.Errorf("%d counter sets, want 3", len(dyn.CounterSets))
	}
	if len(inv.CounterSets) != 0 || len(inv.Devices) != 6 {
		t.Error("Dynamic changed its input")
	}
}

// TestGoldenSlices pins the ResourceSlices of every MIG profile in dynamic mode, checks each
// slice against the API's rules (counters in their own slices, at most 64 counter-consuming
// devices, at most 8 counter sets, 32 counters, 2 consumptions per device), and that two builds
// from fresh backends are byte-identical, as they must be across restarts.
func TestGoldenSlices(t *testing.T) {
	for _, profile := range migProfiles {
		t.Run(profile, func(t *testing.T) {
			render := func() []byte {
				_, inv := enumerate(t, profile)
				dyn, err := Dynamic(inv)
				if err != nil {
					t.Fatal(err)
				}
				res := kslices.Build(dyn, "node-a")
				if len(res.Rejected) > 0 {
					t.Fatalf("rejected devices: %+v", res.Rejected)
				}
				pool := res.Resources.Pools["node-a"]
				node := "node-a"
				for i, sl := range pool.Slices {
					spec := resourceapi.ResourceSliceSpec{
						Driver: "gpu.accel-dra.io", NodeName: &node,
						Pool:    resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: int64(len(pool.Slices))},
						Devices: sl.Devices, SharedCounters: sl.SharedCounters,
					}
					if err := apivalidation.ResourceSlice(&spec); err != nil {
						t.Errorf("slice %d: %v", i, err)
					}
				}
				b, err := json.MarshalIndent(pool.Slices, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				return append(b, '\n')
			}
			got := render()
			if again := render(); !bytes.Equal(got, again) {
				t.Fatal("two builds differ")
			}
			file := filepath.Join("testdata", profile+".golden.json")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("reading golden (run with -update to create it): %v", err)
			}
			if !bytes.Equal(want, got) {
				t.Errorf("%s differs (-want +got):\n%s", file, cmp.Diff(string(want), string(got)))
			}
		})
	}
}

// The agreement test has teeth: without the memory-slice counters the allocator would give out
// two partitions on the same memory slice, which NVML refuses.
func TestMemorySlicesAreWhatKeepsPartitionsApart(t *testing.T) {
	_, inv := enumerate(t, "a100-8x-mig")
	p := inv.MIGParents[0]
	var one, two device.MIGProfile
	for _, pr := range p.Profiles {
		switch pr.Name {
		case "1g.5gb":
			one = pr
		case "2g.10gb":
			two = pr
		}
	}
	a := device.Device{Name: "a", Consumes: []device.CounterConsumption{Consumption(&p, one, device.MIGPlacement{Start: 0, Size: 1})}}
	b := device.Device{Name: "b", Consumes: []device.CounterConsumption{Consumption(&p, two, device.MIGPlacement{Start: 0, Size: 2})}}
	counters := Counters(&p)
	if fits([]device.Device{a, b}, counters) {
		t.Fatal("overlapping 1g.5gb@0 and 2g.10gb@0 fit the counters")
	}
	for _, d := range []device.Device{a, b} {
		for name := range d.Consumes[0].Counters {
			if strings.HasPrefix(name, "memory-slice-") {
				delete(d.Consumes[0].Counters, name)
			}
		}
	}
	if !fits([]device.Device{a, b}, counters) {
		t.Fatal("without memory slices the overlapping pair should fit the other counters; the test would not notice a missing slice counter")
	}
}

// BenchmarkSliceBytes reports what dynamic MIG costs in ResourceSlice bytes (compact JSON, as
// the API server stores them) per GPU in MIG mode, for the DGX A100 and DGX H100 mocks.
func BenchmarkSliceBytes(b *testing.B) {
	for _, profile := range []string{"a100-8x-mig", "h100-8x-mig"} {
		b.Run(profile, func(b *testing.B) {
			s, err := nvmlmock.NewServer(profile, "node-a")
			if err != nil {
				b.Fatal(err)
			}
			inv, err := s.Backend().Enumerate(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			var size int
			for i := 0; i < b.N; i++ {
				dyn, err := Dynamic(inv)
				if err != nil {
					b.Fatal(err)
				}
				size = 0
				node := "node-a"
				for _, sl := range kslices.Build(dyn, "node-a").Resources.Pools["node-a"].Slices {
					obj := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.accel-dra.io", NodeName: &node,
						Pool: resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1}, Devices: sl.Devices, SharedCounters: sl.SharedCounters}}
					data, err := json.Marshal(obj)
					if err != nil {
						b.Fatal(err)
					}
					size += len(data)
				}
			}
			b.ReportMetric(float64(size)/float64(len(inv.MIGParents)), "slice-bytes/gpu")
		})
	}
}

// In dynamic mode what is published does not depend on which MIG instances exist: a plugin
// restarted while claims hold partitions publishes byte-identical slices.
func TestSlicesIndependentOfInstances(t *testing.T) {
	s, inv := enumerate(t, "mig-mixed")
	render := func(inv *device.Inventory) []byte {
		dyn, err := Dynamic(inv)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(kslices.Build(dyn, "node-a").Resources)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := render(inv)
	be := s.Backend()
	gpu1 := inv.MIGParents[1]
	gi, err := be.CreateGI(context.Background(), gpu1.GPU.UUID, gpu1.Profiles[0].ID, gpu1.Profiles[0].Placements[2])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.CreateCI(context.Background(), gpu1.GPU.UUID, gi); err != nil {
		t.Fatal(err)
	}
	again, err := be.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Devices) == len(inv.Devices) {
		t.Fatal("the new MIG device is not in the static inventory; the test would prove nothing")
	}
	if !bytes.Equal(before, render(again)) {
		t.Error("dynamic-MIG slices changed when a MIG instance was created")
	}
}

// TestEveryCounterCanBind: a published counter costs the scheduler on every node it examines
// (each device's consumption is converted and checked on each Filter call), so a counter that
// no allocatable set of partitions could ever exhaust is not published. For every MIG GPU model,
// each counter must be exceeded by some set of partitions on pairwise disjoint memory slices
// (the sets the memory-slice counters alone allow); TestAllocatableSetsAreNVMLSets checks that
// the counters left still give exactly NVML's sets.
func TestEveryCounterCanBind(t *testing.T) {
	for _, profile := range migProfiles {
		_, inv := enumerate(t, profile)
		seen := map[string]bool{}
		for _, p := range inv.MIGParents {
			if seen[p.GPU.ProductName] {
				continue
			}
			seen[p.GPU.ProductName] = true
			// The most of each counter that partitions on disjoint memory slices consume, by
			// walking every such set (the implementation computes it another way).
			type part struct {
				pl  device.MIGPlacement
				use map[string]int64
			}
			var parts []part
			for _, pr := range p.Profiles {
				for _, pl := range pr.Placements {
					parts = append(parts, part{pl, Consumption(&p, pr, pl).Counters})
				}
			}
			most := map[string]int64{}
			var walk func(from int, used map[string]int64, taken []device.MIGPlacement)
			walk = func(from int, used map[string]int64, taken []device.MIGPlacement) {
				for name, v := range used {
					most[name] = max(most[name], v)
				}
			next:
				for i := from; i < len(parts); i++ {
					for _, q := range taken {
						if q.Overlaps(parts[i].pl) {
							continue next
						}
					}
					sum := maps.Clone(used)
					for name, v := range parts[i].use {
						sum[name] += v
					}
					walk(i+1, sum, append(taken, parts[i].pl))
				}
			}
			walk(0, map[string]int64{}, nil)
			for name, limit := range Counters(&p).Counters {
				if !strings.HasPrefix(name, "memory-slice-") && most[name] <= limit {
					t.Errorf("%s %s: counter %s (%d) is never exhausted: partitions on disjoint memory slices use at most %d", profile, p.GPU.ProductName, name, limit, most[name])
				}
			}
		}
	}
}

func TestValidateProfiles(t *testing.T) {
	for name, tc := range map[string]struct {
		names []string
		err   string
	}{
		"all":              {names: []string{"all"}},
		"names":            {names: []string{"1g.10gb", "1g.10gb+me", "2g.20gb", "1g.24gb+me.all", "1g.12gb-me", "1g.10gb+gfx"}},
		"empty":            {names: nil, err: "no MIG profile given"},
		"all and a name":   {names: []string{"all", "1g.10gb"}, err: `"all" cannot be combined`},
		"not a profile":    {names: []string{"1g.10g"}, err: `"1g.10g" is not a MIG profile name`},
		"unknown suffix":   {names: []string{"1g.10gb+xx"}, err: `"1g.10gb+xx" is not a MIG profile name`},
		"compute instance": {names: []string{"1c.3g.20gb"}, err: "is not a MIG profile name"},
		"twice":            {names: []string{"1g.10gb", "1g.10gb"}, err: `"1g.10gb" given twice`},
	} {
		t.Run(name, func(t *testing.T) {
			err := ValidateProfiles(tc.names)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("ValidateProfiles(%q) = %v, want an error containing %q", tc.names, err, tc.err)
			}
		})
	}
}

// TestWithProfiles: a choice publishes, per GPU in MIG mode, its full device and the partitions
// of the chosen profiles it offers, with the same counter set as without a choice (so the
// partitions left keep exactly their allocatable sets); names no GPU offers are reported.
func TestWithProfiles(t *testing.T) {
	_, inv := enumerate(t, "mig-mixed")
	all, err := Dynamic(inv)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		names      []string
		perGPU     map[string]int
		notOffered []string
	}{
		"all":     {names: []string{AllProfiles}, perGPU: map[string]int{"gpu-0": 26, "gpu-1": 26, "gpu-2": 26, "gpu-3": 1, "gpu-4": 1}},
		"default": {names: nil, perGPU: map[string]int{"gpu-0": 26, "gpu-1": 26, "gpu-2": 26, "gpu-3": 1, "gpu-4": 1}},
		// 1g.10gb is the A100-40GB's two-slice 1g and the H100's one-slice 1g.
		"1g.10gb":            {names: []string{"1g.10gb"}, perGPU: map[string]int{"gpu-0": 5, "gpu-1": 5, "gpu-2": 8, "gpu-3": 1, "gpu-4": 1}},
		"1g.5gb and 3g.40gb": {names: []string{"1g.5gb", "3g.40gb"}, perGPU: map[string]int{"gpu-0": 8, "gpu-1": 8, "gpu-2": 3, "gpu-3": 1, "gpu-4": 1}},
		"not offered":        {names: []string{"1g.10gb", "1g.18gb", "1g.6gb"}, perGPU: map[string]int{"gpu-0": 5, "gpu-1": 5, "gpu-2": 8, "gpu-3": 1, "gpu-4": 1}, notOffered: []string{"1g.18gb", "1g.6gb"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, res, err := DynamicWithResult(inv, WithProfiles(tc.names))
			if err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for _, d := range got.Devices {
				parent := d.Name
				if d.MIG != nil {
					parent = d.MIG.Parent
					if !slices.Contains(tc.names, d.MIG.Profile.Name) && len(tc.names) > 0 && tc.names[0] != AllProfiles {
						t.Errorf("%s: profile %s was not chosen", d.Name, d.MIG.Profile.Name)
					}
				}
				count[parent]++
			}
			if diff := cmp.Diff(tc.perGPU, count); diff != "" {
				t.Errorf("devices per GPU (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(all.CounterSets, got.CounterSets); diff != "" {
				t.Errorf("counter sets differ from publishing every profile (-all +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.notOffered, res.NotOffered); diff != "" {
				t.Errorf("not offered (-want +got):\n%s", diff)
			}
		})
	}
}
