package template

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
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
