// Package templatetest holds the documents that every reader of the template format must treat
// alike: this module's Decode (what the Cluster Autoscaler vendors, on its own k8s.io/api) and
// accel-dra's writer-side Decode (pkg/template, which adds the writer's checks on top). Each
// runs the same table with RunDecode, so that the two cannot drift apart.
package templatetest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/accel-dra/accel-dra/api/template"
)

// ValidDoc is a minimal valid template: one GPU.
const ValidDoc = `{"apiVersion":"template.accel-dra.io/v1alpha1","kind":"NodeGroupTemplate",` +
	`"drivers":[{"name":"gpu.accel-dra.io","devices":[{"name":"gpu-0","attributes":{"type":{"string":"gpu"}}}]}]}`

// WithDevice returns ValidDoc with its device entry replaced by device (one or more JSON objects).
func WithDevice(device string) string {
	return strings.Replace(ValidDoc, `{"name":"gpu-0","attributes":{"type":{"string":"gpu"}}}`, device, 1)
}

// JSONAnnotations returns annotations holding doc as plain JSON, without a hash.
func JSONAnnotations(doc string) map[string]string {
	return map[string]string{template.VersionAnnotation: template.Version, template.EncodingAnnotation: template.EncodingJSON, template.ResourceSlicesAnnotation: doc}
}

// GzipBase64 is doc as the gzip+base64 encoding carries it.
func GzipBase64(t testing.TB, doc []byte) string {
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

// Case is annotations and what a reader must make of them: "" to accept, else a part of the error.
type Case struct {
	Name        string
	Annotations map[string]string
	WantErr     string
}

// policyDevice is a consumable device of 80Gi of memory with request policy policy (JSON).
func policyDevice(policy string) string {
	return `{"name":"a","allowMultipleAllocations":true,"capacity":{"memory":{"value":"80Gi","requestPolicy":` + policy + `}}}`
}

// Cases are the documents every reader must accept, and those it must refuse with the error
// named. The request-policy cases restate the API server's rules (pkg/apivalidation's
// e2e/apivalidation checks them against a real one): a reader that let a policy through which
// the API server refuses would simulate a device no real node can publish.
func Cases(t testing.TB) []Case {
	with := func(mod func(a map[string]string)) map[string]string {
		a := JSONAnnotations(ValidDoc)
		mod(a)
		return a
	}
	gzipped := func(doc []byte) map[string]string {
		return with(func(a map[string]string) {
			a[template.EncodingAnnotation] = template.EncodingGzipBase64
			a[template.ResourceSlicesAnnotation] = GzipBase64(t, doc)
		})
	}
	raw, _ := base64.StdEncoding.DecodeString(GzipBase64(t, []byte(ValidDoc)))
	tooMany := func(n int) string {
		var devs []string
		for i := range n {
			devs = append(devs, fmt.Sprintf(`{"name":"d-%d"}`, i))
		}
		return WithDevice(strings.Join(devs, ","))
	}
	policy := func(p string) map[string]string { return JSONAnnotations(WithDevice(policyDevice(p))) }
	return []Case{
		// Accepted.
		{"valid document", JSONAnnotations(ValidDoc), ""},
		{"absent encoding means json", with(func(a map[string]string) { delete(a, template.EncodingAnnotation) }), ""},
		{"gzip document", gzipped([]byte(ValidDoc)), ""},
		{"document with its hash", with(func(a map[string]string) { a[template.HashAnnotation] = template.DocumentHash([]byte(ValidDoc)) }), ""},
		{"consumable memory as published", policy(`{"default":"80Gi","validRange":{"min":"1Gi"}}`), ""},
		{"request policy, values", policy(`{"default":"20Gi","validValues":["10Gi","20Gi","40Gi"]}`), ""},
		{"request policy, range with max and step", policy(`{"default":"2Gi","validRange":{"min":"1Gi","max":"80Gi","step":"1Gi"}}`), ""},
		{"request policy, default only", policy(`{"default":"1Gi"}`), ""},

		// Refused.
		{"missing version", with(func(a map[string]string) { delete(a, template.VersionAnnotation) }), "annotation template.accel-dra.io/version is missing"},
		{"unknown version", with(func(a map[string]string) { a[template.VersionAnnotation] = "v2" }), `unsupported version "v2"`},
		{"unknown encoding", with(func(a map[string]string) { a[template.EncodingAnnotation] = "zstd" }), `unsupported encoding "zstd"`},
		{"unknown apiVersion", JSONAnnotations(strings.Replace(ValidDoc, "v1alpha1", "v1beta1", 1)), `unsupported apiVersion "template.accel-dra.io/v1beta1"`},
		{"unknown kind", JSONAnnotations(strings.Replace(ValidDoc, "NodeGroupTemplate", "Other", 1)), `kind "Other"`},
		{"unknown field", JSONAnnotations(strings.Replace(ValidDoc, `"kind"`, `"extra":1,"kind"`, 1)), `unknown field "extra"`},
		{"unknown device field", JSONAnnotations(WithDevice(`{"name":"gpu-0","basic":{}}`)), `unknown field "drivers[0].devices[0].basic"`},
		{"wrong case", JSONAnnotations(strings.Replace(ValidDoc, `"drivers"`, `"Drivers"`, 1)), `unknown field "Drivers"`},
		{"duplicate field", JSONAnnotations(strings.Replace(ValidDoc, `"kind"`, `"kind":"x","kind"`, 1)), `duplicate field "kind"`},
		{"trailing data", JSONAnnotations(ValidDoc + "{}"), "invalid JSON"},
		{"not json", JSONAnnotations("apiVersion: x"), "invalid JSON"},
		{"hash mismatch", with(func(a map[string]string) { a[template.HashAnnotation] = "sha256:00" }), "does not match template.accel-dra.io/hash"},
		{"corrupt base64", with(func(a map[string]string) {
			a[template.EncodingAnnotation] = template.EncodingGzipBase64
			a[template.ResourceSlicesAnnotation] = "H4sI!!!"
		}), "invalid base64"},
		{"not gzip", with(func(a map[string]string) {
			a[template.EncodingAnnotation] = template.EncodingGzipBase64
			a[template.ResourceSlicesAnnotation] = base64.StdEncoding.EncodeToString([]byte(ValidDoc))
		}), "invalid gzip"},
		{"truncated gzip", with(func(a map[string]string) {
			a[template.EncodingAnnotation] = template.EncodingGzipBase64
			a[template.ResourceSlicesAnnotation] = base64.StdEncoding.EncodeToString(raw[:len(raw)-6])
		}), "invalid gzip"},
		{"corrupt gzip checksum", with(func(a map[string]string) {
			bad := bytes.Clone(raw)
			bad[len(bad)-6] ^= 0xff
			a[template.EncodingAnnotation] = template.EncodingGzipBase64
			a[template.ResourceSlicesAnnotation] = base64.StdEncoding.EncodeToString(bad)
		}), "invalid gzip"},
		{"decompression bomb", gzipped(bytes.Repeat([]byte(" "), 16<<20)), "decompresses to more than 1048576 bytes"},
		{"large raw document", JSONAnnotations(strings.Repeat(" ", template.MaxBudget+1)), "larger than 262144 bytes"},
		{"too many devices", gzipped([]byte(tooMany(template.MaxDevices + 1))), "more than 4096 devices"},
		{"invalid device name", JSONAnnotations(WithDevice(`{"name":"GPU_0"}`)), `device "GPU_0": name`},
		{"duplicate device", JSONAnnotations(WithDevice(`{"name":"a"},{"name":"a"}`)), `device "a": listed twice`},
		{"long attribute value", JSONAnnotations(WithDevice(`{"name":"a","attributes":{"x":{"string":"` + strings.Repeat("x", 65) + `"}}}`)), "value longer than 64 characters"},
		{"not semver", JSONAnnotations(WithDevice(`{"name":"a","attributes":{"x":{"version":"1.02"}}}`)), `version "1.02" is not semver`},
		{"two values", JSONAnnotations(WithDevice(`{"name":"a","attributes":{"x":{"int":1,"bool":true}}}`)), "exactly one value"},
		{"missing counter set", JSONAnnotations(WithDevice(`{"name":"a","consumesCounters":[{"counterSet":"cs","counters":{"c":{"value":"1"}}}]}`)), `counter set "cs" not found`},
		{"bad quantity", JSONAnnotations(WithDevice(`{"name":"a","capacity":{"memory":{"value":"80 Gi"}}}`)), "invalid JSON"},
		{"bad taint effect", JSONAnnotations(WithDevice(`{"name":"a","taints":[{"key":"k","effect":"Maybe"}]}`)), `effect "Maybe"`},
		{"taint time", JSONAnnotations(WithDevice(`{"name":"a","taints":[{"key":"k","effect":"NoSchedule","timeAdded":"2026-01-01T00:00:00Z"}]}`)), "timeAdded is node state"},
		{"node selection", JSONAnnotations(WithDevice(`{"name":"a","allNodes":true}`)), "per-device node selection"},
		{"long placeholder", JSONAnnotations(strings.Replace(WithDevice(`{"name":"a","attributes":{"uuid":{"string":"`+strings.Repeat("u", 56)+`"}}}`),
			`"drivers"`, `"identityAttributes":["gpu.accel-dra.io/uuid"],"drivers"`, 1)), "placeholder"},
		{"invalid pool suffix", JSONAnnotations(strings.Replace(ValidDoc, `"name":"gpu.accel-dra.io"`, `"name":"gpu.accel-dra.io","poolSuffix":"/-x"`, 1)), "poolSuffix"},
		{"duplicate driver", JSONAnnotations(strings.Replace(ValidDoc, `"drivers":[`, `"drivers":[{"name":"gpu.accel-dra.io"},`, 1)), "listed twice"},
		{"request policy without multiple allocations", JSONAnnotations(WithDevice(`{"name":"a","capacity":{"memory":{"value":"80Gi","requestPolicy":{"default":"1Gi"}}}}`)), "requestPolicy needs allowMultipleAllocations"},
		{"request policy, values and range", policy(`{"default":"10Gi","validValues":["10Gi"],"validRange":{"min":"1Gi"}}`), "exactly one policy"},
		{"request policy, values without default", policy(`{"validValues":["10Gi"]}`), "default: required"},
		{"request policy, range without default", policy(`{"validRange":{"min":"1Gi"}}`), "default: required"},
		{"request policy, default not a value", policy(`{"default":"5Gi","validValues":["10Gi"]}`), "not one of the valid values"},
		{"request policy, values unsorted", policy(`{"default":"10Gi","validValues":["20Gi","10Gi"]}`), "ascending"},
		{"request policy, value above capacity", policy(`{"default":"10Gi","validValues":["10Gi","100Gi"]}`), "larger than the capacity"},
		{"request policy, duplicate value", policy(`{"default":"10Gi","validValues":["10Gi","10240Mi"]}`), "duplicate"},
		{"request policy, range without min", policy(`{"default":"1Gi","validRange":{}}`), "min: required"},
		{"request policy, min above capacity", policy(`{"default":"90Gi","validRange":{"min":"90Gi"}}`), "min: 90Gi is larger"},
		{"request policy, default below min", policy(`{"default":"1Gi","validRange":{"min":"2Gi"}}`), "less than min"},
		{"request policy, min above max", policy(`{"default":"2Gi","validRange":{"min":"2Gi","max":"1Gi"}}`), "larger than max"},
		{"request policy, default above max", policy(`{"default":"3Gi","validRange":{"min":"1Gi","max":"2Gi"}}`), "more than max"},
		{"request policy, zero step", policy(`{"default":"1Gi","validRange":{"min":"1Gi","step":"0"}}`), "greater than zero"},
		{"request policy, default off step", policy(`{"default":"1536Mi","validRange":{"min":"1Gi","step":"1Gi"}}`), "multiple of step"},
	}
}

// RunDecode runs every case of Cases through decode, a reader's Decode, as subtests.
func RunDecode[T any](t *testing.T, decode func(map[string]string) (*T, error)) {
	for _, tc := range Cases(t) {
		t.Run(tc.Name, func(t *testing.T) {
			tmpl, err := decode(tc.Annotations)
			if tc.WantErr == "" {
				if err != nil || tmpl == nil {
					t.Fatalf("Decode: %v, want a template", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.WantErr) {
				t.Fatalf("Decode error %v, want one containing %q", err, tc.WantErr)
			}
			if tmpl != nil {
				t.Fatal("Decode returned a template with an error")
			}
		})
	}
	t.Run("no template", func(t *testing.T) {
		if _, err := decode(map[string]string{"other": "x"}); !errors.Is(err, template.ErrNoTemplate) {
			t.Fatalf("no template: %v, want ErrNoTemplate", err)
		}
	})
}
