// Package helm renders accel-dra's Helm chart (accel-dra/, embedded in the package) with the Helm
// SDK, as `helm template` would, for the chart's tests and for the end-to-end framework, which
// launches the binaries with exactly the arguments the chart gives them (PluginArgs).
package helm

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartv2util "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The chart, with its dot files and _helpers.tpl ("all:").
//
//go:embed all:accel-dra
var chartFS embed.FS

// ChartName is the chart's directory, relative to this package.
const ChartName = "accel-dra"

// Defaults of Options.
const (
	DefaultReleaseName = "accel-dra"
	DefaultNamespace   = "accel-dra"
	// DefaultKubeVersion is the version the e2e control plane runs.
	DefaultKubeVersion = "v1.37.1"
)

// Container names in the chart's workloads.
const (
	PluginContainer    = "plugin"
	PublisherContainer = "publisher"
)

// Options say how to render the chart.
type Options struct {
	// ReleaseName and Namespace are the release's; defaults DefaultReleaseName and
	// DefaultNamespace.
	ReleaseName, Namespace string
	// Values are the user-supplied values (as with helm --values/--set), coalesced with the
	// chart's values.yaml; see ValuesFile for the chart's bundled values files.
	Values map[string]any
	// KubeVersion is .Capabilities.KubeVersion; default DefaultKubeVersion. The chart's
	// kubeVersion constraint is checked against it, as helm install does.
	KubeVersion string
	// Lookup answers the templates' lookup calls, as the cluster would at helm install; nil
	// answers none, as helm template does. Helm's engine takes a client provider only without
	// its strict mode, so a render with Lookup is not strict.
	Lookup engine.ClientProvider
}

// Rendered is a rendered chart.
type Rendered struct {
	// Manifests are the rendered templates by file name ("accel-dra/templates/x.yaml"), without
	// NOTES.txt and empty ones.
	Manifests map[string]string
	// Notes is the rendered NOTES.txt.
	Notes string
	// Objects are the manifests' objects in file-name order, then in order within each file:
	// what helm install applies, without the hooks.
	Objects []*unstructured.Unstructured
	// Hooks are the objects with a helm.sh/hook annotation, in the same order: Helm creates
	// them only at their hook's time (the uninstall clean-up, templates/cleanup-hooks.yaml).
	Hooks []*unstructured.Unstructured
}

// HookAnnotation marks an object as a Helm hook, created only at the hook's time.
const HookAnnotation = "helm.sh/hook"

// Load returns the embedded chart.
func Load() (*chartv2.Chart, error) {
	var files []*archive.BufferedFile
	err := fs.WalkDir(chartFS, ChartName, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := chartFS.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: strings.TrimPrefix(p, ChartName+"/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading embedded chart: %w", err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", ChartName, err)
	}
	return c, nil
}

// ValuesFile returns one of the chart's bundled values files, such as "values-mock.yaml".
func ValuesFile(name string) (map[string]any, error) {
	data, err := chartFS.ReadFile(path.Join(ChartName, name))
	if err != nil {
		return nil, fmt.Errorf("values file %s: %w", name, err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(data, &vals); err != nil {
		return nil, fmt.Errorf("values file %s: %w", name, err)
	}
	return vals, nil
}

// Render renders the chart as `helm template` does: values coalesced with values.yaml and
// validated against values.schema.json, every template executed in strict mode (a reference to
// a value that does not exist is an error, so a typo in a template cannot render as empty).
func Render(opts Options) (*Rendered, error) {
	if opts.ReleaseName == "" {
		opts.ReleaseName = DefaultReleaseName
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.KubeVersion == "" {
		opts.KubeVersion = DefaultKubeVersion
	}
	c, err := Load()
	if err != nil {
		return nil, err
	}
	kv, err := common.ParseKubeVersion(opts.KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", opts.KubeVersion, err)
	}
	if c.Metadata.KubeVersion != "" && !chartv2util.IsCompatibleRange(c.Metadata.KubeVersion, kv.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion %s, which is incompatible with %s", c.Metadata.KubeVersion, kv)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	vals := opts.Values
	if vals == nil {
		vals = map[string]any{}
	}
	top, err := chartutil.ToRenderValues(c, vals, common.ReleaseOptions{
		Name: opts.ReleaseName, Namespace: opts.Namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	var out map[string]string
	if opts.Lookup != nil {
		out, err = engine.RenderWithClientProvider(c, top, opts.Lookup)
	} else {
		out, err = engine.Engine{Strict: true}.Render(c, top) //nolint:staticcheck // no lookup, so no context needed
	}
	if err != nil {
		return nil, fmt.Errorf("rendering chart: %w", err)
	}
	r := &Rendered{Manifests: map[string]string{}}
	for _, name := range slices.Sorted(maps.Keys(out)) {
		content := out[name]
		switch {
		case strings.HasSuffix(name, "NOTES.txt"):
			r.Notes = content
			continue
		case strings.TrimSpace(content) == "", path.Ext(name) != ".yaml":
			continue
		}
		r.Manifests[name] = content
		objs, err := decodeObjects(content)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, o := range objs {
			if _, hook := o.GetAnnotations()[HookAnnotation]; hook {
				r.Hooks = append(r.Hooks, o)
			} else {
				r.Objects = append(r.Objects, o)
			}
		}
	}
	return r, nil
}

func decodeObjects(manifest string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("object without apiVersion, kind or name: %v", m)
		}
		objs = append(objs, u)
	}
}

// Find returns the object of that kind and name, nil if there is none.
func (r *Rendered) Find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.Objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// OfKind returns the objects of a kind, in render order.
func (r *Rendered) OfKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.Objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// YAML is every manifest, in file-name order, as one multi-document stream (the output of
// `helm template`), for golden files and for kubectl apply.
func (r *Rendered) YAML() string {
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(r.Manifests)) {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", name, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(r.Manifests[name]), "---")))
	}
	return b.String()
}

// ContainerArgs returns the args of the named container of a DaemonSet or Deployment.
func ContainerArgs(workload *unstructured.Unstructured, container string) ([]string, error) {
	containers, _, err := unstructured.NestedSlice(workload.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", workload.GetKind(), workload.GetName(), err)
	}
	for _, c := range containers {
		cm, ok := c.(map[string]any)
		if !ok || cm["name"] != container {
			continue
		}
		args, _, err := unstructured.NestedStringSlice(cm, "args")
		if err != nil {
			return nil, fmt.Errorf("%s %s container %s: %w", workload.GetKind(), workload.GetName(), container, err)
		}
		return args, nil
	}
	return nil, fmt.Errorf("%s %s has no container %q", workload.GetKind(), workload.GetName(), container)
}

// PluginDaemonSet returns the DaemonSet that runs the plugin of driverName (its --driver-name).
func (r *Rendered) PluginDaemonSet(driverName string) (*unstructured.Unstructured, error) {
	var names []string
	for _, ds := range r.OfKind("DaemonSet") {
		args, err := ContainerArgs(ds, PluginContainer)
		if err != nil {
			return nil, err
		}
		if v, ok := FlagValue(args, "driver-name"); ok {
			if v == driverName {
				return ds, nil
			}
			names = append(names, v)
		}
	}
	return nil, fmt.Errorf("no plugin DaemonSet for driver %q; the values enable %v", driverName, names)
}

// PluginArgs renders the chart with values and returns the args of the plugin container of the
// DaemonSet for driverName (for example "gpu.accel-dra.io"), with overrides applied: each key
// is a flag name without dashes ("kubeconfig", "cdi-root"); its value replaces the flag's value
// where the chart sets it and is appended as --key=value where it does not, in key order. The
// chart sets --node-name and --pod-uid through $NODE_NAME and $POD_UID (the downward API), so a
// caller outside a pod passes "node-name" here.
func PluginArgs(values map[string]any, driverName string, overrides map[string]string) ([]string, error) {
	r, err := Render(Options{Values: values})
	if err != nil {
		return nil, err
	}
	ds, err := r.PluginDaemonSet(driverName)
	if err != nil {
		return nil, err
	}
	args, err := ContainerArgs(ds, PluginContainer)
	if err != nil {
		return nil, err
	}
	return OverrideFlags(args, overrides), nil
}

// PublisherDeployment returns the template publisher's Deployment.
func (r *Rendered) PublisherDeployment() (*unstructured.Unstructured, error) {
	for _, d := range r.OfKind("Deployment") {
		if _, err := ContainerArgs(d, PublisherContainer); err == nil {
			return d, nil
		}
	}
	return nil, errors.New("no template publisher Deployment; the values do not set publisher.enabled")
}

// PublisherArgs renders the chart with values and returns the args of the template publisher's
// container, with overrides applied as PluginArgs describes (for example "kubeconfig",
// "metrics-bind-address", "health-probe-bind-address").
func PublisherArgs(values map[string]any, overrides map[string]string) ([]string, error) {
	r, err := Render(Options{Values: values})
	if err != nil {
		return nil, err
	}
	d, err := r.PublisherDeployment()
	if err != nil {
		return nil, err
	}
	args, err := ContainerArgs(d, PublisherContainer)
	if err != nil {
		return nil, err
	}
	return OverrideFlags(args, overrides), nil
}

// OverrideFlags returns args with overrides applied as PluginArgs describes. Flags in args must
// have the form --name=value or -name=value.
func OverrideFlags(args []string, overrides map[string]string) []string {
	out := slices.Clone(args)
	done := map[string]bool{}
	for i, a := range out {
		name, _, ok := splitFlag(a)
		if !ok {
			continue
		}
		if v, ok := overrides[name]; ok {
			out[i] = strings.SplitN(a, "=", 2)[0] + "=" + v
			done[name] = true
		}
	}
	keys := slices.Collect(maps.Keys(overrides))
	sort.Strings(keys)
	for _, k := range keys {
		if !done[k] {
			out = append(out, "--"+k+"="+overrides[k])
		}
	}
	return out
}

func splitFlag(a string) (name, value string, ok bool) {
	if !strings.HasPrefix(a, "-") {
		return "", "", false
	}
	name, value, ok = strings.Cut(strings.TrimLeft(a, "-"), "=")
	return name, value, ok
}

// FlagValue returns the value of --name=value in args, as the chart renders container args.
func FlagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if n, v, ok := splitFlag(a); ok && n == name {
			return v, true
		}
	}
	return "", false
}
