// Command demo starts a local Kubernetes control plane with two nodes (a mock 8x H100 GPU node
// and a mock 8x Ascend 910B NPU node), each with a real kubelet, a fake container runtime and
// the accel-dra kubelet plugin, applies the sample workloads from docs/examples, and prints the
// published devices and what each container was given. It runs until Ctrl-C, or exits after
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
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
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

	if once {
		return nil
	}
	fmt.Printf("\nkubectl: %s --kubeconfig %s get resourceslices,resourceclaims,pods -o wide\n",
		filepath.Join(c.BinDir(), "kubectl"), c.KubeconfigPath())
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
