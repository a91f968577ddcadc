package template

import (
	"slices"
	"testing"
)

// BenchmarkBuildEncode builds and encodes the template of a node with 1,000 devices (two
// drivers, 500 devices each, shaped like the H100 fixture: 11 attributes and one capacity).
func BenchmarkBuildEncode(b *testing.B) {
	in := slices.Concat(wideSlices("n1", "gpu.accel-dra.io", 500, 8, false), wideSlices("n1", "npu.accel-dra.io", 500, 8, false))
	var ann map[string]string
	var doc []byte
	// Not b.Loop(): with it this file crashes the Go 1.26.8 compiler (internal compiler error
	// in iter.go).
	for range b.N {
		tmpl, err := Build(in, BuildOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if ann, err = tmpl.Encode(0); err != nil {
			b.Fatal(err)
		}
		if doc == nil {
			doc, _ = tmpl.marshal()
		}
	}
	b.ReportMetric(float64(annotationsSize(ann)), "annotation-bytes")
	b.ReportMetric(float64(len(doc)), "document-bytes")
}
