// Command demo starts a local Kubernetes control plane with two nodes (a mock 8x H100 GPU node
// and a mock 8x Ascend 910B NPU node), each with a real kubelet, a fake container runtime and
// the accel-dra kubelet plugin, applies the sample workloads from docs/examples, and prints the
// published devices and what each container was given. It then makes the GPU node a Cluster API
// Machine, runs the template publisher and prints the node-group template it writes. It runs until Ctrl-C, or exits after
// printing with --once. Run it with `make demo` (or `make demo DEMO_ARGS=--once`).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/template"
)

func main() {
	once := flag.Bool("once", false, "exit after printing instead of running until Ctrl-C")
	workload := flag.String("f", "docs/examples/gpu-workloads.yaml", "workload manifest to apply")
	gpuProfile := flag.String("gpu-profile", "h100-8x-2numa", "mock GPU profile of the GPU node")
	npuProfile := flag.String("npu-profile", "ascend910b-8x", "mock NPU profile of the NPU node")
	flag.Parse()
	if err := run(*once, *workload, *gpuProfile, *npuProfile); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(once bool, workload, gpuProfile, npuProfile string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	begin := time.Now()
	step := func(format string, args ...any) {
		fmt.Printf("[%6.1fs] %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}

	step("starting etcd, kube-apiserver, kube-scheduler, kube-controller-manager")
	c, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	client := c.Client()
	if err := framework.EnsureDeviceClasses(ctx, client); err != nil {
		return err
	}

	var plugins []*framework.Plugin
	for _, n := range []struct{ name, backend, profile string }{
		{"gpu-node", "mock", gpuProfile},
		{"npu-node", "npu-mock", npuProfile},
	} {
		step("starting kubelet %s and the accel-dra plugin (%s, profile %s)", n.name, n.backend, n.profile)
		node, err := c.AddNode(ctx, cluster.NodeOptions{Name: n.name})
		if err != nil {
			return err
		}
		p, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{Backend: n.backend, Profile: n.profile})
		if err != nil {
			return err
		}
		plugins = append(plugins, p)
	}

	step("applying %s", workload)
	pods, err := apply(ctx, client, workload)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if _, err := framework.WaitForPodRunning(ctx, client, "default", p, 3*time.Minute); err != nil {
			return err
		}
	}
	step("all %d pods running", len(pods))

	if err := printSlices(ctx, os.Stdout, client); err != nil {
		return err
	}
	printContainers(os.Stdout, c, pods)

	step("installing Cluster API CRDs, a MachineDeployment for gpu-node, and the template publisher")
	md, err := publishTemplate(ctx, c)
	if err != nil {
		return err
	}
	step("template published on MachineDeployment %s/%s", md.Namespace, md.Name)
	if err := printTemplate(os.Stdout, md.Annotations); err != nil {
		return err
	}

	if once {
		return nil
	}
	kubectl := filepath.Join(c.BinDir(), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		// hack/build-k8s.sh builds it only when asked (make demo does).
		kubectl = "kubectl"
	}
	fmt.Printf("\nkubectl: %s --kubeconfig %s get resourceslices,resourceclaims,pods -o wide\n", kubectl, c.KubeconfigPath())
	fmt.Printf("logs:    %s\n", c.LogsDir())
	fmt.Println("\nRunning; press Ctrl-C to stop and clean up.")
	for {
		select {
		case <-ctx.Done():
			fmt.Println("\nstopping")
			return nil
		case <-time.After(time.Second):
			for _, p := range plugins {
				select {
				case <-p.Process().Done():
					return fmt.Errorf("plugin on %s exited:\n%s", p.Node.Name, p.Process().LogTail(20))
				default:
				}
			}
		}
	}
}

// apply creates every object of a multi-document manifest in the default namespace and returns
// the pod names.
func apply(ctx context.Context, client kubernetes.Interface, path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pods []string
	dec := utilyaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch o := obj.(type) {
		case *resourceapi.ResourceClaimTemplate:
			_, err = client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, o, metav1.CreateOptions{})
		case *resourceapi.ResourceClaim:
			_, err = client.ResourceV1().ResourceClaims("default").Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Pod:
			_, err = client.CoreV1().Pods("default").Create(ctx, o, metav1.CreateOptions{})
			pods = append(pods, o.Name)
		default:
			return nil, fmt.Errorf("%s: the demo does not apply %s", path, gvk)
		}
		if err != nil {
			return nil, err
		}
	}
	return pods, nil
}

func printSlices(ctx context.Context, w io.Writer, client kubernetes.Interface) error {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	fmt.Fprintln(w, "\nResourceSlices:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tDRIVER\tDEVICE\tPRODUCT\tMEMORY\tNUMA\tPCIE ROOT\tPCI BUS ID")
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			a := d.Attributes
			mem := d.Capacity["memory"].Value
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ptrStr(s.Spec.NodeName), s.Spec.Driver, d.Name,
				str(a["productName"]), mem.String(), str(a["resource.kubernetes.io/numaNode"]),
				str(a["resource.kubernetes.io/pcieRoot"]), str(a["resource.kubernetes.io/pciBusID"]))
		}
	}
	return tw.Flush()
}

func printContainers(w io.Writer, c *cluster.Cluster, pods []string) {
	fmt.Fprintln(w, "\nWhat each container got from the (fake) container runtime, after CDI injection:")
	for _, n := range c.Nodes() {
		for _, r := range n.CRI.Containers() {
			fmt.Fprintf(w, "- %s/%s on %s\n", r.PodName, r.ContainerName, n.Name)
			var devs []string
			for _, d := range r.Devices {
				devs = append(devs, fmt.Sprintf("%s (%s %d:%d)", d.Path, d.Type, d.Major, d.Minor))
			}
			fmt.Fprintf(w, "    devices: %s\n", strings.Join(devs, ", "))
			for _, e := range r.Env {
				if strings.HasPrefix(e, "NVIDIA_") || strings.HasPrefix(e, "ASCEND_") {
					fmt.Fprintf(w, "    env:     %s\n", e)
				}
			}
			fmt.Fprintf(w, "    CDI:     %s\n", strings.Join(r.CDIDevices, ", "))
		}
	}
}

// publishTemplate makes gpu-node the one Machine of a MachineDeployment, as Cluster API would,
// runs the template publisher and waits for the template it writes.
func publishTemplate(ctx context.Context, c *cluster.Cluster) (*clusterv1.MachineDeployment, error) {
	cl, err := framework.NewCAPIClient(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	if err := framework.InstallClusterAPI(ctx, c.RESTConfig(), cl); err != nil {
		return nil, err
	}
	g, err := framework.CreateNodeGroup(ctx, cl, "gpu-h100", nil)
	if err != nil {
		return nil, err
	}
	if _, err := g.AddMachine(ctx, cl, "gpu-h100-0", "gpu-node", true); err != nil {
		return nil, err
	}
	if _, err := framework.StartPublisher(ctx, c, "--leader-election-namespace="+framework.CAPINamespace); err != nil {
		return nil, err
	}
	md := &clusterv1.MachineDeployment{}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(g.MD), md); err != nil {
			return false, nil
		}
		return md.Annotations[template.HashAnnotation] != "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("no template on MachineDeployment %s: %w", g.MD.Name, err)
	}
	return md, nil
}

func printTemplate(w io.Writer, ann map[string]string) error {
	fmt.Fprintln(w, "\nMachineDeployment annotations for the Cluster Autoscaler (scale from zero):")
	var keys []string
	for k := range ann {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := ann[k]
		if len(v) > 100 {
			v = fmt.Sprintf("<%d bytes>", len(v))
		}
		fmt.Fprintf(w, "  %s: %s\n", k, v)
	}
	t, err := template.Decode(ann)
	if err != nil {
		return err
	}
	slices, err := t.ResourceSlices("template-node")
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nDecoded for a template node (node identity replaced by placeholders that keep which devices share a value):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DRIVER\tDEVICE\tPRODUCT\tMEMORY\tNUMA\tPCIE ROOT\tUUID")
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			mem := d.Capacity["memory"].Value
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Spec.Driver, d.Name, str(d.Attributes["productName"]), mem.String(),
				str(d.Attributes["resource.kubernetes.io/numaNode"]), str(d.Attributes["resource.kubernetes.io/pcieRoot"]), str(d.Attributes["uuid"]))
		}
	}
	return tw.Flush()
}

func str(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	}
	return "-"
}

func ptrStr(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
