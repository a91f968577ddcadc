package template

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"

	apitemplate "github.com/accel-dra/accel-dra/api/template"
)

// Encode returns the annotations that store the template: VersionAnnotation, HashAnnotation,
// EncodingAnnotation and ResourceSlicesAnnotation. The JSON document is gzipped and base64
// encoded when it is larger than CompressThreshold. budget limits all four annotations together
// (keys plus values); 0 means DefaultBudget. Over budget, Encode returns a *BudgetError and no
// annotations.
//
// Equal templates give byte-identical annotations (with the same Go release: the compressed
// bytes depend on compress/flate; the hash does not).
func (t *Template) Encode(budget int) (map[string]string, error) {
	if budget == 0 {
		budget = DefaultBudget
	}
	if budget < 0 || budget > MaxBudget {
		return nil, fmt.Errorf("budget %d outside (0, %d]", budget, MaxBudget)
	}
	doc, err := t.marshal()
	if err != nil {
		return nil, err
	}
	if len(doc) > MaxDocumentSize {
		// Decode would refuse it. For the caller it is the same problem as a full budget.
		return nil, &BudgetError{Size: len(doc), Budget: MaxDocumentSize}
	}
	encoding, payload := EncodingJSON, string(doc)
	if len(doc) > CompressThreshold {
		var buf bytes.Buffer
		// Header fields (name, mtime) stay zero so the output depends only on the document.
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return nil, err
		}
		if _, err := zw.Write(doc); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		encoding, payload = EncodingGzipBase64, base64.StdEncoding.EncodeToString(buf.Bytes())
	}
	annotations := map[string]string{
		VersionAnnotation:        Version,
		HashAnnotation:           hashOf(doc),
		EncodingAnnotation:       encoding,
		ResourceSlicesAnnotation: payload,
	}
	size := 0
	for k, v := range annotations {
		size += len(k) + len(v)
	}
	if size > budget {
		return nil, &BudgetError{Size: size, Budget: budget}
	}
	return annotations, nil
}

// Hash returns "sha256:<hex>" of the template's JSON document, the value Encode writes to
// HashAnnotation. A controller compares it with the annotation to skip no-op writes.
func (t *Template) Hash() (string, error) {
	doc, err := t.marshal()
	if err != nil {
		return "", err
	}
	return hashOf(doc), nil
}

// Equal reports whether two templates have the same JSON document.
func (t *Template) Equal(o *Template) bool {
	if t == nil || o == nil {
		return t == o
	}
	a, errA := t.marshal()
	b, errB := o.marshal()
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// marshal returns the canonical JSON document of a valid template: a normalized copy, so that
// the order in which a caller built the template does not matter.
func (t *Template) marshal() ([]byte, error) {
	c := (*Template)(t.api().DeepCopy())
	c.normalize()
	if c.Drivers == nil {
		c.Drivers = []Driver{}
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid node group template: %w", err)
	}
	// encoding/json sorts map keys and writes quantities in canonical form.
	return json.Marshal(c)
}

func hashOf(doc []byte) string { return apitemplate.DocumentHash(doc) }
