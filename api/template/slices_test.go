package template

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// twoPoolDoc has one driver with two pools per node: 130 whole GPUs in the node's pool and 3
// partitions in the pool "<node>/mig", so that both pools need more than one slice or counters.
var twoPoolDoc = func() string {
	var whole, parts []string
	for i := range 130 {
		whole = append(whole, fmt.Sprintf(`{"name":"gpu-%d","attributes":{"uuid":{"string":"uuid-%d"}}}`, i, i))
	}
	for i := range 3 {
		parts = append(parts, fmt.Sprintf(`{"name":"mig-%d","attributes":{"uuid":{"string":"uuid-%d"}},"consumesCounters":[{"counterSet":"gpu-0","counters":{"memory":{"value":"10Gi"}}}]}`, i, 200+i))
	}
	return `{"apiVersion":"template.accel-dra.io/v1alpha1","kind":"NodeGroupTemplate","identityAttributes":["gpu.accel-dra.io/uuid"],"drivers":[` +
		`{"name":"gpu.accel-dra.io","devices":[` + strings.Join(whole, ",") + `]},` +
		`{"name":"gpu.accel-dra.io","poolSuffix":"/mig","sharedCounters":[{"name":"gpu-0","counters":{"memory":{"value":"80Gi"}}}],"devices":[` + strings.Join(parts, ",") + `]}]}`
}()

// checkSlices checks what the allocator relies on in a node's slices: per-slice limits, unique
// slice names, and that each pool's slices agree on generation and count.
func checkSlices(t *testing.T, out []*resourceapi.ResourceSlice, node string) {
	t.Helper()
	names := map[string]bool{}
	pools := map[[2]string]int{}
	counts := map[[2]string]int64{}
	for _, s := range out {
		if names[s.Name] {
			t.Fatalf("slice name %s used twice", s.Name)
		}
		names[s.Name] = true
		if len(s.Name) > 253 {
			t.Fatalf("slice name %s too long", s.Name)
		}
		if s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			t.Fatalf("slice %s: nodeName %v, want %s", s.Name, s.Spec.NodeName, node)
		}
		limit := resourceapi.ResourceSliceMaxDevices
		for i := range s.Spec.Devices {
			if isAdvanced(&s.Spec.Devices[i]) {
				limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
			}
		}
		if len(s.Spec.Devices) > limit {
			t.Fatalf("slice %s: %d devices, limit %d", s.Name, len(s.Spec.Devices), limit)
		}
		if len(s.Spec.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			t.Fatalf("slice %s: %d counter sets", s.Name, len(s.Spec.SharedCounters))
		}
		if len(s.Spec.SharedCounters) > 0 && len(s.Spec.Devices) > 0 {
			t.Fatalf("slice %s: counters and devices in one slice", s.Name)
		}
		k := [2]string{s.Spec.Driver, s.Spec.Pool.Name}
		pools[k]++
		if c, ok := counts[k]; ok && c != s.Spec.Pool.ResourceSliceCount {
			t.Fatalf("pool %v: slices disagree on resourceSliceCount", k)
		}
		counts[k] = s.Spec.Pool.ResourceSliceCount
		if s.Spec.Pool.Generation != 1 {
			t.Fatalf("slice %s: generation %d", s.Name, s.Spec.Pool.Generation)
		}
	}
	for k, n := range pools {
		if int64(n) != counts[k] {
			t.Fatalf("pool %v: %d slices, resourceSliceCount %d", k, n, counts[k])
		}
	}
}

// TestGoldenSlices reads the annotations accel-dra's writer wrote with the newest k8s.io/api and
// checks that this reader, built with whatever k8s.io/api its module requires, gives exactly the
// template node's slices that the writer's own tests pin.
func TestGoldenSlices(t *testing.T) {
	tmpl, err := Decode(goldenAnnotations(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.ResourceSlices("template-node")
	if err != nil {
		t.Fatal(err)
	}
	checkSlices(t, out, "template-node")
	got, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "h100-8gpu.resourceslices.json"))
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got)+"\n" {
		t.Errorf("slices differ from testdata/h100-8gpu.resourceslices.json:\n%s", got)
	}
	uuid := *out[0].Spec.Devices[0].Attributes["uuid"].StringValue
	if uuid != "uuid-0-39d6047f" {
		t.Errorf("gpu-0 uuid on template-node = %q, want the placeholder with the node's hash", uuid)
	}
}

// TestSliceNamesOneDriverTwoPools pins the rule for a driver with several pools per node: the
// slice index counts all slices of the driver, over its pools in document order, so names are
// unique and each pool announces only its own slices.
func TestSliceNamesOneDriverTwoPools(t *testing.T) {
	tmpl, err := Decode(jsonAnnotations(twoPoolDoc))
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.ResourceSlices("node-a")
	if err != nil {
		t.Fatal(err)
	}
	checkSlices(t, out, "node-a")
	var got []string
	for _, s := range out {
		got = append(got, fmt.Sprintf("%s pool=%s count=%d devices=%d counters=%d", s.Name, s.Spec.Pool.Name, s.Spec.Pool.ResourceSliceCount, len(s.Spec.Devices), len(s.Spec.SharedCounters)))
	}
	want := []string{
		"node-a-gpu.accel-dra.io-0 pool=node-a count=2 devices=128 counters=0",
		"node-a-gpu.accel-dra.io-1 pool=node-a count=2 devices=2 counters=0",
		"node-a-gpu.accel-dra.io-2 pool=node-a/mig count=2 devices=0 counters=1",
		"node-a-gpu.accel-dra.io-3 pool=node-a/mig count=2 devices=3 counters=0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("slices:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNewerFields checks the version skew rule: a template that uses a field which only a newer
// k8s.io/api has is refused, naming the field, by a reader built on an API without it, and read
// (and carried into the slices) by one built on an API with it. The same template without the
// field is read by both. The module's own tests run against its declared (oldest) API; the
// accel-dra module compiles this package against the newest.
func TestNewerFields(t *testing.T) {
	mig := `{"name":"mig-0","attributes":{"type":{"string":"mig"}},"consumesCounters":[{"counterSet":"gpu-0","counters":{"memory":{"value":"10Gi"}}}]}`
	counters := `"sharedCounters":[{"name":"gpu-0","counters":{"memory":{"value":"80Gi"}}}],`
	doc := func(driverFields, device string) string {
		return `{"apiVersion":"template.accel-dra.io/v1alpha1","kind":"NodeGroupTemplate","drivers":[{"name":"gpu.accel-dra.io",` +
			driverFields + counters + `"devices":[` + device + `]}]}`
	}
	for name, tc := range map[string]struct {
		doc      string
		field    string // JSON name of the newer field, "" for a template without one
		probe    func() bool
		inSlices func(*resourceapi.ResourceSlice) string
	}{
		"plain": {doc: doc("", mig)},
		"partitionTypeAttribute": {
			doc:   doc(`"partitionTypeAttribute":"gpu.accel-dra.io/type",`, mig),
			field: "partitionTypeAttribute",
			probe: func() bool { return specFieldSupported()["partitionTypeAttribute"] },
			inSlices: func(s *resourceapi.ResourceSlice) string {
				b, _ := json.Marshal(s.Spec)
				return string(b)
			},
		},
		"skipNodeOperations": {
			doc:   doc(`"skipNodeOperations":["All"],`, mig),
			field: "skipNodeOperations",
			probe: func() bool { return specFieldSupported()["skipNodeOperations"] },
			inSlices: func(s *resourceapi.ResourceSlice) string {
				b, _ := json.Marshal(s.Spec)
				return string(b)
			},
		},
		"compatibilityGroups": {
			doc:   doc("", strings.Replace(mig, `"counterSet":"gpu-0",`, `"counterSet":"gpu-0","compatibilityGroups":["a"],`, 1)),
			field: "compatibilityGroups",
			probe: func() bool { return deviceFieldSupported(`{"consumesCounters":[{"compatibilityGroups":["a"]}]}`) },
			inSlices: func(s *resourceapi.ResourceSlice) string {
				b, _ := json.Marshal(s.Spec.Devices)
				return string(b)
			},
		},
		"nodeAllocatableResources": {
			doc:   doc("", strings.Replace(mig, `"name":"mig-0",`, `"name":"mig-0","nodeAllocatableResources":{"memory":{"overhead":{"perPod":"1Gi"}}},`, 1)),
			field: "nodeAllocatableResources",
			probe: func() bool { return deviceFieldSupported(`{"nodeAllocatableResources":{}}`) },
			inSlices: func(s *resourceapi.ResourceSlice) string {
				b, _ := json.Marshal(s.Spec.Devices)
				return string(b)
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tmpl, err := Decode(jsonAnnotations(tc.doc))
			if tc.field == "" || tc.probe() {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				out, err := tmpl.ResourceSlices("n")
				if err != nil {
					t.Fatal(err)
				}
				checkSlices(t, out, "n")
				if tc.field != "" && !strings.Contains(tc.inSlices(out[len(out)-1]), `"`+tc.field+`"`) {
					t.Errorf("%s is not in the template node's slices", tc.field)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Decode error %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// deviceFieldSupported reports whether this build's Device type takes the JSON.
func deviceFieldSupported(device string) bool {
	var d resourceapi.Device
	return strictOK([]byte(device), &d)
}
