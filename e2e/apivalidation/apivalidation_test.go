//go:build e2e

// Package apivalidation checks pkg/apivalidation against a real API server: for a table of
// ResourceSlices, valid ones and ones breaking each rule the package restates, its verdict must
// be the verdict of kube-apiserver's own validation, asked by server-side dry-run create.
//
//	go test -tags e2e -run TestAgainstAPIServer ./e2e/apivalidation/
package apivalidation

import (
	"context"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/pkg/apivalidation"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/mig"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

const driver = "gpu.accel-dra.io"

type attrs = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
func ver(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{VersionValue: &s} }

func dev(name string, mut ...func(*resourceapi.Device)) resourceapi.Device {
	d := resourceapi.Device{
		Name:       name,
		Attributes: attrs{"type": str("gpu"), "driverVersion": ver("570.124.6")},
		Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
	}
	for _, m := range mut {
		m(&d)
	}
	return d
}

func devs(n int, mut ...func(i int, d *resourceapi.Device)) []resourceapi.Device {
	out := make([]resourceapi.Device, n)
	for i := range out {
		out[i] = dev(fmt.Sprintf("gpu-%d", i))
		for _, m := range mut {
			m(i, &out[i])
		}
	}
	return out
}

func taint(i int, d *resourceapi.Device) {
	if i == 0 {
		d.Taints = []resourceapi.DeviceTaint{{Key: "example.com/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
}

// list gives the first device a list-type attribute (a GPU's NVLink cliques).
func list(i int, d *resourceapi.Device) {
	if i == 0 {
		d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"nvlinkCliques": {StringValues: []string{"nvl4-0d28f85f71d3", "nvl2-722e3b8a21de"}}}
	}
}

func consume(i int, d *resourceapi.Device) {
	if i == 0 {
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-mem", Counters: counters(1)}}
	}
}

func counters(n int) map[string]resourceapi.Counter {
	m := map[string]resourceapi.Counter{}
	for i := range n {
		m[fmt.Sprintf("c%d", i)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	return m
}

func counterSets(n int) []resourceapi.CounterSet {
	out := make([]resourceapi.CounterSet, n)
	for i := range out {
		out[i] = resourceapi.CounterSet{Name: fmt.Sprintf("set-%d", i), Counters: counters(1)}
	}
	return out
}

func spec(mut ...func(*resourceapi.ResourceSliceSpec)) resourceapi.ResourceSliceSpec {
	s := resourceapi.ResourceSliceSpec{
		Driver:   driver,
		Pool:     resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1},
		NodeName: ptr.To("node-a"),
		Devices:  []resourceapi.Device{dev("gpu-0")},
	}
	for _, m := range mut {
		m(&s)
	}
	return s
}

func withDevices(d ...resourceapi.Device) func(*resourceapi.ResourceSliceSpec) {
	return func(s *resourceapi.ResourceSliceSpec) { s.Devices = d }
}

func withAttr(name resourceapi.QualifiedName, a resourceapi.DeviceAttribute) func(*resourceapi.ResourceSliceSpec) {
	return withDevices(dev("gpu-0", func(d *resourceapi.Device) { d.Attributes[name] = a }))
}

// published is what the node plugin publishes for a mock machine.
func published(t *testing.T, profile string) resourceapi.ResourceSliceSpec {
	t.Helper()
	b, err := nvmlmock.New(profile, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	inv, err := b.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res := slices.Build(inv, "node-a")
	return spec(withDevices(res.Resources.Pools["node-a"].Slices[0].Devices...))
}

// publishedMIG are the slices the node plugin publishes for a mock machine in dynamic-MIG mode:
// devices that consume counters and the counter sets in slices of their own.
func publishedMIG(t *testing.T, profile string) []resourceapi.ResourceSliceSpec {
	t.Helper()
	b, err := nvmlmock.New(profile, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	inv, err := b.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := mig.Dynamic(inv)
	if err != nil {
		t.Fatal(err)
	}
	pool := slices.Build(dyn, "node-a").Resources.Pools["node-a"]
	var out []resourceapi.ResourceSliceSpec
	for _, sl := range pool.Slices {
		out = append(out, spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices, s.SharedCounters = sl.Devices, sl.SharedCounters
			s.Pool.ResourceSliceCount = int64(len(pool.Slices))
		}))
	}
	return out
}

func TestAgainstAPIServer(t *testing.T) {
	// Fields whose rules pkg/apivalidation restates are behind alpha gates in 1.37 (list-type
	// attributes among them); without
	// them the API server drops the fields before validating, and the cases would prove nothing.
	c := cluster.StartForTest(t, cluster.Options{APIServerFlags: []string{
		"--feature-gates=DRAOptionalNodeOperations=true,DRAPartitionableDevicesType=true,DRAResourcePoolStatus=true,DRAListTypeAttributes=true",
	}})
	client := c.Client().ResourceV1().ResourceSlices()
	ctx := context.Background()

	cases := map[string]resourceapi.ResourceSliceSpec{
		// Valid.
		"published h100 slice":                  published(t, "h100-8x-2numa"),
		"published slice, version omitted":      published(t, "broken-driver-version"),
		"128 devices":                           spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(128) }),
		"64 devices, one tainted":               spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(64, taint) }),
		"64 devices, one with a list attribute": spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(64, list) }),
		"64 devices, one consuming counters": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = devs(64, consume)
		}),
		"8 counter sets of 32 counters": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = nil
			s.SharedCounters = counterSets(8)
			s.SharedCounters[0].Counters = counters(32)
		}),
		"32 attributes and capacities": withDevicesN(func(d *resourceapi.Device) { fillAttrs(d, 29) }),
		"64-character string":          spec(withAttr("productName", str(strings.Repeat("x", 64)))),
		"pre-release version":          spec(withAttr("driverVersion", ver("24.1.0-rc2.1"))),
		"build metadata version":       spec(withAttr("driverVersion", ver("25.0.0+1"))),
		"qualified attribute":          spec(withAttr("gpu.accel-dra.io/model", str("h100"))),
		"32-character identifier":      spec(withAttr(resourceapi.QualifiedName(strings.Repeat("a", 32)), str("x"))),
		"all nodes": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName, s.AllNodes = nil, ptr.To(true)
		}),
		"per-device node selection": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName, s.PerDeviceNodeSelection = nil, ptr.To(true)
			s.Devices[0].NodeName = ptr.To("node-a")
		}),
		"counters of a set in another slice": spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(2, consume) }),
		"two counter consumptions": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices[0].ConsumesCounters = []resourceapi.DeviceCounterConsumption{
				{CounterSet: "a", Counters: counters(32)}, {CounterSet: "b", Counters: counters(1)}}
		}),
		"partition type attribute": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = devs(2, consume)
			s.Devices[0].Attributes["partitionType"] = str("full")
			s.PartitionTypeAttribute = ptr.To(resourceapi.FullyQualifiedName(driver + "/partitionType"))
		}),
		"16 taints": spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices[0].Taints = taints(16) }),
		"skip prepare and unprepare": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources, resourceapi.SkipNodeOperationNodeUnprepareResources}
		}),

		"published slice, consumable memory": publishedConsumable(t, "h100-8x-2numa"),
		"request policy, default only":       policy(resourceapi.CapacityRequestPolicy{Default: qty("1Gi")}),
		"request policy, values":             policy(resourceapi.CapacityRequestPolicy{Default: qty("20Gi"), ValidValues: qtys("10Gi", "20Gi", "40Gi")}),
		"request policy, range with step":    policy(resourceapi.CapacityRequestPolicy{Default: qty("2Gi"), ValidRange: rng(qty("1Gi"), qty("80Gi"), qty("1Gi"))}),
		"request policy, fractional range":   policy(resourceapi.CapacityRequestPolicy{Default: qty("1500m"), ValidRange: rng(qty("500m"), nil, qty("500m"))}),
		"multiple allocations, no policy": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices[0].AllowMultipleAllocations = ptr.To(true)
		}),

		// Invalid.
		"request policy, values and range":       policy(resourceapi.CapacityRequestPolicy{Default: qty("10Gi"), ValidValues: qtys("10Gi"), ValidRange: rng(qty("1Gi"), nil, nil)}),
		"request policy, values without default": policy(resourceapi.CapacityRequestPolicy{ValidValues: qtys("10Gi")}),
		"request policy, range without default":  policy(resourceapi.CapacityRequestPolicy{ValidRange: rng(qty("1Gi"), nil, nil)}),
		"request policy, default not a value":    policy(resourceapi.CapacityRequestPolicy{Default: qty("5Gi"), ValidValues: qtys("10Gi")}),
		"request policy, values unsorted":        policy(resourceapi.CapacityRequestPolicy{Default: qty("10Gi"), ValidValues: qtys("20Gi", "10Gi")}),
		"request policy, value above capacity":   policy(resourceapi.CapacityRequestPolicy{Default: qty("10Gi"), ValidValues: qtys("10Gi", "100Gi")}),
		"request policy, duplicate value":        policy(resourceapi.CapacityRequestPolicy{Default: qty("10Gi"), ValidValues: qtys("10Gi", "10240Mi")}),
		"request policy, 11 values": policy(resourceapi.CapacityRequestPolicy{Default: qty("1Gi"),
			ValidValues: qtys("1Gi", "2Gi", "3Gi", "4Gi", "5Gi", "6Gi", "7Gi", "8Gi", "9Gi", "10Gi", "11Gi")}),
		"request policy, range without min":        policy(resourceapi.CapacityRequestPolicy{Default: qty("1Gi"), ValidRange: rng(nil, nil, nil)}),
		"request policy, min above capacity":       policy(resourceapi.CapacityRequestPolicy{Default: qty("90Gi"), ValidRange: rng(qty("90Gi"), nil, nil)}),
		"request policy, default below min":        policy(resourceapi.CapacityRequestPolicy{Default: qty("1Gi"), ValidRange: rng(qty("2Gi"), nil, nil)}),
		"request policy, min above max":            policy(resourceapi.CapacityRequestPolicy{Default: qty("2Gi"), ValidRange: rng(qty("2Gi"), qty("1Gi"), nil)}),
		"request policy, max above capacity":       policy(resourceapi.CapacityRequestPolicy{Default: qty("2Gi"), ValidRange: rng(qty("1Gi"), qty("81Gi"), nil)}),
		"request policy, default above max":        policy(resourceapi.CapacityRequestPolicy{Default: qty("3Gi"), ValidRange: rng(qty("1Gi"), qty("2Gi"), nil)}),
		"request policy, zero step":                policy(resourceapi.CapacityRequestPolicy{Default: qty("1Gi"), ValidRange: rng(qty("1Gi"), nil, qty("0"))}),
		"request policy, step above capacity":      policy(resourceapi.CapacityRequestPolicy{Default: qty("1Gi"), ValidRange: rng(qty("1Gi"), nil, qty("80Gi"))}),
		"request policy, default off step":         policy(resourceapi.CapacityRequestPolicy{Default: qty("1536Mi"), ValidRange: rng(qty("1Gi"), nil, qty("1Gi"))}),
		"request policy, max off step":             policy(resourceapi.CapacityRequestPolicy{Default: qty("1Gi"), ValidRange: rng(qty("1Gi"), qty("1536Mi"), qty("1Gi"))}),
		"request policy, step below a milli":       policy(resourceapi.CapacityRequestPolicy{Default: qty("1"), ValidRange: rng(qty("1"), nil, qty("1u"))}),
		"129 devices":                              spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(129) }),
		"65 devices, one tainted":                  spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(65, taint) }),
		"65 devices, one consuming counters":       spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(65, consume) }),
		"65 devices, one with a list attribute":    spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(65, list) }),
		"33 attributes and capacities":             withDevicesN(func(d *resourceapi.Device) { fillAttrs(d, 30) }),
		"65-character string":                      spec(withAttr("productName", str(strings.Repeat("x", 65)))),
		"version with leading zero":                spec(withAttr("driverVersion", ver("570.124.06"))),
		"version with two parts":                   spec(withAttr("driverVersion", ver("9.0"))),
		"ascend version as reported":               spec(withAttr("driverVersion", ver("24.1.rc2"))),
		"four-part version":                        spec(withAttr("driverVersion", ver("25.0.0.1"))),
		"two values in one attribute":              spec(withAttr("x", resourceapi.DeviceAttribute{StringValue: ptr.To("a"), IntValue: ptr.To[int64](1)})),
		"no value in an attribute":                 spec(withAttr("x", resourceapi.DeviceAttribute{})),
		"33-character identifier":                  spec(withAttr(resourceapi.QualifiedName(strings.Repeat("a", 33)), str("x"))),
		"bad attribute domain":                     spec(withAttr("Bad_Domain/x", str("x"))),
		"identifier starting with a digit":         spec(withAttr("9lives", str("x"))),
		"bad device name":                          spec(withDevices(dev("GPU_0"))),
		"duplicate device names":                   spec(withDevices(dev("gpu-0"), dev("gpu-0"))),
		"shared counters and devices in one slice": spec(func(s *resourceapi.ResourceSliceSpec) { s.SharedCounters = counterSets(1) }),
		"9 counter sets": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = nil
			s.SharedCounters = counterSets(9)
		}),
		"33 counters in a set": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = nil
			s.SharedCounters = counterSets(1)
			s.SharedCounters[0].Counters = counters(33)
		}),
		"duplicate counter sets": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = nil
			s.SharedCounters = append(counterSets(1), counterSets(1)...)
		}),
		"empty counter set": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = nil
			s.SharedCounters = []resourceapi.CounterSet{{Name: "set-0"}}
		}),
		"three counter consumptions": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices[0].ConsumesCounters = []resourceapi.DeviceCounterConsumption{
				{CounterSet: "a", Counters: counters(1)}, {CounterSet: "b", Counters: counters(1)}, {CounterSet: "c", Counters: counters(1)}}
		}),
		"33 counters consumed from a set": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices[0].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "a", Counters: counters(33)}}
		}),
		"17 taints": spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices[0].Taints = taints(17) }),
		"bad taint effect": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: "Sometimes"}}
		}),
		"no node selection": spec(func(s *resourceapi.ResourceSliceSpec) { s.NodeName = nil }),
		"node name and all nodes": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.AllNodes = ptr.To(true)
		}),
		"node selector with two terms": spec(func(s *resourceapi.ResourceSliceSpec) {
			term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "k", Operator: corev1.NodeSelectorOpExists}}}
			s.NodeName, s.NodeSelector = nil, &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term, term}}
		}),
		"device node name without per-device selection": spec(func(s *resourceapi.ResourceSliceSpec) { s.Devices[0].NodeName = ptr.To("node-a") }),
		"per-device selection without device node": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName, s.PerDeviceNodeSelection = nil, ptr.To(true)
		}),
		"zero slice count":    spec(func(s *resourceapi.ResourceSliceSpec) { s.Pool.ResourceSliceCount = 0 }),
		"negative generation": spec(func(s *resourceapi.ResourceSliceSpec) { s.Pool.Generation = -1 }),
		"bad driver name":     spec(func(s *resourceapi.ResourceSliceSpec) { s.Driver = "Bad_Driver" }),
		"bad pool name":       spec(func(s *resourceapi.ResourceSliceSpec) { s.Pool.Name = "Node_A" }),
		"partition type attribute without consumers": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.PartitionTypeAttribute = ptr.To(resourceapi.FullyQualifiedName(driver + "/partitionType"))
		}),
		"partition type attribute missing on a consumer": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = devs(2, consume)
			s.PartitionTypeAttribute = ptr.To(resourceapi.FullyQualifiedName(driver + "/partitionType"))
		}),
		"skip prepare only": spec(func(s *resourceapi.ResourceSliceSpec) {
			s.SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources}
		}),
		"request policy without multiple allocations": spec(func(s *resourceapi.ResourceSliceSpec) {
			c := s.Devices[0].Capacity["memory"]
			c.RequestPolicy = &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("1Gi"))}
			s.Devices[0].Capacity["memory"] = c
		}),
	}

	for _, profile := range []string{"mig-mixed", "h100-8x-mig"} {
		for i, sp := range publishedMIG(t, profile) {
			cases[fmt.Sprintf("published dynamic-MIG slice %d of %s", i, profile)] = sp
		}
	}
	cases["published static-MIG slice"] = published(t, "mig-mixed")

	n := 0
	for name, sp := range cases {
		n++
		t.Run(name, func(t *testing.T) {
			local := apivalidation.ResourceSlice(&sp)
			slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("case-%d", n)}, Spec: sp}
			_, err := client.Create(ctx, slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && !apierrors.IsInvalid(err) {
				t.Fatalf("dry-run create failed for a reason other than validation: %v", err)
			}
			switch {
			case err == nil && local != nil:
				t.Errorf("API server accepts the slice, pkg/apivalidation rejects it: %v", local)
			case err != nil && local == nil:
				t.Errorf("API server rejects the slice, pkg/apivalidation accepts it: %v", err)
			case err != nil:
				t.Logf("both reject; server: %v; local: %v", err, local)
			}
		})
	}
}

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func qtys(ss ...string) []resource.Quantity {
	out := make([]resource.Quantity, len(ss))
	for i, s := range ss {
		out[i] = *qty(s)
	}
	return out
}

func rng(min, max, step *resource.Quantity) *resourceapi.CapacityRequestPolicyRange {
	return &resourceapi.CapacityRequestPolicyRange{Min: min, Max: max, Step: step}
}

// policy is a slice whose one device (80Gi of memory) allows multiple allocations and has p
// on its memory.
func policy(p resourceapi.CapacityRequestPolicy) resourceapi.ResourceSliceSpec {
	return spec(func(s *resourceapi.ResourceSliceSpec) {
		s.Devices[0].AllowMultipleAllocations = ptr.To(true)
		c := s.Devices[0].Capacity["memory"]
		c.RequestPolicy = &p
		s.Devices[0].Capacity["memory"] = c
	})
}

// publishedConsumable is what the plugin publishes with --consumable-memory.
func publishedConsumable(t *testing.T, profile string) resourceapi.ResourceSliceSpec {
	s := published(t, profile)
	for i := range s.Devices {
		slices.ConsumableMemory(&s.Devices[i])
	}
	return s
}

func withDevicesN(mut func(*resourceapi.Device)) resourceapi.ResourceSliceSpec {
	return spec(withDevices(dev("gpu-0", mut)))
}

// fillAttrs adds n string attributes to a device that has two attributes and one capacity.
func fillAttrs(d *resourceapi.Device, n int) {
	for i := range n {
		d.Attributes[resourceapi.QualifiedName(fmt.Sprintf("a%d", i))] = str("x")
	}
}

func taints(n int) []resourceapi.DeviceTaint {
	out := make([]resourceapi.DeviceTaint, n)
	for i := range out {
		out[i] = resourceapi.DeviceTaint{Key: fmt.Sprintf("example.com/t%d", i), Effect: resourceapi.DeviceTaintEffectNoSchedule}
	}
	return out
}
