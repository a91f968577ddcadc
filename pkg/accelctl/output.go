package accelctl

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"sigs.k8s.io/yaml"
)

// list is kubectl's envelope for several objects (kind List, apiVersion v1), so tools that read
// `kubectl get -o json` read accelctl's too.
type list struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Items      []any  `json:"items"`
}

// newList wraps items (already in a deterministic order) in a List.
func newList[T any](items []T) list {
	l := list{APIVersion: "v1", Kind: "List", Items: make([]any, len(items))}
	for i, it := range items {
		l.Items[i] = it
	}
	return l
}

// writeObject prints v as indented JSON or as YAML.
func writeObject(w io.Writer, format string, v any) error {
	var b []byte
	var err error
	switch format {
	case "json":
		if b, err = json.MarshalIndent(v, "", "  "); err == nil {
			b = append(b, '\n')
		}
	case "yaml":
		b, err = yaml.Marshal(v)
	default:
		return fmt.Errorf("unknown output format %q", format)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// checkOutput rejects a format not among the allowed ones before any work is done.
func checkOutput(format string, allowed ...string) error {
	if slices.Contains(allowed, format) {
		return nil
	}
	return fmt.Errorf("unknown output format %q (want one of %v)", format, allowed)
}
