package accelctl

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
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

// The kubectl output formats that print one field or a template of the object
// (`-o jsonpath=...`, `-o go-template=...`): cli-runtime's printers, as kubectl's.
const (
	jsonPathPrefix   = "jsonpath="
	goTemplatePrefix = "go-template="
)

// printer is the printer of a jsonpath= or go-template= format, nil for another format.
func printer(format string) (printers.ResourcePrinter, error) {
	if expr, ok := strings.CutPrefix(format, jsonPathPrefix); ok {
		p, err := printers.NewJSONPathPrinter(relaxedJSONPath(expr))
		if err != nil {
			return nil, fmt.Errorf("-o %s: %w", format, err)
		}
		return p, nil
	}
	if tmpl, ok := strings.CutPrefix(format, goTemplatePrefix); ok {
		p, err := printers.NewGoTemplatePrinter([]byte(tmpl))
		if err != nil {
			return nil, fmt.Errorf("-o %s: %w", format, err)
		}
		return p, nil
	}
	return nil, nil
}

// relaxedJSONPath is kubectl's relaxed form of a JSONPath expression: one field path without
// braces ("items[0].metadata.name", ".items[*].metadata.name") is wrapped into a template
// ("{.items[0].metadata.name}"); an expression with braces is a template already. (kubectl's
// get.RelaxedJSONPathExpression does this, in a package that would bring kubectl's commands into
// the binary.)
func relaxedJSONPath(expr string) string {
	if strings.ContainsAny(expr, "{}") {
		return expr
	}
	if !strings.HasPrefix(expr, ".") {
		expr = "." + expr
	}
	return "{" + expr + "}"
}

// writeObject prints v as indented JSON, as YAML, or through a jsonpath= or go-template= format
// applied to its JSON form.
func writeObject(w io.Writer, format string, v any) error {
	p, err := printer(format)
	if err != nil {
		return err
	}
	if p != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			return err
		}
		return p.PrintObj(&unstructured.Unstructured{Object: obj}, w)
	}
	var b []byte
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

// checkOutput rejects a format not among the allowed ones before any work is done; where json
// is allowed, so are jsonpath= and go-template= with an expression that parses.
func checkOutput(format string, allowed ...string) error {
	if slices.Contains(allowed, format) {
		return nil
	}
	if slices.Contains(allowed, "json") {
		if p, err := printer(format); p != nil || err != nil {
			return err
		}
	}
	return fmt.Errorf("unknown output format %q (want one of %v, or jsonpath=... or go-template=...)", format, allowed)
}
