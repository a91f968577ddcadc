package accelctl

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/printers"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// shortHash is how many characters of the template hash the table shows, as git shows
// abbreviated commits: enough to tell templates apart at a glance.
const shortHash = 12

func newListCommand(o *rootOptions, streams IOStreams) *cobra.Command {
	var output Output
	all, noHeaders, selector := false, false, ""
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the node groups that have a template",
		Long: `Lists the MachineDeployments, MachineSets and MachinePools of a namespace (or of all, with -A) that carry
template.accel-dra.io annotations, ordered by namespace, kind and name.

Output formats: a table (default), wide (the table with the template's drivers, CPU and memory
and the full hash), name (kind/name, which "template show" takes), json or yaml (a List of the
groups' metadata), jsonpath=... or go-template=... (applied to that List, as kubectl's).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "", "wide", "name", "json", "yaml"); err != nil {
				return err
			}
			sel, err := labels.Parse(selector)
			if err != nil {
				return fmt.Errorf("-l %q: %w", selector, err)
			}
			c, ns, err := o.cluster()
			if err != nil {
				return err
			}
			if all {
				ns = metav1.NamespaceAll
			}
			groups, err := c.ListGroups(cmd.Context(), ns)
			if err != nil {
				return err
			}
			groups = slices.DeleteFunc(groups, func(g *Group) bool { return !sel.Matches(labels.Set(g.Labels)) })
			return List(streams.Out, templated(groups), ListOptions{Output: output, WithNamespace: all, NoHeaders: noHeaders})
		},
	}
	addOutputFlags(cmd.Flags(), &output, "Output format: wide, name, json, yaml, jsonpath=... or go-template=... (default: a table).")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "List the groups of all namespaces.")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Label selector of the groups (a MachineDeployment's, MachineSet's or MachinePool's own labels), as kubectl's -l.")
	cmd.Flags().BoolVar(&noHeaders, "no-headers", false, "Print the table (no -o, or -o wide) without its header line; other formats have none, and ignore it as kubectl does.")
	return cmd
}

// templated returns the groups with a template or a template error, sorted by namespace, kind
// and name.
func templated(groups []*Group) []*Group {
	var out []*Group
	for _, g := range groups {
		if _, err := template.Decode(g.Annotations); !errors.Is(err, template.ErrNoTemplate) {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b *Group) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// ListOptions are how List prints.
type ListOptions struct {
	Output Output
	// WithNamespace adds the NAMESPACE column, as kubectl does for -A.
	WithNamespace bool
	// NoHeaders leaves out the table's header line.
	NoHeaders bool
}

// List prints groups (see `accelctl template list --help`).
func List(w io.Writer, groups []*Group, o ListOptions) error {
	switch o.Output.Format {
	case "name":
		var b strings.Builder
		for _, g := range groups {
			fmt.Fprintf(&b, "%s/%s\n", strings.ToLower(g.Kind), g.Name)
		}
		_, err := io.WriteString(w, b.String())
		return err
	case "", "wide":
		return writeTable(w, groups, o.Output.Format == "wide", o.WithNamespace, o.NoHeaders)
	}
	// json, yaml, jsonpath=, go-template= (writeObject refuses any other format).
	items := make([]metav1.PartialObjectMetadata, len(groups))
	for i, g := range groups {
		items[i].TypeMeta = metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: g.Kind}
		items[i].ObjectMeta = metav1.ObjectMeta{Namespace: g.Namespace, Name: g.Name, UID: g.UID, Annotations: g.Annotations}
	}
	return writeObject(w, o.Output, newList(items))
}

func writeTable(w io.Writer, groups []*Group, wide, withNamespace, noHeaders bool) error {
	tw := printers.GetNewTabWriter(w)
	header := []string{"KIND", "NAME", "SOURCE", "DEVICES", "GPU-COUNT", "HASH"}
	if wide {
		header = append(header, "DRA-DRIVER", "CPU", "MEMORY")
	}
	if withNamespace {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if !noHeaders {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for _, g := range groups {
		hash := g.Annotations[template.HashAnnotation]
		if !wide && len(hash) > shortHash {
			hash = hash[:shortHash]
		}
		row := []string{g.Kind, g.Name, orNone(g.Annotations[nodegroup.SourceAnnotation]), devices(g), orNone(g.Annotations[nodegroup.GPUCountKey]), orNone(hash)}
		if wide {
			row = append(row, orNone(g.Annotations[nodegroup.DRADriverKey]), orNone(g.Annotations[nodegroup.CPUKey]), orNone(g.Annotations[nodegroup.MemoryKey]))
		}
		if withNamespace {
			row = append([]string{g.Namespace}, row...)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// devices summarises a group's template node: device count per driver, or why there is none.
func devices(g *Group) string {
	t, err := template.Decode(g.Annotations)
	if err != nil {
		return "<invalid>"
	}
	s, err := t.ResourceSlices(TemplateNodeName)
	if err != nil {
		return "<invalid>"
	}
	count := map[string]int{}
	for _, sl := range s {
		count[sl.Spec.Driver] += len(sl.Spec.Devices)
	}
	parts := make([]string, 0, len(count))
	for _, d := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s=%d", d, count[d]))
	}
	if len(parts) == 0 {
		return "<none>"
	}
	return strings.Join(parts, ",")
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
