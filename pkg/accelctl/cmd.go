package accelctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/structured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// IOStreams are the command's standard streams.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// rootOptions are the flags every command shares.
type rootOptions struct {
	// flags are kubectl's connection flags (--kubeconfig, --context, --cluster, --user,
	// --namespace/-n, --request-timeout, ...): the publisher's management mode spans two
	// clusters, and people switch between them as they do with kubectl.
	flags *ConnectionFlags
	// newCluster connects to the API server; tests replace it.
	newCluster Connect
}

// Connect returns a Cluster for the connection flags and the namespace they select (--namespace,
// else the kubeconfig context's, else "default").
type Connect func(ClientGetter) (Cluster, string, error)

// NewCommand returns the accelctl command tree. newCluster may be nil (connect with the
// connection flags, $KUBECONFIG or in-cluster configuration).
func NewCommand(streams IOStreams, newCluster Connect) *cobra.Command {
	return NewCommandAs(Name, streams, newCluster)
}

// NewCommandAs returns the command tree whose usage, help and errors call it name (CommandName:
// "kubectl accel" when kubectl runs it as its plugin).
func NewCommandAs(name string, streams IOStreams, newCluster Connect) *cobra.Command {
	o := &rootOptions{newCluster: newCluster, flags: NewConnectionFlags()}
	if o.newCluster == nil {
		o.newCluster = connect
	}
	root := &cobra.Command{
		Use:           Name,
		Short:         "Inspect and simulate accel-dra node group templates",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Cobra's CommandPath, and so every usage line, example and "unknown command" error,
		// starts with the display name: "kubectl accel template list", which a plugin user
		// can type, not "accelctl template list", which they cannot.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: name},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.flags.AddFlags(root.PersistentFlags())

	tmpl := &cobra.Command{Use: "template", Short: "Node group templates on MachineDeployments, MachineSets and MachinePools"}
	tmpl.AddCommand(newShowCommand(o, streams), newListCommand(o, streams), newSeedCommand(o, streams), newGenerateCommand(name, streams))
	root.AddCommand(tmpl, newSimulateCommand(o, streams), newVersionCommand(streams))
	return root
}

// RESTConfig is the client configuration the connection flags select, and their namespace.
func RESTConfig(flags ClientGetter) (*rest.Config, string, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("API client configuration: %w", err)
	}
	cfg.UserAgent = "accelctl"
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("namespace: %w", err)
	}
	return cfg, ns, nil
}

// connect builds a Cluster from the connection flags.
func connect(flags ClientGetter) (Cluster, string, error) {
	cfg, ns, err := RESTConfig(flags)
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, "", err
	}
	return NewCluster(c), ns, nil
}

func (o *rootOptions) cluster() (Cluster, string, error) {
	c, ns, err := o.newCluster(o.flags)
	if err != nil {
		return nil, "", err
	}
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return c, ns, nil
}

func newShowCommand(o *rootOptions, streams IOStreams) *cobra.Command {
	output, nodeName := Output{Format: "yaml"}, TemplateNodeName
	cmd := &cobra.Command{
		Use:   "show GROUP",
		Short: "Print a node group's template as the ResourceSlices of a template node",
		Long: `Decodes the template.accel-dra.io annotations of a MachineDeployment (MachineSet, MachinePool) and prints
the ResourceSlices an autoscaler would give a new node of the group, preceded by the group's
capacity.cluster-autoscaler.kubernetes.io keys as comments. GROUP is <name>,
machinedeployment/<name>, machineset/<name> or machinepool/<name>.

Output formats: yaml (default), json (a List of ResourceSlices), jsonpath=... or go-template=...
(applied to that List, as kubectl's), template (the template document, usable as "template:" of
a NodeGroupSeed), annotations (all the group's publisher keys).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "yaml", "json", "template", "annotations"); err != nil {
				return err
			}
			c, ns, err := o.cluster()
			if err != nil {
				return err
			}
			g, err := c.GetGroup(cmd.Context(), ns, args[0])
			if err != nil {
				return err
			}
			return Show(streams.Out, g, output, nodeName)
		},
	}
	addOutputFlags(cmd.Flags(), &output, "Output format: yaml, json, jsonpath=..., go-template=..., template or annotations.")
	cmd.Flags().StringVar(&nodeName, "node-name", nodeName, "Name of the template node.")
	return cmd
}

// Show prints a group's template in a format (see `accelctl template show --help`).
func Show(w io.Writer, g *Group, output Output, nodeName string) error {
	if output.Format == "annotations" {
		ann := map[string]string{}
		for k, v := range g.Annotations {
			if nodegroup.IsManagedKey(k) || k == nodegroup.CopyFromAnnotation {
				ann[k] = v
			}
		}
		_, err := io.WriteString(w, FormatAnnotations(ann))
		return err
	}
	t, err := template.Decode(g.Annotations)
	if errors.Is(err, template.ErrNoTemplate) {
		return fmt.Errorf("%s has no node group template", g)
	} else if err != nil {
		return fmt.Errorf("%s: %w", g, err)
	}
	if output.Format == "template" {
		b, err := json.MarshalIndent(t, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	slices, err := t.ResourceSlices(nodeName)
	if err != nil {
		return err
	}
	if output.Format == "json" || output.templated() {
		for _, s := range slices {
			s.TypeMeta = metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"}
		}
		return writeObject(w, output, newList(slices))
	}
	switch output.Format {
	case "yaml":
		fmt.Fprintf(w, "# %s: template %s, source %s\n", g, g.Annotations[template.HashAnnotation], orUnknown(g.Annotations[nodegroup.SourceAnnotation]))
		for _, k := range []string{nodegroup.CPUKey, nodegroup.MemoryKey, nodegroup.EphemeralDiskKey, nodegroup.MaxPodsKey, nodegroup.LabelsKey, nodegroup.TaintsKey, nodegroup.DRADriverKey, nodegroup.GPUCountKey} {
			if v, ok := g.Annotations[k]; ok {
				fmt.Fprintf(w, "# %s: %s\n", k, v)
			}
		}
		for _, s := range slices {
			b, err := yaml.Marshal(s)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "---\n%s", b)
		}
		return nil
	}
	return fmt.Errorf("unknown output format %q", output.Format)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func newSeedCommand(o *rootOptions, streams IOStreams) *cobra.Command {
	var file string
	dryRun, force := false, false
	opts := SeedOptions{Budget: template.DefaultBudget, GPUDriver: nodegroup.DefaultGPUDriver}
	cmd := &cobra.Command{
		Use:   "seed GROUP -f SEED",
		Short: "Give a node group that never had a node a template from a NodeGroupSeed file",
		Long: `Writes the template and capacity annotations of a NodeGroupSeed (apiVersion
templateconfig.accel-dra.io/v1alpha1, see docs/template-publisher.md) onto a MachineDeployment,
MachineSet or MachinePool, with template.accel-dra.io/source=seed. The publisher replaces them as soon as the
group has nodes. A group whose template came from its own nodes is refused unless --force.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := readFile(streams.In, file)
			if err != nil {
				return err
			}
			seed, err := seedv1alpha1.Decode(data)
			if err != nil {
				return err
			}
			ann, err := SeedAnnotations(seed, opts)
			if err != nil {
				return err
			}
			if dryRun {
				_, err := io.WriteString(streams.Out, FormatAnnotations(ann))
				return err
			}
			c, ns, err := o.cluster()
			if err != nil {
				return err
			}
			g, err := c.GetGroup(cmd.Context(), ns, args[0])
			if err != nil {
				return err
			}
			if g.Annotations[nodegroup.SourceAnnotation] == nodegroup.SourceNodes && !force {
				return fmt.Errorf("%s has a template from its own nodes; use --force to replace it", g)
			}
			if err := c.ApplyAnnotations(cmd.Context(), g, ann); err != nil {
				return fmt.Errorf("seeding %s: %w", g, err)
			}
			_, err = fmt.Fprintf(streams.Out, "%s seeded: template %s\n", g, ann[template.HashAnnotation])
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "NodeGroupSeed file (- for standard input).")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Print the annotations instead of writing them.")
	cmd.Flags().BoolVar(&force, "force", false, "Replace a template that came from the group's own nodes.")
	cmd.Flags().IntVar(&opts.Budget, "template-budget-bytes", opts.Budget, "Size limit of the template annotations.")
	cmd.Flags().StringVar(&opts.GPUDriver, "autoscaler-gpu-driver", opts.GPUDriver, "dra-driver (with gpu-count) names the driver of the seed's whole devices; this one when the seed has whole devices of several drivers. Empty: neither key.")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

func newSimulateCommand(o *rootOptions, streams IOStreams) *cobra.Command {
	var group, file, classesFile, annotationsFile string
	output, verdict := Output{Format: "text"}, "template"
	timeout := DefaultTimeout
	gates := NewFeatureGates()
	cmd := &cobra.Command{
		Use:   "simulate --node-group GROUP -f CLAIMS",
		Short: "Would a new node of a group satisfy these ResourceClaims?",
		Long: `Runs the scheduler's DRA allocator (k8s.io/dynamic-resource-allocation/structured, with
the features of kube-scheduler 1.37 with its default gates or --feature-gates) for the claims of
a file on a fresh node of the group: with the devices of the group's accel-dra template (what an
autoscaler with accel-dra's clusterapi patch reads), with the devices the Cluster Autoscaler's clusterapi provider invents
from capacity.cluster-autoscaler.kubernetes.io/dra-driver and gpu-count (with the merged
slice-count fix), and with those devices as released providers announce them (resourceSliceCount
0: nothing fits).

The file holds ResourceClaims and ResourceClaimTemplates (all must fit together on the node, as
for one pod), or one Pod with the claims and templates it references. DeviceClasses come from
the cluster, from --device-classes, and from the file itself. --annotations reads the group's
annotations from a file (a MachineDeployment, or a map) instead of the cluster.

--feature-gates takes the gates of the cluster's kube-scheduler that change its DRA allocator,
with the scheduler's syntax and 1.37 defaults (the alpha DRAListTypeAttributes, for example,
which a constraint on the nvlinkCliques list attribute needs):
  --feature-gates=DRAListTypeAttributes=true,DRADeviceTaints=false
An unknown gate, a value that is not true or false, or a gate locked to its default in 1.37
set the other way is refused, as kube-scheduler refuses it.

Each allocation is bounded by --timeout, as kube-scheduler bounds its DRA filter (10s by
default): a search that takes longer is reported UNDECIDED, which is what the scheduler and the
autoscaler do with it too (no placement, no scale-up), never a hang.

The exit code follows one verdict, --verdict: template (the accel-dra template's, the default)
or builtin (the autoscaler's built-in template with the slice-count fix):
  0  the claims fit a new node of the group
  1  accelctl failed (bad flags or files, no cluster, no such group)
  2  the claims do not fit (also when the group has no such template, or the allocator
     reports an error for the node, as the scheduler then rejects it)
  3  undecided: the allocation ran past --timeout
The report is printed in every case but 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSimulate(cmd.Context(), o, streams, group, file, classesFile, annotationsFile, output, verdict, timeout, gates.Features())
		},
	}
	cmd.Flags().StringVar(&group, "node-group", "", "Node group: <name>, machinedeployment/<name>, machineset/<name> or machinepool/<name>.")
	cmd.Flags().StringVarP(&file, "filename", "f", "", "File with the claims (- for standard input).")
	cmd.Flags().StringVar(&classesFile, "device-classes", "", "File with DeviceClasses to use instead of the cluster's.")
	cmd.Flags().StringVar(&annotationsFile, "annotations", "", "File with the group's annotations to use instead of the cluster's.")
	addOutputFlags(cmd.Flags(), &output, "Output format: text, json, yaml, jsonpath=... or go-template=... (the latter two applied to the report -o json prints).")
	cmd.Flags().StringVar(&verdict, "verdict", verdict, "Verdict that decides the exit code: template or builtin.")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "Bound of each allocation (kube-scheduler's DRA filter timeout); past it the verdict is UNDECIDED.")
	gates.AddFlag(cmd.Flags())
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

func runSimulate(ctx context.Context, o *rootOptions, streams IOStreams, group, file, classesFile, annotationsFile string, output Output, verdict string, timeout time.Duration, features structured.Features) error {
	if err := checkOutput(output, "text", "json", "yaml"); err != nil {
		return err
	}
	if verdict != "template" && verdict != "builtin" {
		return fmt.Errorf("unknown verdict %q (want template or builtin)", verdict)
	}
	if timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %v", timeout)
	}
	data, err := readFile(streams.In, file)
	if err != nil {
		return err
	}
	objs, err := ParseObjects(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	claims, err := objs.ClaimsToAllocate()
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}

	var cluster Cluster
	ns := ""
	need := annotationsFile == "" || classesFile == ""
	if need {
		if cluster, ns, err = o.cluster(); err != nil {
			return err
		}
	}
	in := SimulateInput{Claims: claims, Timeout: timeout, Features: &features}
	if len(objs.Pods) == 1 {
		in.Pod = objs.Pods[0]
	}
	if annotationsFile != "" {
		if in.Annotations, err = readAnnotations(annotationsFile); err != nil {
			return err
		}
		in.Group = annotationsFile
	} else {
		if group == "" {
			return errors.New("--node-group is required (or --annotations)")
		}
		g, err := cluster.GetGroup(ctx, ns, group)
		if err != nil {
			return err
		}
		in.Group, in.Annotations = g.String(), g.Annotations
	}
	if classesFile != "" {
		data, err := os.ReadFile(classesFile)
		if err != nil {
			return err
		}
		c, err := ParseObjects(data)
		if err != nil {
			return fmt.Errorf("%s: %w", classesFile, err)
		}
		in.Classes = c.DeviceClasses
	} else if in.Classes, err = cluster.DeviceClasses(ctx); err != nil {
		return err
	}
	in.Classes = mergeClasses(in.Classes, objs.DeviceClasses)

	rep, err := Simulate(ctx, in)
	if err != nil {
		return err
	}
	if output.Format == "text" {
		err = rep.WriteText(streams.Out)
	} else {
		err = writeObject(streams.Out, output, rep)
	}
	if err != nil {
		return err
	}
	return rep.outcome(verdict)
}

// outcome is the exit status of a report by one of its verdicts: nil when the claims fit.
func (r *Report) outcome(verdict string) error {
	v, name := r.Template, "the accel-dra template"
	if verdict == "builtin" {
		v, name = r.Builtin, "the autoscaler's built-in template"
	}
	switch {
	case v.Fits:
		return nil
	case v.Undecided:
		return &exitError{ExitUndecided, fmt.Sprintf("%s: undecided on %s (allocation timed out)", r.Group, name)}
	default:
		return &exitError{ExitNotFit, fmt.Sprintf("%s: the claims do not fit a new node by %s", r.Group, name)}
	}
}

// mergeClasses returns base with the classes of extra added or replacing those of the same name.
func mergeClasses(base, extra []*resourceapi.DeviceClass) []*resourceapi.DeviceClass {
	out := append([]*resourceapi.DeviceClass{}, base...)
	for _, e := range extra {
		replaced := false
		for i, b := range out {
			if b.Name == e.Name {
				out[i], replaced = e, true
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}

func readFile(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// readAnnotations reads a map of annotations, or an object's metadata.annotations, from YAML or
// JSON.
func readAnnotations(name string) (map[string]string, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var obj struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(data, &obj); err == nil && obj.Metadata.Annotations != nil {
		return obj.Metadata.Annotations, nil
	}
	var ann map[string]string
	if err := yaml.Unmarshal(data, &ann); err != nil {
		return nil, fmt.Errorf("%s: neither an object with metadata.annotations nor a map of strings: %w", name, err)
	}
	return ann, nil
}
