package template

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	kjson "sigs.k8s.io/json"
)

// Decode reads a template from the annotations of a MachineDeployment or MachineSet. It is
// strict: an unknown version, encoding, field (anywhere in the document, matched
// case-sensitively) or duplicate field is an error, the document must match HashAnnotation
// when that is present, and the template must be within the format's limits and produce
// ResourceSlices the allocator can use. The uncompressed document is capped at MaxDocumentSize.
//
// A field is unknown when the k8s.io/api this package is built with does not have it: a reader
// built on an older API refuses exactly the templates that use newer fields (and says which),
// and reads every other template the same way a newer reader does.
//
// Decode returns ErrNoTemplate when ResourceSlicesAnnotation is absent.
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
		if got := DocumentHash(doc); got != want {
			return nil, fmt.Errorf("node group template: document hash %s does not match %s %s", got, HashAnnotation, want)
		}
	}

	t := &Template{}
	strict, err := kjson.UnmarshalStrict(doc, t, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("node group template: invalid JSON: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("node group template: %w (a field unknown here may be one that only a newer k8s.io/api than this reader's has)", errors.Join(strict...))
	}
	// Checked before Validate so that a document of another version gets the clearer error.
	if t.APIVersion != APIVersion || t.Kind != Kind {
		return nil, fmt.Errorf("node group template: unsupported apiVersion %q kind %q (this decoder reads %s %s)", t.APIVersion, t.Kind, APIVersion, Kind)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("node group template: %w", err)
	}
	t.Normalize()
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

// Normalize sorts what this package knows to carry no meaning in its order (identity
// attributes, driver entries, skipNodeOperations, counter sets, devices, each device's counter
// consumptions and taints), so that ResourceSlices does not depend on the document's order.
// Order that does carry meaning (list attribute values, binding conditions) is kept.
func (t *Template) Normalize() {
	slices.Sort(t.IdentityAttributes)
	slices.SortFunc(t.Drivers, func(a, b Driver) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.PoolSuffix, b.PoolSuffix))
	})
	for i := range t.Drivers {
		d := &t.Drivers[i]
		slices.Sort(d.SkipNodeOperations)
		slices.SortFunc(d.SharedCounters, func(a, b resourceapi.CounterSet) int { return cmp.Compare(a.Name, b.Name) })
		slices.SortFunc(d.Devices, func(a, b resourceapi.Device) int { return cmp.Compare(a.Name, b.Name) })
		for j := range d.Devices {
			dev := &d.Devices[j]
			slices.SortFunc(dev.ConsumesCounters, func(a, b resourceapi.DeviceCounterConsumption) int {
				return cmp.Compare(a.CounterSet, b.CounterSet)
			})
			slices.SortFunc(dev.Taints, func(a, b resourceapi.DeviceTaint) int {
				return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value), cmp.Compare(a.Effect, b.Effect))
			})
		}
	}
}
