package template

import (
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
