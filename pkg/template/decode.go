package template

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	kjson "sigs.k8s.io/json"
)

// ErrNoTemplate is returned by Decode when the annotations hold no template.
var ErrNoTemplate = errors.New("no node group template in annotations")

// Decode reads a template from the annotations of a MachineDeployment or MachineSet. It is
// strict: an unknown version, encoding, field (anywhere in the document, matched
// case-sensitively) or duplicate field is an error, the document must match HashAnnotation
// when that is present, and the template must be within the format's limits and produce valid
// ResourceSlices. The uncompressed document is capped at MaxDocumentSize.
//
// Decode returns ErrNoTemplate (wrapped) when ResourceSlicesAnnotation is absent.
func Decode(annotations map[string]string) (*Template, error) {
	payload, ok := annotations[ResourceSlicesAnnotation]
	if !ok {
		return nil, ErrNoTemplate
	}
	version, ok := annotations[VersionAnnotation]
	if !ok {
		return nil, fmt.Errorf("node group template: annotation %s is missing", VersionAnnotation)
	}
	if version != Version {
		return nil, fmt.Errorf("node group template: unsupported version %q in %s (this decoder reads %s)", version, VersionAnnotation, Version)
	}
	if len(payload) > MaxBudget {
		return nil, fmt.Errorf("node group template: annotation %s is larger than %d bytes", ResourceSlicesAnnotation, MaxBudget)
	}

	var doc []byte
	switch enc, ok := annotations[EncodingAnnotation]; {
	case !ok || enc == EncodingJSON:
		doc = []byte(payload)
	case enc == EncodingGzipBase64:
		var err error
		if doc, err = gunzip(payload); err != nil {
			return nil, fmt.Errorf("node group template: %s: %w", ResourceSlicesAnnotation, err)
		}
	default:
		return nil, fmt.Errorf("node group template: unsupported encoding %q in %s (want %q or %q)", enc, EncodingAnnotation, EncodingJSON, EncodingGzipBase64)
	}
	if len(doc) > MaxDocumentSize {
		return nil, fmt.Errorf("node group template: document larger than %d bytes", MaxDocumentSize)
	}
	if want, ok := annotations[HashAnnotation]; ok {
		if got := hashOf(doc); got != want {
			return nil, fmt.Errorf("node group template: document hash %s does not match %s %s", got, HashAnnotation, want)
		}
	}

	t := &Template{}
	strict, err := kjson.UnmarshalStrict(doc, t, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("node group template: invalid JSON: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("node group template: %w", errors.Join(strict...))
	}
	// Checked before validate so that a document of another version gets the clearer error.
	if t.APIVersion != APIVersion || t.Kind != Kind {
		return nil, fmt.Errorf("node group template: unsupported apiVersion %q kind %q (this decoder reads %s %s)", t.APIVersion, t.Kind, APIVersion, Kind)
	}
	if err := t.validate(); err != nil {
		return nil, fmt.Errorf("node group template: %w", err)
	}
	t.normalize()
	return t, nil
}

// gunzip decodes base64 and decompresses at most MaxDocumentSize bytes.
func gunzip(payload string) ([]byte, error) {
	compressed, err := base64.StdEncoding.Strict().DecodeString(payload)
	if err != nil {
		return nil, fmt.Errorf("invalid base64: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		return nil, fmt.Errorf("invalid gzip: %w", err)
	}
	doc, err := io.ReadAll(io.LimitReader(zr, MaxDocumentSize+1))
	if err != nil {
		return nil, fmt.Errorf("invalid gzip: %w", err)
	}
	if len(doc) > MaxDocumentSize {
		return nil, fmt.Errorf("decompresses to more than %d bytes", MaxDocumentSize)
	}
	return doc, nil
}
