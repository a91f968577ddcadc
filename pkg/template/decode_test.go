package template

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func gzipBase64(t testing.TB, doc []byte) string {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(doc); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// jsonAnnotations returns annotations holding doc as plain JSON, without a hash.
func jsonAnnotations(doc string) map[string]string {
	return map[string]string{VersionAnnotation: Version, EncodingAnnotation: EncodingJSON, ResourceSlicesAnnotation: doc}
}

const validDoc = `{"apiVersion":"template.accel-dra.io/v1alpha1","kind":"NodeGroupTemplate",` +
	`"drivers":[{"name":"gpu.accel-dra.io","devices":[{"name":"gpu-0","attributes":{"type":{"string":"gpu"}}}]}]}`

// withDoc returns validDoc with the device entry replaced.
func withDevice(device string) string {
	return strings.Replace(validDoc, `{"name":"gpu-0","attributes":{"type":{"string":"gpu"}}}`, device, 1)
}

func TestDecode(t *testing.T) {
	if _, err := Decode(jsonAnnotations(validDoc)); err != nil {
		t.Fatalf("valid document: %v", err)
	}
	noEncoding := jsonAnnotations(validDoc)
	delete(noEncoding, EncodingAnnotation)
	if _, err := Decode(noEncoding); err != nil {
		t.Fatalf("absent encoding must mean json: %v", err)
	}
	gz := jsonAnnotations(gzipBase64(t, []byte(validDoc)))
	gz[EncodingAnnotation] = EncodingGzipBase64
	if _, err := Decode(gz); err != nil {
		t.Fatalf("gzip document: %v", err)
	}
	if _, err := Decode(map[string]string{"other": "x"}); !errors.Is(err, ErrNoTemplate) {
		t.Fatalf("no template: %v, want ErrNoTemplate", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	with := func(mod func(a map[string]string)) map[string]string {
		a := jsonAnnotations(validDoc)
		mod(a)
		return a
	}
	gzipped := func(doc []byte) map[string]string {
		return with(func(a map[string]string) {
			a[EncodingAnnotation] = EncodingGzipBase64
			a[ResourceSlicesAnnotation] = gzipBase64(t, doc)
		})
	}
	valid := gzipBase64(t, []byte(validDoc))
	raw, _ := base64.StdEncoding.DecodeString(valid)
	tooMany := func(n int) string {
		var devs []string
		for i := range n {
			devs = append(devs, fmt.Sprintf(`{"name":"d-%d"}`, i))
		}
		return withDevice(strings.Join(devs, ","))
	}

	for name, tc := range map[string]struct {
		ann     map[string]string
		wantErr string
	}{
		"missing version":      {with(func(a map[string]string) { delete(a, VersionAnnotation) }), "annotation template.accel-dra.io/version is missing"},
		"unknown version":      {with(func(a map[string]string) { a[VersionAnnotation] = "v2" }), `unsupported version "v2"`},
		"unknown encoding":     {with(func(a map[string]string) { a[EncodingAnnotation] = "zstd" }), `unsupported encoding "zstd"`},
		"unknown apiVersion":   {jsonAnnotations(strings.Replace(validDoc, "v1alpha1", "v1beta1", 1)), `unsupported apiVersion "template.accel-dra.io/v1beta1"`},
		"unknown kind":         {jsonAnnotations(strings.Replace(validDoc, "NodeGroupTemplate", "Other", 1)), `kind "Other"`},
		"unknown field":        {jsonAnnotations(strings.Replace(validDoc, `"kind"`, `"extra":1,"kind"`, 1)), `unknown field "extra"`},
		"unknown device field": {jsonAnnotations(withDevice(`{"name":"gpu-0","basic":{}}`)), `unknown field "drivers[0].devices[0].basic"`},
		"wrong case":           {jsonAnnotations(strings.Replace(validDoc, `"drivers"`, `"Drivers"`, 1)), `unknown field "Drivers"`},
		"duplicate field":      {jsonAnnotations(strings.Replace(validDoc, `"kind"`, `"kind":"x","kind"`, 1)), `duplicate field "kind"`},
		"trailing data":        {jsonAnnotations(validDoc + "{}"), "invalid JSON"},
		"not json":             {jsonAnnotations("apiVersion: x"), "invalid JSON"},
		"hash mismatch":        {with(func(a map[string]string) { a[HashAnnotation] = "sha256:00" }), "does not match template.accel-dra.io/hash"},
		"corrupt base64": {with(func(a map[string]string) {
			a[EncodingAnnotation] = EncodingGzipBase64
			a[ResourceSlicesAnnotation] = "H4sI!!!"
		}), "invalid base64"},
		"not gzip": {with(func(a map[string]string) {
			a[EncodingAnnotation] = EncodingGzipBase64
			a[ResourceSlicesAnnotation] = base64.StdEncoding.EncodeToString([]byte(validDoc))
		}), "invalid gzip"},
		"truncated gzip": {with(func(a map[string]string) {
			a[EncodingAnnotation] = EncodingGzipBase64
			a[ResourceSlicesAnnotation] = base64.StdEncoding.EncodeToString(raw[:len(raw)-6])
		}), "invalid gzip"},
		"corrupt gzip checksum": {with(func(a map[string]string) {
			bad := bytes.Clone(raw)
			bad[len(bad)-6] ^= 0xff
			a[EncodingAnnotation] = EncodingGzipBase64
			a[ResourceSlicesAnnotation] = base64.StdEncoding.EncodeToString(bad)
		}), "invalid gzip"},
		"decompression bomb":   {gzipped(bytes.Repeat([]byte(" "), 16<<20)), "decompresses to more than 1048576 bytes"},
		"large raw document":   {jsonAnnotations(strings.Repeat(" ", MaxBudget+1)), "larger than 262144 bytes"},
		"too many devices":     {gzipped([]byte(tooMany(MaxDevices + 1))), "more than 4096 devices"},
		"invalid device name":  {jsonAnnotations(withDevice(`{"name":"GPU_0"}`)), `device "GPU_0": name`},
		"duplicate device":     {jsonAnnotations(withDevice(`{"name":"a"},{"name":"a"}`)), `device "a": listed twice`},
		"long attribute value": {jsonAnnotations(withDevice(`{"name":"a","attributes":{"x":{"string":"` + strings.Repeat("x", 65) + `"}}}`)), "value longer than 64 characters"},
		"not semver":           {jsonAnnotations(withDevice(`{"name":"a","attributes":{"x":{"version":"1.02"}}}`)), `version "1.02" is not semver`},
		"two values":           {jsonAnnotations(withDevice(`{"name":"a","attributes":{"x":{"int":1,"bool":true}}}`)), "exactly one value"},
		"missing counter set":  {jsonAnnotations(withDevice(`{"name":"a","consumesCounters":[{"counterSet":"cs","counters":{"c":{"value":"1"}}}]}`)), `counter set "cs" not found`},
		"bad quantity":         {jsonAnnotations(withDevice(`{"name":"a","capacity":{"memory":{"value":"80 Gi"}}}`)), "invalid JSON"},
		"taint time":           {jsonAnnotations(withDevice(`{"name":"a","taints":[{"key":"k","effect":"NoSchedule","timeAdded":"2026-01-01T00:00:00Z"}]}`)), "timeAdded is node state"},
		"node selection":       {jsonAnnotations(withDevice(`{"name":"a","allNodes":true}`)), "per-device node selection"},
		"long placeholder": {jsonAnnotations(strings.Replace(withDevice(`{"name":"a","attributes":{"uuid":{"string":"`+strings.Repeat("u", 56)+`"}}}`),
			`"drivers"`, `"identityAttributes":["gpu.accel-dra.io/uuid"],"drivers"`, 1)), "placeholder"},
		"invalid pool suffix": {jsonAnnotations(strings.Replace(validDoc, `"name":"gpu.accel-dra.io"`, `"name":"gpu.accel-dra.io","poolSuffix":"/-x"`, 1)), "poolSuffix"},
		"duplicate driver":    {jsonAnnotations(strings.Replace(validDoc, `"drivers":[`, `"drivers":[{"name":"gpu.accel-dra.io"},`, 1)), "listed twice"},
	} {
		t.Run(name, func(t *testing.T) {
			tmpl, err := Decode(tc.ann)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Decode error %v, want one containing %q", err, tc.wantErr)
			}
			if tmpl != nil {
				t.Fatal("Decode returned a template with an error")
			}
		})
	}
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
