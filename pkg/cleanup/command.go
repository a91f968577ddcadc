package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/bootid"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/kubeclient"
)

// Command is the name of the plugin binary's clean-up subcommand: the chart's uninstall hooks
// run `accel-dra-kubelet-plugin cleanup node|check|wait|done ...` from the plugin's image.
const Command = "cleanup"

const usage = `usage: accel-dra-kubelet-plugin cleanup node|check|wait|done [flags]

  node   remove one driver's state from this node (run with the plugin's host mounts, after its
         pods are gone); refuses claims still prepared unless --force
  check  refuse while a ResourceClaim of the drivers is reserved for a pod (before uninstall)
  wait   wait until every pod of the clean-up DaemonSets is ready, or report the nodes that failed
  done   block until terminated (the clean-up DaemonSet's container after its init container)
`

// Run runs the subcommand in args (those after "cleanup"). Errors go to the caller, which
// prints them; an error of the flags says so with the usage in out.
func Run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		_, _ = fmt.Fprint(out, usage)
		return errors.New("no clean-up subcommand")
	}
	fs := pflag.NewFlagSet("cleanup "+args[0], pflag.ContinueOnError)
	fs.SetOutput(out)
	kube := kubeclient.DefaultOptions()
	switch args[0] {
	case "node":
		o := NodeOptions{BootIDFile: bootid.DefaultPath}
		var kind string
		fs.StringVar(&o.DriverName, "driver-name", "", "The driver's name (its plugin's --driver-name).")
		fs.StringVar(&kind, "device-kind", "", "gpu or npu: the kind of the driver's devices, which names its CDI specs.")
		fs.StringVar(&o.PluginDataDir, "plugin-data-dir", "", "The plugin's --plugin-data-dir (default /var/lib/kubelet/plugins/<driver-name>).")
		fs.StringVar(&o.CheckpointDir, "checkpoint-dir", "", "The plugin's --checkpoint-dir (default <plugin-data-dir>/checkpoint).")
		fs.StringVar(&o.CDIRoot, "cdi-root", "/var/run/cdi", "The plugin's --cdi-root.")
		fs.StringVar(&o.RegistrarDir, "registrar-dir", "/var/lib/kubelet/plugins_registry", "The plugin's --registrar-dir.")
		fs.StringVar(&o.BootIDFile, "boot-id-file", o.BootIDFile, "File holding the node's boot ID.")
		fs.BoolVar(&o.Force, "force", false, "Remove the records and CDI specs of claims still prepared.")
		fs.BoolVar(&o.SharedName, "nvidia-compat", false, "The plugin ran in NVIDIA's compatibility mode (its --nvidia-compat): the driver name is also NVIDIA's, whose directory <plugins>/<driver-name> and socket <driver-name>-reg.sock stay.")
		fs.DurationVar(&o.WaitForPlugin, "wait-for-plugin", 2*time.Minute, "How long to wait for the plugin's processes on this node to end.")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if o.PluginDataDir == "" && o.DriverName != "" {
			o.PluginDataDir = "/var/lib/kubelet/plugins/" + o.DriverName
			if o.SharedName {
				o.PluginDataDir += "-accel-dra"
			}
		}
		switch device.Kind(kind) {
		case device.KindGPU, device.KindNPU:
			o.Kind = device.Kind(kind)
		default:
			return fmt.Errorf("--device-kind=%q: want gpu or npu", kind)
		}
		_, err := Node(ctx, o)
		return err
	case "check":
		var drivers, scoped []string
		fs.StringSliceVar(&drivers, "driver-name", nil, "The release's drivers (repeatable): every claim of each is the release's.")
		fs.StringArrayVar(&scoped, "driver-on-nodes", nil, "DRIVER=SELECTOR (repeatable): a driver whose name the release shares with another driver, node by node (NVIDIA's compatibility mode); only its claims allocated on nodes that match the label selector are the release's.")
		kube.AddFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		scopes, err := parseScopes(drivers, scoped)
		if err != nil {
			return err
		}
		client, err := newClient(&kube)
		if err != nil {
			return err
		}
		return Check(ctx, client, scopes)
	case "wait":
		var namespace string
		var names []string
		var poll time.Duration
		fs.StringVar(&namespace, "namespace", "", "Namespace of the clean-up DaemonSets.")
		fs.StringSliceVar(&names, "daemonset", nil, "A clean-up DaemonSet (repeatable).")
		fs.DurationVar(&poll, "poll", 2*time.Second, "How often to look.")
		kube.AddFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		client, err := newClient(&kube)
		if err != nil {
			return err
		}
		return WaitForDaemonSets(ctx, client, namespace, names, poll)
	case "done":
		klog.FromContext(ctx).Info("Clean-up done; waiting to be deleted")
		<-ctx.Done()
		return nil
	default:
		_, _ = fmt.Fprint(out, usage)
		return fmt.Errorf("unknown clean-up subcommand %q", args[0])
	}
}

// parseScopes makes the check's scopes of its flags: a driver given both ways is scoped.
func parseScopes(drivers, scoped []string) ([]Scope, error) {
	var scopes []Scope
	for _, a := range scoped {
		d, sel, ok := strings.Cut(a, "=")
		if !ok || d == "" || sel == "" {
			return nil, fmt.Errorf("--driver-on-nodes=%q: want DRIVER=SELECTOR (gpu.nvidia.com=accel-dra.io/nvidia-compat=true)", a)
		}
		if _, err := labels.Parse(sel); err != nil {
			return nil, fmt.Errorf("--driver-on-nodes=%q: %w", a, err)
		}
		scopes = append(scopes, Scope{Driver: d, Nodes: sel})
	}
	for _, d := range drivers {
		if !slices.ContainsFunc(scopes, func(s Scope) bool { return s.Driver == d }) {
			scopes = append(scopes, Scope{Driver: d})
		}
	}
	if len(scopes) == 0 {
		return nil, errors.New("no driver: give --driver-name or --driver-on-nodes")
	}
	return scopes, nil
}

func newClient(o *kubeclient.Options) (kubernetes.Interface, error) {
	o.Protobuf = true
	cfg, err := o.RESTConfig("accel-dra-kubelet-plugin/cleanup")
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
