package template

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/accel-dra/accel-dra/api/template/templatetest"
)

var (
	gzipBase64      = templatetest.GzipBase64
	jsonAnnotations = templatetest.JSONAnnotations
)

const validDoc = templatetest.ValidDoc

// TestDecode runs the documents every reader must treat alike (templatetest.Cases): the
// writer's checks on top of the reader's must accept what the reader accepts and refuse with the
// reader's error what it refuses.
func TestDecode(t *testing.T) {
	templatetest.RunDecode(t, Decode)
}

// TestDecodeBombMemory checks that Decode stops decompressing at the limit instead of
// reading a bomb to the end first.
func TestDecodeBombMemory(t *testing.T) {
	ann := jsonAnnotations(gzipBase64(t, bytes.Repeat([]byte(" "), 64<<20)))
	ann[EncodingAnnotation] = EncodingGzipBase64
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := Decode(ann); err == nil {
		t.Fatal("bomb accepted")
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("Decode of a 64 MiB bomb allocated %d bytes", alloc)
	}
}

// FuzzDecode feeds arbitrary documents to Decode, plain, gzipped, or as a raw gzip+base64
// payload. Decode must not panic, and a template it accepts must produce valid slices and
// survive another Encode/Decode unchanged.
func FuzzDecode(f *testing.F) {
	tmpl, err := Build(h100Slices(nodeA), BuildOptions{})
	if err != nil {
		f.Fatal(err)
	}
	golden, err := tmpl.Encode(0)
	if err != nil {
		f.Fatal(err)
	}
	mig, err := Build(migSlices(nodeA), BuildOptions{KeepDeviceTaints: true})
	if err != nil {
		f.Fatal(err)
	}
	migAnn, err := mig.Encode(0)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(golden[ResourceSlicesAnnotation]), uint8(0))
	f.Add([]byte(migAnn[ResourceSlicesAnnotation]), uint8(0))
	f.Add([]byte(validDoc), uint8(1))
	f.Add([]byte(gzipBase64(f, []byte(validDoc))), uint8(2))
	f.Add([]byte(`{"apiVersion":"template.accel-dra.io/v1alpha1","kind":"NodeGroupTemplate","drivers":[]}`), uint8(0))

	f.Fuzz(func(t *testing.T, doc []byte, mode uint8) {
		ann := jsonAnnotations(string(doc))
		switch mode % 3 {
		case 1:
			ann[EncodingAnnotation] = EncodingGzipBase64
			ann[ResourceSlicesAnnotation] = gzipBase64(t, doc)
		case 2:
			ann[EncodingAnnotation] = EncodingGzipBase64
		}
		tmpl, err := Decode(ann)
		if err != nil {
			return
		}
		out, err := tmpl.ResourceSlices("n")
		if err != nil {
			t.Fatalf("decoded template gives no slices: %v", err)
		}
		if errs := validateAPI(out, "n"); len(errs) > 0 {
			t.Fatalf("decoded template gives invalid slices: %v", errors.Join(errs...))
		}
		again, err := tmpl.Encode(MaxBudget)
		var be *BudgetError
		if errors.As(err, &be) {
			return
		}
		if err != nil {
			t.Fatalf("decoded template does not encode: %v", err)
		}
		tmpl2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded template does not decode: %v", err)
		}
		if !tmpl2.Equal(tmpl) {
			t.Fatal("re-encoded template differs")
		}
		again2, _ := tmpl2.Encode(MaxBudget)
		if !maps.Equal(again, again2) {
			t.Fatal("encoding is not stable")
		}
	})
}

// FuzzTemplate builds templates from arbitrary names and values. Whatever the package accepts
// (ResourceSlices succeeds) must give slices that pass validateAPI, and must survive Encode and
// Decode unchanged: the package's own validation must not be weaker than the API's.
func FuzzTemplate(f *testing.F) {
	f.Add("gpu.accel-dra.io", "", "gpu-0", "resource.kubernetes.io/pcieRoot", "pcie-root-0", "1.2.3", int64(3), "memory", "80Gi", uint8(8), uint8(0))
	f.Add("a.b", "/mig", "d", "uuid", "uuid-0", "0.0.1", int64(-1), "c", "1", uint8(70), uint8(7))
	f.Add("A.B", "-x", "x-0", "a.b/c_d", "", "1.0.0-rc.1+b", int64(0), "counter", "-1", uint8(200), uint8(3))
	f.Fuzz(func(t *testing.T, driver, suffix, device, attr, str, version string, num int64, counter, quantity string, n, flags uint8) {
		tmpl := fuzzTemplate(driver, suffix, device, attr, str, version, num, counter, quantity, n, flags)
		if tmpl == nil {
			return
		}
		out, err := tmpl.ResourceSlices("n")
		if err != nil {
			return
		}
		if errs := validateAPI(out, "n"); len(errs) > 0 {
			t.Fatalf("accepted template gives invalid slices: %v", errors.Join(errs...))
		}
		ann, err := tmpl.Encode(MaxBudget)
		if err != nil {
			t.Fatalf("accepted template does not encode: %v", err)
		}
		back, err := Decode(ann)
		if err != nil {
			t.Fatalf("encoded template does not decode: %v", err)
		}
		if !back.Equal(tmpl) {
			t.Fatal("template changed in Encode/Decode")
		}
		out2, err := back.ResourceSlices("n")
		if err != nil || len(out2) != len(out) || !slices.EqualFunc(out, out2, func(a, b *resourceapi.ResourceSlice) bool { return a.Name == b.Name }) {
			t.Fatalf("decoded template gives other slices: %v", err)
		}
	})
}

// fuzzTemplate makes FuzzTemplate's template; nil when the quantity does not parse.
func fuzzTemplate(driver, suffix, device, attr, str, version string, num int64, counter, quantity string, n, flags uint8) *Template {
	q, err := resource.ParseQuantity(quantity)
	if err != nil {
		return nil
	}
	d := Driver{Name: driver, PoolSuffix: suffix}
	if flags&1 != 0 {
		d.SharedCounters = []resourceapi.CounterSet{{Name: counter, Counters: map[string]resourceapi.Counter{counter: {Value: q}}}}
	}
	for i := range int(n) {
		dev := resourceapi.Device{
			Name: fmt.Sprintf("%s%d", device, i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				resourceapi.QualifiedName(attr):          {StringValue: new(str)},
				resourceapi.QualifiedName(attr + "_v"):   {VersionValue: new(version)},
				resourceapi.QualifiedName(attr + "_int"): {IntValue: new(num)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{resourceapi.QualifiedName(counter): {Value: q}},
		}
		if flags&2 != 0 && i%2 == 0 {
			dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: counter, Counters: map[string]resourceapi.Counter{counter: {Value: q}}}}
		}
		if flags&4 != 0 && i%3 == 0 {
			dev.Taints = []resourceapi.DeviceTaint{{Key: attr, Value: str, Effect: resourceapi.DeviceTaintEffectNoExecute}}
		}
		if flags&8 != 0 {
			dev.Attributes["list"] = resourceapi.DeviceAttribute{StringValues: []string{str, version}}
		}
		d.Devices = append(d.Devices, dev)
	}
	if flags&16 != 0 {
		d.PartitionTypeAttribute = new(resourceapi.FullyQualifiedName(qualify(driver, resourceapi.QualifiedName(attr))))
	}
	tmpl := &Template{APIVersion: APIVersion, Kind: Kind, Drivers: []Driver{d}}
	if flags&32 != 0 {
		tmpl.IdentityAttributes = []resourceapi.FullyQualifiedName{resourceapi.FullyQualifiedName(qualify(driver, resourceapi.QualifiedName(attr)))}
	}
	return tmpl
}
