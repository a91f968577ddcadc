package nodegroup

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	kjson "sigs.k8s.io/json"

	apitemplate "github.com/accel-dra/accel-dra/api/template"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// readDRAResourceSlices reads DRAResourceSlicesKey as its documented contract says a reader
// must (docs/upstream-proposal.md): JSON, or base64 of gzipped JSON; a document of version 1
// whose slices are resource.k8s.io/v1 ResourceSliceSpecs, decoded strictly; nodeName set to the
// template node; an empty pool name is the node's; generation 1 and resourceSliceCount derived
// per pool.
func readDRAResourceSlices(value, nodeName string) ([]resourceapi.ResourceSliceSpec, error) {
	doc := []byte(value)
	if !strings.HasPrefix(value, "{") {
		raw, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		if doc, err = io.ReadAll(io.LimitReader(zr, 1<<20)); err != nil {
			return nil, err
		}
	}
	var d struct {
		Version int                             `json:"version"`
		Slices  []resourceapi.ResourceSliceSpec `json:"slices"`
	}
	strict, err := kjson.UnmarshalStrict(doc, &d, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	if d.Version != DRAResourceSlicesVersion {
		return nil, fmt.Errorf("version %d, want %d", d.Version, DRAResourceSlicesVersion)
	}
	specs := d.Slices
	count := map[string]int64{}
	for i := range specs {
		if specs[i].NodeName != nil {
			return nil, fmt.Errorf("spec %d has a nodeName", i)
		}
		if specs[i].Pool.Name == "" {
			specs[i].Pool.Name = nodeName
		}
		specs[i].NodeName = new(nodeName)
		count[specs[i].Driver+"/"+specs[i].Pool.Name]++
	}
	for i := range specs {
		specs[i].Pool.Generation = 1
		specs[i].Pool.ResourceSliceCount = count[specs[i].Driver+"/"+specs[i].Pool.Name]
	}
	return specs, nil
}

// TestDRAResourceSlicesOfMockNodes: what the proposed autoscaler key carries, read as its reader
// must, is the plugin's own devices: every device, counter and capacity, every attribute value
// as the plugin published it except identity attributes, which carry the template's placeholders
// unchanged (the reader rewrites no values).
func TestDRAResourceSlicesOfMockNodes(t *testing.T) {
	const gpu, npu = "gpu.accel-dra.io", "npu.accel-dra.io"
	for name, tc := range map[string]struct {
		driver, profile string
		dynamicMIG      bool
	}{
		"whole H100s":       {driver: gpu, profile: "h100-8x-2numa"},
		"dynamic MIG H100s": {driver: gpu, profile: "h100-8x-mig", dynamicMIG: true},
		"static MIG":        {driver: gpu, profile: "mig-mixed"},
		"Ascend 910B":       {driver: npu, profile: "ascend910b-8x"},
	} {
		t.Run(name, func(t *testing.T) {
			published, n := mockSlices(t, tc.driver, tc.profile, tc.dynamicMIG)
			tmpl, err := template.Build(published, template.BuildOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ann, err := tmpl.Encode(0)
			if err != nil {
				t.Fatal(err)
			}
			if err := AddDRAResourceSlices(ann, tmpl, 0); err != nil {
				t.Fatal(err)
			}
			value := ann[DRAResourceSlicesKey]
			t.Logf("%s: %d devices, %s is %d bytes (compressed: %v)", tc.profile, n, DRAResourceSlicesKey, len(value), !strings.HasPrefix(value, "{"))
			specs, err := readDRAResourceSlices(value, "new-node")
			if err != nil {
				t.Fatalf("read %s: %v", DRAResourceSlicesKey, err)
			}

			identity := map[string]bool{}
			for _, fq := range tmpl.IdentityAttributes {
				identity[string(fq)] = true
			}
			placeholders := map[string]resourceapi.Device{}
			for _, d := range tmpl.Drivers {
				for _, dev := range d.Devices {
					placeholders[dev.Name] = dev
				}
			}
			want, got := map[string]resourceapi.Device{}, map[string]resourceapi.Device{}
			var wantCounters, gotCounters []resourceapi.CounterSet
			for _, s := range published {
				for _, d := range s.Spec.Devices {
					want[d.Name] = d
				}
				wantCounters = append(wantCounters, s.Spec.SharedCounters...)
			}
			for _, s := range specs {
				if s.Driver != tc.driver || s.Pool != (resourceapi.ResourcePool{Name: "new-node", Generation: 1, ResourceSliceCount: int64(len(specs))}) {
					t.Errorf("slice of driver %q in pool %+v, want %s in one pool new-node of %d slices", s.Driver, s.Pool, tc.driver, len(specs))
				}
				for _, d := range s.Devices {
					got[d.Name] = d
				}
				gotCounters = append(gotCounters, s.SharedCounters...)
			}
			if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got))); diff != "" {
				t.Fatalf("devices (-published +read):\n%s", diff)
			}
			sortSets := func(c []resourceapi.CounterSet) []resourceapi.CounterSet {
				return slices.SortedFunc(slices.Values(c), func(a, b resourceapi.CounterSet) int { return strings.Compare(a.Name, b.Name) })
			}
			if diff := cmp.Diff(sortSets(wantCounters), sortSets(gotCounters)); diff != "" {
				t.Errorf("shared counters (-published +read):\n%s", diff)
			}
			replaced := 0
			for name, w := range want {
				g := got[name]
				for attr, a := range g.Attributes {
					if identity[apitemplate.Qualify(tc.driver, attr)] {
						if diff := cmp.Diff(placeholders[name].Attributes[attr], a); diff != "" {
							t.Errorf("%s: identity attribute %s is not the template's placeholder (-template +read):\n%s", name, attr, diff)
						}
						replaced++
						w.Attributes[attr] = a
					}
				}
				if diff := cmp.Diff(w, g); diff != "" {
					t.Errorf("%s (-published +read):\n%s", name, diff)
				}
			}
			if len(tmpl.IdentityAttributes) > 0 && replaced == 0 {
				t.Errorf("no identity attribute checked; the template has %v", tmpl.IdentityAttributes)
			}
		})
	}
}

// TestDRAResourceSlicesPools: a driver with several pools per node keeps them apart by name.
func TestDRAResourceSlicesPools(t *testing.T) {
	published, _ := mockSlices(t, "gpu.accel-dra.io", "h100-8x-2numa", false)
	var two []resourceapi.ResourceSlice
	for _, pool := range []string{"n1-a", "n1-b"} {
		for _, s := range published {
			s := *s.DeepCopy()
			s.Name += pool
			s.Spec.Pool.Name = pool
			two = append(two, s)
		}
	}
	tmpl, err := template.Build(two, template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := DRAResourceSlices(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := readDRAResourceSlices(out[DRAResourceSlicesKey], "new-node")
	if err != nil {
		t.Fatal(err)
	}
	devices := map[string]int{}
	for _, s := range specs {
		devices[s.Pool.Name] += len(s.Devices)
	}
	if diff := cmp.Diff(map[string]int{"template-a": 8, "template-b": 8}, devices); diff != "" {
		t.Errorf("devices per pool (-want +got):\n%s", diff)
	}
}

// TestAddDRAResourceSlicesBudget: over the budget nothing is added and the caller learns the size.
func TestAddDRAResourceSlicesBudget(t *testing.T) {
	tmpl, _ := mockTemplate(t, "gpu.accel-dra.io", "h100-8x-mig", true)
	ann, err := tmpl.Encode(0)
	if err != nil {
		t.Fatal(err)
	}
	before := maps.Clone(ann)
	size := 0
	for k, v := range ann {
		size += len(k) + len(v)
	}
	err = AddDRAResourceSlices(ann, tmpl, size+10)
	var be *template.BudgetError
	if !errors.As(err, &be) || be.Budget != size+10 || be.Size <= size+10 {
		t.Fatalf("AddDRAResourceSlices over budget: %v, want a BudgetError over %d", err, size+10)
	}
	if diff := cmp.Diff(before, ann); diff != "" {
		t.Errorf("annotations changed over budget (-before +after):\n%s", diff)
	}
	if err := AddDRAResourceSlices(ann, tmpl, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := ann[DRAResourceSlicesKey]; !ok {
		t.Errorf("within the default budget %s is missing", DRAResourceSlicesKey)
	}
}
