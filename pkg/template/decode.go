package template

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"

	apitemplate "github.com/accel-dra/accel-dra/api/template"
)

// ErrNoTemplate is returned by Decode when the annotations hold no template.
var ErrNoTemplate = apitemplate.ErrNoTemplate

// Decode reads a template with the reader module (apitemplate.Decode: version, encoding, hash,
// strict JSON, the reader's checks) and then checks it as the writer does, against the API
// server's rules for the fields of this module's k8s.io/api that the reader leaves to the writer.
// Decode returns ErrNoTemplate when the annotations hold no template.
func Decode(annotations map[string]string) (*Template, error) {
	at, err := apitemplate.Decode(annotations)
	if err != nil {
		return nil, err
	}
	t := (*Template)(at)
	if err := t.validate(); err != nil {
		return nil, fmt.Errorf("node group template: %w", err)
	}
	return t, nil
}

// DecodeDocument reads a template document (the JSON of a NodeGroupTemplate, as in a
// NodeGroupSeed's template or `accelctl template show -o template`) with Decode's checks. The
// document is compressed first, as Encode stores one over CompressThreshold, so that its limit
// is the uncompressed document's (MaxDocumentSize) and not the annotation's (MaxBudget): a
// dynamic-MIG node's document is larger than an annotation holds uncompressed.
func DecodeDocument(doc []byte) (*Template, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(doc); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return Decode(map[string]string{
		VersionAnnotation:        Version,
		EncodingAnnotation:       EncodingGzipBase64,
		ResourceSlicesAnnotation: base64.StdEncoding.EncodeToString(buf.Bytes()),
	})
}
