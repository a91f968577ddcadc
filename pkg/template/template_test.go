package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var (
	nodeA = node{name: "gpu-node-a", seed: 1}
	nodeB = node{name: "ip-10-0-3-17.ec2.internal", seed: 2}
)

// mustBuild builds a template and fails the test on error.
func mustBuild(t testing.TB, slices []resourceapi.ResourceSlice, opts BuildOptions) *Template {
	t.Helper()
	tmpl, err := Build(slices, opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return tmpl
}

// roundTrip runs Encode, Decode and ResourceSlices and checks the slices with validateAPI.
func roundTrip(t testing.TB, tmpl *Template, nodeName string) (map[string]string, []*resourceapi.ResourceSlice) {
	t.Helper()
	ann, err := tmpl.Encode(0)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	decoded, err := Decode(ann)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !decoded.Equal(tmpl) {
		t.Fatalf("decoded template differs:\n%s", cmp.Diff(tmpl, decoded))
	}
	out, err := decoded.ResourceSlices(nodeName)
	if err != nil {
		t.Fatalf("ResourceSlices: %v", err)
	}
	if errs := validateAPI(out, nodeName); len(errs) > 0 {
		t.Fatalf("invalid slices: %v", errors.Join(errs...))
	}
	return ann, out
}

func devicesByName(slices []*resourceapi.ResourceSlice, driver string) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for _, s := range slices {
		if s.Spec.Driver == driver {
			for _, d := range s.Spec.Devices {
				out[d.Name] = d
			}
		}
	}
	return out
}

func inputDevices(in []resourceapi.ResourceSlice, driver string) map[string]resourceapi.Device {
	ptrs := make([]*resourceapi.ResourceSlice, len(in))
	for i := range in {
		ptrs[i] = &in[i]
	}
	return devicesByName(ptrs, driver)
}

// isIdentity reports whether an attribute of the fixtures is an identity attribute by default.
func isIdentity(name resourceapi.QualifiedName) bool {
	return newIdentityMatcher(DefaultIdentityAttributes()).match(qualify("x", name))
}

// attrValue returns the single value of a scalar attribute as a string.
func attrValue(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return "s:" + *a.StringValue
	case a.VersionValue != nil:
		return "v:" + *a.VersionValue
	case a.IntValue != nil:
		return fmt.Sprint("i:", *a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint("b:", *a.BoolValue)
	}
	return fmt.Sprint(a)
}

// partition groups device names by the value they have for an attribute (of a list of
// strings: by each of its entries), as a canonical string ("gpu-0,gpu-1|gpu-2,gpu-3"), so that
// two nodes' sharing structure can be compared without their values: devices that share alike
// answer every matchAttribute on the attribute alike.
func partition(devices map[string]resourceapi.Device, attr resourceapi.QualifiedName) string {
	groups := map[string][]string{}
	for name, d := range devices {
		a, ok := d.Attributes[attr]
		if !ok {
			continue
		}
		values := []string{attrValue(a)}
		if a.StringValues != nil {
			values = a.StringValues
		}
		for _, v := range values {
			groups[v] = append(groups[v], name)
		}
	}
	var parts []string
	for _, g := range groups {
		slices.Sort(g)
		parts = append(parts, strings.Join(g, ","))
	}
	slices.Sort(parts)
	return strings.Join(parts, "|")
}

func TestRoundTripPreservesDevices(t *testing.T) {
	gpu := h100Slices(nodeA)
	in := slices.Concat(gpu, nicSlices(nodeA, gpu), migSlices(nodeA))
	before := make([]resourceapi.ResourceSlice, len(in))
	for i := range in {
		in[i].DeepCopyInto(&before[i])
	}
	tmpl := mustBuild(t, in, BuildOptions{KeepDeviceTaints: true})
	if !apiequality.Semantic.DeepEqual(in, before) {
		t.Fatal("Build modified its input")
	}
	_, out := roundTrip(t, tmpl, "template-node-1")

	for _, driver := range []string{gpuDriver, nicDriver, "mig.accel-dra.io"} {
		want, got := inputDevices(in, driver), devicesByName(out, driver)
		if !slices.Equal(sortedKeys(want), sortedKeys(got)) {
			t.Fatalf("%s: devices %v, want %v", driver, sortedKeys(got), sortedKeys(want))
		}
		for name, w := range want {
			g := got[name]
			for attr, wa := range w.Attributes {
				ga, ok := g.Attributes[attr]
				switch {
				case !ok:
					t.Errorf("%s/%s: attribute %s lost", driver, name, attr)
				case isIdentity(attr):
					if attrValue(ga) == attrValue(wa) {
						t.Errorf("%s/%s: identity attribute %s kept the node's value %s", driver, name, attr, attrValue(wa))
					}
					if !strings.HasSuffix(*ga.StringValue, "-"+mustNodeHash("template-node-1")) {
						t.Errorf("%s/%s: identity attribute %s = %s, not specific to the node", driver, name, attr, attrValue(ga))
					}
				case !apiequality.Semantic.DeepEqual(ga, wa):
					t.Errorf("%s/%s: attribute %s = %v, want %v", driver, name, attr, ga, wa)
				}
			}
			if len(g.Attributes) != len(w.Attributes) {
				t.Errorf("%s/%s: %d attributes, want %d", driver, name, len(g.Attributes), len(w.Attributes))
			}
			if !apiequality.Semantic.DeepEqual(g.Capacity, w.Capacity) {
				t.Errorf("%s/%s: capacity %v, want %v", driver, name, g.Capacity, w.Capacity)
			}
			if !apiequality.Semantic.DeepEqual(g.ConsumesCounters, w.ConsumesCounters) {
				t.Errorf("%s/%s: consumesCounters %v, want %v", driver, name, g.ConsumesCounters, w.ConsumesCounters)
			}
			wantTaints := slices.Clone(w.Taints)
			for i := range wantTaints {
				wantTaints[i].TimeAdded = nil
			}
			if !apiequality.Semantic.DeepEqual(g.Taints, wantTaints) {
				t.Errorf("%s/%s: taints %v, want %v", driver, name, g.Taints, wantTaints)
			}
		}
		for attr := range want[sortedKeys(want)[0]].Attributes {
			if p, q := partition(want, attr), partition(got, attr); p != q {
				t.Errorf("%s: devices sharing %s: %s, want %s", driver, attr, q, p)
			}
		}
	}

	// Shared counters and the slice-level partition type survive.
	var counters []resourceapi.CounterSet
	for _, s := range out {
		if s.Spec.Driver == "mig.accel-dra.io" {
			counters = append(counters, s.Spec.SharedCounters...)
			if len(s.Spec.Devices) > 0 && (s.Spec.PartitionTypeAttribute == nil || *s.Spec.PartitionTypeAttribute != "mig.accel-dra.io/profile") {
				t.Errorf("slice %s: partitionTypeAttribute %v", s.Name, s.Spec.PartitionTypeAttribute)
			}
		}
	}
	if want := migSlices(nodeA)[0].Spec.SharedCounters; !apiequality.Semantic.DeepEqual(counters, want) {
		t.Errorf("shared counters %v, want %v", counters, want)
	}

	// Devices on a common PCIe root across drivers still share a value after materialization.
	gpus, nics := devicesByName(out, gpuDriver), devicesByName(out, nicDriver)
	for i := range 4 {
		g := gpus[fmt.Sprintf("gpu-%d", 2*i)].Attributes["resource.kubernetes.io/pcieRoot"]
		n := nics[fmt.Sprintf("nic-%d", i)].Attributes["resource.kubernetes.io/pcieRoot"]
		if *g.StringValue != *n.StringValue {
			t.Errorf("nic-%d pcieRoot %s, gpu-%d %s: want equal", i, *n.StringValue, 2*i, *g.StringValue)
		}
	}
}

func mustNodeHash(nodeName string) string {
	s := (&Template{APIVersion: APIVersion, Kind: Kind, IdentityAttributes: []resourceapi.FullyQualifiedName{"a.b/uuid"},
		Drivers: []Driver{{Name: "a.b", Devices: []resourceapi.Device{{Name: "d", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: new("x")}}}}}}})
	out, err := s.ResourceSlices(nodeName)
	if err != nil {
		panic(err)
	}
	return strings.TrimPrefix(*out[0].Spec.Devices[0].Attributes["uuid"].StringValue, "x-")
}

func TestDeterminism(t *testing.T) {
	build := func(n node) (map[string]string, []resourceapi.ResourceSlice) {
		gpu := h100Slices(n)
		in := slices.Concat(nicSlices(n, gpu), gpu)
		ann, _ := roundTrip(t, mustBuild(t, in, BuildOptions{}), "n")
		return ann, in
	}
	annA, inA := build(nodeA)
	annB, inB := build(nodeB)
	if diff := cmp.Diff(annA, annB); diff != "" {
		t.Fatalf("nodes of the same shape give different annotations (-a +b):\n%s", diff)
	}
	// The fixtures really differ in identity, and agree in sharing structure.
	ga, gb := inputDevices(inA, gpuDriver), inputDevices(inB, gpuDriver)
	for _, attr := range []resourceapi.QualifiedName{"uuid", "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot"} {
		if attrValue(ga["gpu-0"].Attributes[attr]) == attrValue(gb["gpu-0"].Attributes[attr]) {
			t.Fatalf("fixture: nodes share %s", attr)
		}
	}

	tmpl, err := Decode(annA)
	if err != nil {
		t.Fatal(err)
	}
	tmplDevices := map[string]resourceapi.Device{}
	for _, d := range tmpl.Drivers {
		if d.Name == gpuDriver {
			for _, dev := range d.Devices {
				tmplDevices[dev.Name] = dev
			}
		}
	}
	for attr, want := range map[resourceapi.QualifiedName]string{
		"resource.kubernetes.io/pcieRoot": "gpu-0,gpu-1|gpu-2,gpu-3|gpu-4,gpu-5|gpu-6,gpu-7",
		"numaNode":                        "gpu-0,gpu-1,gpu-2,gpu-3|gpu-4,gpu-5,gpu-6,gpu-7",
		"uuid":                            "gpu-0|gpu-1|gpu-2|gpu-3|gpu-4|gpu-5|gpu-6|gpu-7",
		"resource.kubernetes.io/pciBusID": "gpu-0|gpu-1|gpu-2|gpu-3|gpu-4|gpu-5|gpu-6|gpu-7",
	} {
		if got := partition(tmplDevices, attr); got != want {
			t.Errorf("template: devices sharing %s: %s, want %s", attr, got, want)
		}
		if got := partition(ga, attr); got != want {
			t.Errorf("fixture: devices sharing %s: %s, want %s", attr, got, want)
		}
	}
	for i, want := range []string{"pcie-root-0", "pcie-root-0", "pcie-root-1", "pcie-root-1", "pcie-root-2", "pcie-root-2", "pcie-root-3", "pcie-root-3"} {
		if got := *tmplDevices[fmt.Sprintf("gpu-%d", i)].Attributes["resource.kubernetes.io/pcieRoot"].StringValue; got != want {
			t.Errorf("gpu-%d: pcieRoot placeholder %s, want %s", i, got, want)
		}
	}
	if got, want := tmpl.IdentityAttributes, []resourceapi.FullyQualifiedName{
		"gpu.accel-dra.io/uuid", "nic.example.com/serial", "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot",
	}; !slices.Equal(got, want) {
		t.Errorf("identity attributes %v, want %v", got, want)
	}

	// Two template nodes get different identity values.
	s1, _ := tmpl.ResourceSlices("template-1")
	s2, _ := tmpl.ResourceSlices("template-2")
	u1 := devicesByName(s1, gpuDriver)["gpu-0"].Attributes["uuid"]
	u2 := devicesByName(s2, gpuDriver)["gpu-0"].Attributes["uuid"]
	if *u1.StringValue == *u2.StringValue {
		t.Errorf("two template nodes share uuid %s", *u1.StringValue)
	}
}

func TestIdentityAttributesOption(t *testing.T) {
	in := h100Slices(nodeA)
	for _, s := range in {
		for _, d := range s.Spec.Devices {
			*d.Attributes["index"].IntValue = 100 - *d.Attributes["index"].IntValue
		}
	}
	tmpl := mustBuild(t, in, BuildOptions{IdentityAttributes: []string{"gpu.accel-dra.io/productName", "index"}})
	dev := tmpl.Drivers[0].Devices[3]
	if got := *dev.Attributes["productName"].StringValue; got != "product-name-0" {
		t.Errorf("productName = %q, want the placeholder product-name-0", got)
	}
	if got := *dev.Attributes["index"].IntValue; got != 3 {
		t.Errorf("index = %d, want the ordinal 3", got)
	}
	if got := *dev.Attributes["uuid"].StringValue; !strings.HasPrefix(got, "GPU-") {
		t.Errorf("uuid = %q, want it kept when not listed", got)
	}
	if got := *dev.Attributes["resource.kubernetes.io/pcieRoot"].StringValue; !strings.HasPrefix(got, "pci0000:") {
		t.Errorf("pcieRoot = %q, want it kept when not listed", got)
	}
}

func TestPlaceholderPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"resource.kubernetes.io/pcieRoot": "pcie-root",
		"resource.kubernetes.io/pciBusID": "pci-bus-id",
		"gpu.accel-dra.io/uuid":           "uuid",
		"a.b/serial_number":               "serial-number",
		"a.b/MACAddress":                  "mac-address",
		"a.b/_":                           "id",
		"a.b/" + strings.Repeat("aB", 16): "a" + strings.Repeat("-ba", 15) + "-b",
	} {
		if got := placeholderPrefix(in); got != want {
			t.Errorf("placeholderPrefix(%q) = %q, want %q", in, got, want)
		}
	}
	// The longest prefixes are cut to leave room for a number.
	long := "a.b/" + strings.Repeat("BBb", 10) + "BB"
	if got := placeholderPrefix(long); len(got) != MaxPlaceholderLength-7 || strings.HasSuffix(got, "-") {
		t.Errorf("placeholderPrefix(%q) = %q (%d characters)", long, got, len(got))
	}
}

func TestBuildDropsNodeIdentity(t *testing.T) {
	tmpl := mustBuild(t, h100Slices(nodeB), BuildOptions{})
	doc, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{nodeB.name, "pci0000:", "GPU-", "0000:", `"uid"`, "resourceVersion", "generation", "kubelet-plugin"} {
		if bytes.Contains(doc, []byte(s)) {
			t.Errorf("template contains %q: %s", s, doc)
		}
	}
}

func TestBuildDropsTaintsByDefault(t *testing.T) {
	in := migSlices(nodeA)
	if len(in[1].Spec.Devices[0].Taints) == 0 {
		t.Fatal("fixture has no taints")
	}
	for _, d := range mustBuild(t, in, BuildOptions{}).Drivers[0].Devices {
		if len(d.Taints) > 0 {
			t.Errorf("device %s: taints %v kept", d.Name, d.Taints)
		}
	}
	for _, d := range mustBuild(t, in, BuildOptions{KeepDeviceTaints: true}).Drivers[0].Devices {
		if len(d.Taints) != 1 || d.Taints[0].TimeAdded != nil {
			t.Errorf("device %s: taints %v, want the driver's taint without timeAdded", d.Name, d.Taints)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	two := func(mod func(s []resourceapi.ResourceSlice)) []resourceapi.ResourceSlice {
		s := h100Slices(nodeA)
		mod(s)
		return s
	}
	for name, tc := range map[string]struct {
		in      []resourceapi.ResourceSlice
		wantErr string
		is      error
	}{
		"incomplete pool": {
			in:      h100Slices(nodeA)[:1],
			wantErr: "1 slices seen, 2 announced",
			is:      ErrIncompletePool,
		},
		"pool mid-update": {
			in:      two(func(s []resourceapi.ResourceSlice) { s[1].Spec.Pool.Generation = 4 }),
			wantErr: "generation 4: 1 slices seen, 2 announced",
			is:      ErrIncompletePool,
		},
		"two nodes": {
			in:      slices.Concat(h100Slices(nodeA), nicSlices(nodeB, h100Slices(nodeB))),
			wantErr: `node "ip-10-0-3-17.ec2.internal", but other slices are of node "gpu-node-a"`,
		},
		"not node-local": {
			in:      two(func(s []resourceapi.ResourceSlice) { s[0].Spec.NodeName = nil; s[0].Spec.AllNodes = new(true) }),
			wantErr: "only node-local slices",
		},
		"duplicate device": {
			in:      two(func(s []resourceapi.ResourceSlice) { s[1].Spec.Devices[0].Name = s[0].Spec.Devices[0].Name }),
			wantErr: "listed twice",
		},
		"two pools not named after the node": {
			in: slices.Concat(h100Slices(nodeA), func() []resourceapi.ResourceSlice {
				s := h100Slices(nodeA)
				for i := range s {
					s[i].Spec.Pool.Name = "other"
				}
				return s
			}()),
			wantErr: `pool "other" of node "gpu-node-a" does not start with the node name`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Build(tc.in, BuildOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Build error %v, want one containing %q", err, tc.wantErr)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Build error %v is not %v", err, tc.is)
			}
		})
	}
}

func TestMultiplePools(t *testing.T) {
	build := func(n node) *Template {
		a := h100Slices(n)
		b := h100Slices(n)
		for i := range b {
			b[i].Spec.Pool.Name = n.name + "/spare"
		}
		return mustBuild(t, slices.Concat(a, b), BuildOptions{})
	}
	ta, tb := build(nodeA), build(nodeB)
	if !ta.Equal(tb) {
		t.Fatalf("templates differ:\n%s", cmp.Diff(ta, tb))
	}
	if got := []string{ta.Drivers[0].PoolSuffix, ta.Drivers[1].PoolSuffix}; !slices.Equal(got, []string{"", "/spare"}) {
		t.Fatalf("pool suffixes %q", got)
	}
	_, out := roundTrip(t, ta, "tn")
	var pools []string
	for _, s := range out {
		pools = append(pools, s.Name+"="+s.Spec.Pool.Name)
	}
	if want := []string{"tn-gpu.accel-dra.io-0=tn", "tn-gpu.accel-dra.io-1=tn/spare"}; !slices.Equal(pools, want) {
		t.Errorf("slices %v, want %v", pools, want)
	}
}

func TestResourceSlicesSplitsWithinLimits(t *testing.T) {
	plain := func(n int) []resourceapi.Device {
		var out []resourceapi.Device
		for i := range n {
			out = append(out, resourceapi.Device{Name: fmt.Sprintf("d-%03d", i)})
		}
		return out
	}
	withCounters := plain(150)
	for i := 100; i < 110; i++ {
		withCounters[i].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "cs-00", Counters: map[string]resourceapi.Counter{"c": {Value: resource.MustParse("1")}}}}
	}
	var sets []resourceapi.CounterSet
	for i := range 20 {
		sets = append(sets, resourceapi.CounterSet{Name: fmt.Sprintf("cs-%02d", i), Counters: map[string]resourceapi.Counter{"c": {Value: resource.MustParse("1")}}})
	}
	for name, tc := range map[string]struct {
		driver Driver
		want   []int // devices per slice, -n for n counter sets
	}{
		"empty pool":    {Driver{Name: "a.b"}, []int{0}},
		"128 plain":     {Driver{Name: "a.b", Devices: plain(128)}, []int{128}},
		"300 plain":     {Driver{Name: "a.b", Devices: plain(300)}, []int{128, 128, 44}},
		"some counters": {Driver{Name: "a.b", Devices: withCounters, SharedCounters: sets}, []int{-8, -8, -4, 100, 50}},
		"list attribute": {Driver{Name: "a.b", Devices: func() []resourceapi.Device {
			d := plain(130)
			d[0].Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"l": {BoolValues: []bool{true}}}
			return d
		}()}, []int{64, 66}},
	} {
		t.Run(name, func(t *testing.T) {
			tmpl := &Template{APIVersion: APIVersion, Kind: Kind, Drivers: []Driver{tc.driver}}
			out, err := tmpl.ResourceSlices("node")
			if err != nil {
				t.Fatal(err)
			}
			if errs := validateAPI(out, "node"); len(errs) > 0 {
				t.Fatalf("invalid slices: %v", errors.Join(errs...))
			}
			var got []int
			for _, s := range out {
				if len(s.Spec.SharedCounters) > 0 {
					got = append(got, -len(s.Spec.SharedCounters))
				} else {
					got = append(got, len(s.Spec.Devices))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("slice sizes %v, want %v", got, tc.want)
			}
		})
	}
}

func TestResourceSlicesNames(t *testing.T) {
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	tmpl := &Template{APIVersion: APIVersion, Kind: Kind, Drivers: []Driver{{Name: "gpu.accel-dra.io"}}}
	out, err := tmpl.ResourceSlices(long)
	if err != nil {
		t.Fatal(err)
	}
	if errs := validateAPI(out, long); len(errs) > 0 {
		t.Fatalf("invalid slices: %v", errors.Join(errs...))
	}
	if !strings.HasSuffix(out[0].Name, "-0") || len(out[0].Name) > 253 {
		t.Errorf("name %q", out[0].Name)
	}
	if _, err := tmpl.ResourceSlices("Not_A_Node"); err == nil {
		t.Error("invalid node name accepted")
	}
}

func TestBudget(t *testing.T) {
	in := slices.Concat(wideSlices("n1", "gpu.accel-dra.io", 128, 20, false), wideSlices("n1", "npu.accel-dra.io", 128, 20, false))
	tmpl := mustBuild(t, in, BuildOptions{})
	doc, _ := json.Marshal(tmpl)
	ann, out := roundTrip(t, tmpl, "n")
	if ann[EncodingAnnotation] != EncodingGzipBase64 {
		t.Fatalf("encoding %q for a %d-byte document, want compression", ann[EncodingAnnotation], len(doc))
	}
	size := annotationsSize(ann)
	t.Logf("2 drivers x 128 devices: document %d bytes, annotations %d bytes", len(doc), size)
	if size > DefaultBudget || size >= len(doc)/4 {
		t.Errorf("annotations %d bytes for a %d-byte document", size, len(doc))
	}
	if len(out) != 2 {
		t.Errorf("%d slices, want 2", len(out))
	}

	// Over budget: a typed error and nothing to write.
	var be *BudgetError
	ann, err := tmpl.Encode(size - 1)
	if !errors.As(err, &be) || ann != nil {
		t.Fatalf("Encode(%d) = %v, %v; want a *BudgetError and no annotations", size-1, ann, err)
	}
	if be.Size != size || be.Budget != size-1 {
		t.Errorf("BudgetError %+v, want Size %d Budget %d", be, size, size-1)
	}
	if ann, err := tmpl.Encode(size); err != nil || ann == nil {
		t.Errorf("Encode(%d) = %v: the exact size must fit", size, err)
	}

	// Values that do not compress exceed the default budget.
	big := mustBuild(t, slices.Concat(wideSlices("n1", "gpu.accel-dra.io", 128, 20, true), wideSlices("n1", "npu.accel-dra.io", 128, 20, true)), BuildOptions{})
	ann, err = big.Encode(0)
	if !errors.As(err, &be) || ann != nil || be.Budget != DefaultBudget || be.Size <= DefaultBudget {
		t.Fatalf("Encode(0) of an incompressible template = %v, %v; want a *BudgetError over %d", len(ann), err, DefaultBudget)
	}
	if _, err := big.Encode(MaxBudget + 1); err == nil || errors.As(err, &be) {
		t.Errorf("Encode with a budget above the API limit: %v", err)
	}
}

func annotationsSize(ann map[string]string) int {
	n := 0
	for k, v := range ann {
		n += len(k) + len(v)
	}
	return n
}

func TestHash(t *testing.T) {
	tmpl := mustBuild(t, h100Slices(nodeA), BuildOptions{})
	ann, err := tmpl.Encode(0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tmpl.Hash()
	if err != nil || h != ann[HashAnnotation] || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(h) {
		t.Fatalf("Hash() = %q, %v; annotation %q", h, err, ann[HashAnnotation])
	}
	other := mustBuild(t, h100Slices(nodeA), BuildOptions{})
	*other.Drivers[0].Devices[0].Attributes["productName"].StringValue = "NVIDIA H200"
	if h2, _ := other.Hash(); h2 == h || other.Equal(tmpl) {
		t.Error("a changed template has the same hash")
	}
}

// TestGolden pins the annotations of an 8-GPU H100-like node and the slices of its template
// node. Regenerate with: go test ./pkg/template -run TestGolden -update
func TestGolden(t *testing.T) {
	tmpl := mustBuild(t, h100Slices(nodeA), BuildOptions{})
	ann, out := roundTrip(t, tmpl, "template-node")
	annJSON, err := json.MarshalIndent(ann, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	slicesJSON, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "h100-8gpu.annotations.json", append(annJSON, '\n'))
	checkGolden(t, "h100-8gpu.resourceslices.json", append(slicesJSON, '\n'))

	doc := []byte(ann[ResourceSlicesAnnotation])
	t.Logf("8-GPU template: annotations %d bytes (%s), document %d bytes, gzip+base64 would be %d bytes",
		annotationsSize(ann), ann[EncodingAnnotation], len(doc), len(gzipBase64(t, doc)))
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	// The reader module's tests read the same files, so they live with it.
	path := filepath.Join("..", "..", "api", "template", "testdata", name)
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
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; run with -update if intended):\n%s", path, diff)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
