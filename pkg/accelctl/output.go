package accelctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"
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

// Output is how a command prints: its -o format, and kubectl's --allow-missing-template-keys.
type Output struct {
	// Format is the -o value.
	Format string
	// AllowMissingKeys: a jsonpath= or go-template= that names a field the object lacks prints
	// nothing for it instead of failing, as kubectl does by default
	// (--allow-missing-template-keys=true); false makes that an error, as in kubectl.
	AllowMissingKeys bool
}

// templated reports whether the format is jsonpath= or go-template=.
func (o Output) templated() bool {
	return strings.HasPrefix(o.Format, jsonPathPrefix) || strings.HasPrefix(o.Format, goTemplatePrefix)
}

// addOutputFlags adds -o (with a default format and its help) and
// --allow-missing-template-keys to a command.
func addOutputFlags(fs *pflag.FlagSet, o *Output, usage string) {
	fs.StringVarP(&o.Format, "output", "o", o.Format, usage)
	o.AllowMissingKeys = true
	fs.BoolVar(&o.AllowMissingKeys, "allow-missing-template-keys", true, "If true, a field or map key that -o jsonpath= or go-template= names and the object lacks prints nothing instead of failing, as kubectl's.")
}

// printer is the printer of a jsonpath= or go-template= format, nil for another format.
func printer(o Output) (printers.ResourcePrinter, error) {
	if o.Format == jsonPathPrefix || o.Format == goTemplatePrefix {
		// kubectl's words for it.
		return nil, fmt.Errorf("-o %s: template format specified but no template given", o.Format)
	}
	if expr, ok := strings.CutPrefix(o.Format, jsonPathPrefix); ok {
		p, err := printers.NewJSONPathPrinter(relaxedJSONPath(expr))
		if err != nil {
			return nil, fmt.Errorf("-o %s: %w", o.Format, err)
		}
		p.AllowMissingKeys(o.AllowMissingKeys)
		return p, nil
	}
	if tmpl, ok := strings.CutPrefix(o.Format, goTemplatePrefix); ok {
		p, err := printers.NewGoTemplatePrinter([]byte(tmpl))
		if err != nil {
			return nil, fmt.Errorf("-o %s: %w", o.Format, err)
		}
		p.AllowMissingKeys(o.AllowMissingKeys)
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
func writeObject(w io.Writer, o Output, v any) error {
	p, err := printer(o)
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
		// The template runs on the whole output before anything is written, so that one
		// that fails (a missing key with --allow-missing-template-keys=false) prints no part
		// of the result. Its error names the template and the object, as kubectl's.
		var buf bytes.Buffer
		if err := p.PrintObj(&unstructured.Unstructured{Object: obj}, &buf); err != nil {
			return err
		}
		_, err = buf.WriteTo(w)
		return err
	}
	var b []byte
	switch o.Format {
	case "json":
		if b, err = json.MarshalIndent(v, "", "  "); err == nil {
			b = append(b, '\n')
		}
	case "yaml":
		b, err = yaml.Marshal(v)
	default:
		return fmt.Errorf("unknown output format %q", o.Format)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// checkOutput rejects a format not among the allowed ones before any work is done; where json
// is allowed, so are jsonpath= and go-template= with an expression that parses.
func checkOutput(o Output, allowed ...string) error {
	if slices.Contains(allowed, o.Format) {
		return nil
	}
	if slices.Contains(allowed, "json") {
		if p, err := printer(o); p != nil || err != nil {
			return err
		}
	}
	return fmt.Errorf("unknown output format %q (want one of %v, or jsonpath=... or go-template=...)", o.Format, allowed)
}
