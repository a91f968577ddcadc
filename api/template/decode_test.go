package template

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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

// withDevice returns validDoc with the device entry replaced.
func withDevice(device string) string {
	return strings.Replace(validDoc, `{"name":"gpu-0","attributes":{"type":{"string":"gpu"}}}`, device, 1)
}

// goldenAnnotations are the annotations accel-dra's writer (built on the newest k8s.io/api)
// writes for an 8 x H100 node; pkg/template's TestGolden keeps them current.
func goldenAnnotations(t testing.TB) map[string]string {
	raw, err := os.ReadFile(filepath.Join("testdata", "h100-8gpu.annotations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ann map[string]string
	if err := json.Unmarshal(raw, &ann); err != nil {
		t.Fatal(err)
	}
	return ann
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
	hashed := jsonAnnotations(validDoc)
	hashed[HashAnnotation] = DocumentHash([]byte(validDoc))
	if _, err := Decode(hashed); err != nil {
		t.Fatalf("document with its hash: %v", err)
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
		"bad taint effect":     {jsonAnnotations(withDevice(`{"name":"a","taints":[{"key":"k","effect":"Maybe"}]}`)), `effect "Maybe"`},
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
// payload. Decode must not panic; a template it accepts must give slices within the API's
// per-slice limits, with unique names and consistent pools, and must read back the same after
// a JSON round trip.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(goldenAnnotations(f)[ResourceSlicesAnnotation]), uint8(0))
	f.Add([]byte(validDoc), uint8(1))
	f.Add([]byte(gzipBase64(f, []byte(validDoc))), uint8(2))
	f.Add([]byte(`{"apiVersion":"template.accel-dra.io/v1alpha1","kind":"NodeGroupTemplate","drivers":[]}`), uint8(0))
	f.Add([]byte(twoPoolDoc), uint8(0))

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
		checkSlices(t, out, "n")
		again, err := json.Marshal(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		tmpl2, err := Decode(jsonAnnotations(string(again)))
		if err != nil {
			t.Fatalf("re-marshalled template does not decode: %v", err)
		}
		out2, err := tmpl2.ResourceSlices("n")
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(out)
		b, _ := json.Marshal(out2)
		if !bytes.Equal(a, b) {
			t.Fatal("re-marshalled template gives other slices")
		}
	})
}
