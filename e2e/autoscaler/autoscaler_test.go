//go:build e2e

// Package autoscaler runs the real Cluster Autoscaler (clusterapi provider, built by
// hack/build-autoscaler.sh four ways: released 1.36.1, and upstream as pinned, with the slice-count
// fix, and with accel-dra's reader) against MachineDeployments at zero whose template the real
// publisher wrote from a real node, and judges its decisions on spec.replicas. No Cluster API
// controllers run: a scale-up is the autoscaler setting replicas to 1.
package autoscaler

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/accelctl"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

const (
	podNS     = "default"
	caseLabel = "e2e.accel-dra.io/case"
	minSize   = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	maxSize   = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
)

// builds are the binaries of hack/build-autoscaler.sh. A case's scales has no entry for
// released: the test checks that every group stays at 0 on it, as measured.
var builds = []string{"released", "pinned", "slicefix", "accel-dra"}

// source is a real node shape (a real kubelet with the plugin on a mock profile) whose template
// the groups under test carry.
type source struct {
	name    string // the group suffix and the key of scales
	profile string // the plugin's mock profile
	backend string // the plugin's backend: mock (default) or npu-mock
	// dynamicMIG runs the plugin with --dynamic-mig: every MIG-mode GPU is published as itself
	// and one device per MIG profile and placement, sharing its counters.
	dynamicMIG bool
	devices    int // the devices its node publishes
	// gpuCount is the gpu-count key its template must carry: its whole GPUs, not its devices
	// ("" for no key).
	gpuCount string
	// seed: the group's annotations are what `accelctl template seed` writes from the real
	// node's ResourceSlices with kubernetes.io/arch=arm64, not what the publisher writes from the
	// node. The kubelet labels its Node kubernetes.io/arch from its own GOARCH (amd64 here) and
	// puts it back over a --node-labels override or a later relabel, so no real node of the
	// harness is arm64; the devices are still the real plugin's on the gh200-1x profile.
	seed bool
	arch string // the kubernetes.io/arch its template node must have
}

var (
	h100  = source{name: "h100", profile: "h100-8x-2numa", devices: 8, gpuCount: "8", arch: "amd64"}
	gh200 = source{name: "gh200", profile: "gh200-1x", devices: 1, gpuCount: "1", arch: "arm64", seed: true}
	// 8 H100s in MIG mode, dynamic MIG: each GPU whole (type mig-parent, which no claim for a
	// GPU gets: CUDA cannot use a GPU in MIG mode whole) and its 25 MIG partitions; no GPU counts.
	h100MIG = source{name: "h100-mig", profile: "h100-8x-mig", dynamicMIG: true, devices: 208, arch: "amd64"}
	// Static MIG: gpu-0's 4 MIG devices (gpu-1 and gpu-2 are in MIG mode without any, so not
	// published) and the whole gpu-3 and gpu-4.
	staticMIG = source{name: "static-mig", profile: "mig-mixed", devices: 6, gpuCount: "2", arch: "amd64"}
	// 8 Ascend 910Bs: the publisher's dra-driver names the NPU driver for this group (the
	// driver of its whole devices) with its default GPU preference.
	npu     = source{name: "npu", profile: "ascend910b-8x", backend: "npu-mock", devices: 8, gpuCount: "8", arch: "amd64"}
	sources = []source{h100, gh200, h100MIG, staticMIG, npu}
)

// driver is the DRA driver of the source's plugin.
func (s source) driver() string {
	if s.backend == "npu-mock" {
		return framework.NPUDriver
	}
	return framework.GPUDriver
}

// claimCase is one pod's claim, the groups at zero it may land on (all carry the case's label),
// and per build the group the autoscaler should scale from zero for it ("" for none).
type claimCase struct {
	name      string
	class     string
	count     int64
	selectors []string
	sameNUMA  bool
	arch      string   // the pod's kubernetes.io/arch nodeSelector, if any
	groups    []source // default: h100
	scales    map[string]string
	// extendedResource: the pod asks for count of this extended resource in its limits (a
	// DeviceClass's extendedResourceName) instead of a claim.
	extendedResource corev1.ResourceName
	// anyGroup: the pod selects no case label, for a test whose cluster has one group.
	anyGroup bool
	// claim, when set, is the pod's claim as it is (a docs/examples manifest's), instead of
	// the one class, count, selectors and sameNUMA make.
	claim *resourceapi.DeviceClaim
	// annotations are added to the case's groups' annotations, over the template's.
	annotations map[string]string
}

func (cc claimCase) sources() []source {
	if len(cc.groups) == 0 {
		return []source{h100}
	}
	return cc.groups
}

var cases = []claimCase{
	// The provider as pinned announces its synthetic pool with resourceSliceCount 0, so nothing
	// fits; with the fix its devices have only type=gpu, so only a count fits.
	{name: "one-gpu", class: framework.GPUDriver, count: 1, scales: map[string]string{"slicefix": "h100", "accel-dra": "h100"}},
	// The pod selects amd64; an arm64 GH200 group beside its H100 group must stay at 0.
	{name: "product-h100", class: framework.GPUDriver, count: 1, selectors: []string{`device.attributes["gpu.accel-dra.io"].productName == "NVIDIA H100 80GB HBM3"`}, arch: "amd64", groups: []source{h100, gh200}, scales: map[string]string{"accel-dra": "h100"}},
	{name: "memory-79gi", class: framework.GPUDriver, count: 1, selectors: []string{`device.capacity["gpu.accel-dra.io"].memory.compareTo(quantity("79Gi")) >= 0`}, scales: map[string]string{"accel-dra": "h100"}},
	{name: "numa-x4", class: framework.GPUDriver, count: 4, sameNUMA: true, scales: map[string]string{"accel-dra": "h100"}},
	{name: "any-x9", class: framework.GPUDriver, count: 9},
	{name: "product-a100", class: framework.GPUDriver, count: 1, selectors: []string{`device.attributes["gpu.accel-dra.io"].productName.startsWith("NVIDIA A100")`}},
	// An NPU group beside an H100 group: slicefix's invented devices are the NPU driver's on
	// the NPU group only (dra-driver per group), which the NPU class (device.driver) matches.
	// With one global dra-driver (the GPU driver) the NPU group had no dra-driver and stayed
	// at 0 on every build but accel-dra.
	{name: "npu", class: framework.NPUDriver, count: 1, groups: []source{h100, npu}, scales: map[string]string{"slicefix": "npu", "accel-dra": "npu"}},
	// An amd64 H100 group and an arm64 GH200 group, both at zero, both with a GPU for the claim:
	// only the pod's architecture tells them apart (the provider reads kubernetes.io/arch from
	// the labels annotation, and defaults to amd64 without it).
	{name: "arm64-one-gpu", class: framework.GPUDriver, count: 1, arch: "arm64", groups: []source{h100, gh200}, scales: map[string]string{"slicefix": "gh200", "accel-dra": "gh200"}},
	// MIG nodes, with the chart's classes: gpu.accel-dra.io selects whole GPUs (type gpu). A
	// stock autoscaler invents gpu-count devices with type=gpu, so gpu-count must count whole
	// GPUs: with every device of the driver (208 and 6) slicefix scaled for 9 and 3 GPUs. A node
	// whose GPUs are all in MIG mode has none a GPU claim can use, so nothing scales for one
	// (before type mig-parent, both builds scaled the dynamic-MIG group up for 8 GPUs in MIG
	// mode, which the pod could not have used).
	{name: "dynmig-x8", class: framework.GPUDriver, count: 8, groups: []source{h100MIG}},
	{name: "dynmig-x9", class: framework.GPUDriver, count: 9, groups: []source{h100MIG}},
	// Only the template has the partitions: slicefix's invented devices have no type=mig.
	{name: "dynmig-1g", class: framework.MIGClass, count: 1, selectors: []string{`device.attributes["gpu.accel-dra.io"].profile == "1g.10gb"`}, groups: []source{h100MIG}, scales: map[string]string{"accel-dra": "h100-mig"}},
	{name: "staticmig-x2", class: framework.GPUDriver, count: 2, groups: []source{staticMIG}, scales: map[string]string{"slicefix": "static-mig", "accel-dra": "static-mig"}},
	{name: "staticmig-x3", class: framework.GPUDriver, count: 3, groups: []source{staticMIG}},
}

// objects returns the case's pod and its claim template (nil for an extended-resource case).
func (cc claimCase) objects(group string) (*resourceapi.ResourceClaimTemplate, *corev1.Pod) {
	if cc.extendedResource != "" {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: group},
			Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{caseLabel: group},
				TerminationGracePeriodSeconds: new(int64(0)),
				Containers: []corev1.Container{{
					Name: "ctr", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{cc.extendedResource: *resource.NewQuantity(cc.count, resource.DecimalSI)}},
				}},
			},
		}
		return nil, pod
	}
	numa := ""
	if cc.sameNUMA {
		numa = "resource.kubernetes.io/numaNode"
	}
	claim := framework.DeviceClaim("devs", cc.class, cc.count, cc.selectors, numa)
	if cc.claim != nil {
		claim = *cc.claim.DeepCopy()
	}
	rct := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: group},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: claim}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: group},
		Spec: corev1.PodSpec{
			// Each pod fits only its own group, so that one autoscaler run judges every case.
			NodeSelector:                  map[string]string{caseLabel: group},
			TerminationGracePeriodSeconds: new(int64(0)),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "devs", ResourceClaimTemplateName: new(group)}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "devs"}}},
			}},
		},
	}
	if cc.arch != "" {
		pod.Spec.NodeSelector[corev1.LabelArchStable] = cc.arch
	}
	if cc.anyGroup {
		delete(pod.Spec.NodeSelector, caseLabel)
	}
	return rct, pod
}

// outcome is the autoscaler's decision for one pod.
type outcome struct {
	build, name string
	scaled      string        // the sources of the groups that went to 1, joined by "+"
	latency     time.Duration // from the pod being unschedulable to the decision
	reason      string
}

// TestAutoscalerScaleFromZero: the publisher writes the templates of real nodes (an H100 node,
// an 8×H100 dynamic-MIG node, a static-MIG node) and accelctl seeds an arm64 GH200 one; groups
// at zero with those templates get one pod per case; each autoscaler build decides.
func TestAutoscalerScaleFromZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	binDir := autoscalerBinDir(ctx, t)
	c, cl := startCAPICluster(ctx, t)
	templates := sourceAnnotations(ctx, t, c, cl, sources, machineDeployment)
	t.Logf("templates of real nodes of %d sources published after %s", len(sources), time.Since(start).Round(time.Second))

	var all []outcome
	for _, build := range builds {
		t.Run(build, func(t *testing.T) {
			all = append(all, runBuild(ctx, t, c, cl, filepath.Join(binDir, "cluster-autoscaler-"+build), build, templates, buildOptions{cases: cases, newGroup: machineDeployment})...)
		})
	}
	logDecisions(t, "claim", all, start)
}

// startCAPICluster starts a control plane with the chart's DeviceClasses and Cluster API's
// CRDs, and returns it with a client that knows the Cluster API types.
func startCAPICluster(ctx context.Context, t *testing.T) (*cluster.Cluster, client.Client) {
	t.Helper()
	c := cluster.StartForTest(t, cluster.Options{})
	cl, err := framework.NewCAPIClient(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.EnsureChartDeviceClasses(ctx, c.Client()); err != nil {
		t.Fatal(err)
	}
	if err := framework.InstallClusterAPI(ctx, c.RESTConfig(), cl); err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// autoscalerBinDir returns $AUTOSCALER_BIN_DIR, or what hack/build-autoscaler.sh prints.
func autoscalerBinDir(ctx context.Context, t *testing.T) string {
	if d := os.Getenv("AUTOSCALER_BIN_DIR"); d != "" {
		return d
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "../../hack/build-autoscaler.sh")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/build-autoscaler.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// sourceAnnotations runs a real node of each source, lets the real publisher write the
// templates of those in a group of newGroup's kind (or seeds them, see source.seed), and returns
// per source the autoscaler's and the template's annotations. It checks that each template node
// has its source's architecture.
func sourceAnnotations(ctx context.Context, t *testing.T, c *cluster.Cluster, cl client.Client, sources []source, newGroup newGroupFunc) map[string]map[string]string {
	var (
		groups = make([]framework.ScalableGroup, len(sources))
		wg     sync.WaitGroup
		errs   = make([]error, len(sources))
		seeded = make([]map[string]string, len(sources))
	)
	for i, src := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seeded[i], groups[i], errs[i] = startSource(ctx, c, cl, src, newGroup)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	pub, err := framework.StartPublisher(ctx, c, "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for i, src := range sources {
		ann := seeded[i]
		if !src.seed {
			var got map[string]string
			err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				if got, err = groupAnnotations(ctx, cl, groups[i]); err != nil {
					return false, nil
				}
				return got[template.HashAnnotation] != "" && got[nodegroup.CPUKey] != "", nil
			})
			if err != nil {
				t.Fatalf("no template on the %s source group %s: %v\n%s", src.name, groups[i].Key(), err, pub.Proc.LogTail(30))
			}
			ann = map[string]string{}
			for k, v := range got {
				if strings.HasPrefix(k, nodegroup.CapacityPrefix) || strings.HasPrefix(k, template.AnnotationPrefix) {
					ann[k] = v
				}
			}
		}
		node, err := nodegroup.TemplateNode("template-"+src.name, ann)
		if err != nil {
			t.Fatalf("%s template: %v", src.name, err)
		}
		if got := node.Labels[corev1.LabelArchStable]; got != src.arch {
			t.Fatalf("%s template node: %s=%q, want %q (labels annotation %q)", src.name, corev1.LabelArchStable, got, src.arch, ann[nodegroup.LabelsKey])
		}
		if got := ann[nodegroup.GPUCountKey]; got != src.gpuCount {
			t.Errorf("%s template: %s=%q, want %q (the node's whole GPUs of its %d devices)", src.name, nodegroup.GPUCountKey, got, src.gpuCount, src.devices)
		}
		out[src.name] = ann
	}
	// The groups under test must keep exactly these annotations.
	if err := pub.Proc.Stop(); err != nil {
		t.Logf("stopping the publisher: %v", err)
	}
	return out
}

// groupAnnotations reads a group object's annotations.
func groupAnnotations(ctx context.Context, cl client.Client, g framework.ScalableGroup) (map[string]string, error) {
	var obj client.Object
	switch g := g.(type) {
	case *framework.NodeGroup:
		obj = g.MD.DeepCopy()
	case *framework.MachinePool:
		obj = g.MP.DeepCopy()
	default:
		return nil, fmt.Errorf("unknown group %T", g)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil, err
	}
	return obj.GetAnnotations(), nil
}

// startSource adds src's node with its plugin. A seeded source's annotations it returns; any
// other joins a group "source-<name>" of newGroup's kind, one node, for the publisher.
func startSource(ctx context.Context, c *cluster.Cluster, cl client.Client, src source, newGroup newGroupFunc) (map[string]string, framework.ScalableGroup, error) {
	node := src.name + "-source"
	n, err := c.AddNode(ctx, cluster.NodeOptions{Name: node, KubeletFlags: []string{"--provider-id=" + framework.ProviderID(node)}})
	if err != nil {
		return nil, nil, err
	}
	opts := framework.PluginOptions{Backend: cmp.Or(src.backend, "mock"), Profile: src.profile}
	if src.dynamicMIG {
		opts.ExtraArgs = []string{"--dynamic-mig"}
	}
	if _, err := framework.StartPlugin(ctx, c, n, opts); err != nil {
		return nil, nil, err
	}
	slices, err := framework.WaitForSlices(ctx, c.Client(), src.driver(), n.Name, src.devices)
	if err != nil {
		return nil, nil, err
	}
	if src.seed {
		node, err := c.Client().CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, err
		}
		alloc := node.Status.Allocatable
		seed := &seedv1alpha1.NodeGroupSeed{
			Capacity:       seedv1alpha1.Capacity{CPU: new(alloc[corev1.ResourceCPU]), Memory: new(alloc[corev1.ResourceMemory])},
			Labels:         map[string]string{corev1.LabelArchStable: src.arch, corev1.LabelOSStable: "linux"},
			ResourceSlices: slices,
		}
		if err := seed.Validate(); err != nil {
			return nil, nil, err
		}
		ann, err := accelctl.SeedAnnotations(seed, accelctl.SeedOptions{GPUDriver: framework.GPUDriver})
		return ann, nil, err
	}
	g, err := newGroup(ctx, cl, "source-"+src.name, nil)
	if err != nil {
		return nil, nil, err
	}
	return nil, g, g.Join(ctx, cl, n.Name, framework.ProviderID(n.Name))
}

// newGroupFunc creates a node group at zero with the annotations.
type newGroupFunc func(ctx context.Context, cl client.Client, name string, ann map[string]string) (framework.ScalableGroup, error)

func machineDeployment(ctx context.Context, cl client.Client, name string, ann map[string]string) (framework.ScalableGroup, error) {
	return framework.CreateNodeGroup(ctx, cl, name, ann)
}

func machinePool(ctx context.Context, cl client.Client, name string, ann map[string]string) (framework.ScalableGroup, error) {
	return framework.CreateMachinePool(ctx, cl, name, ann)
}

// buildOptions are what one runBuild judges: its cases, the kind of group they get, and what to
// do once every decision is in, while the autoscaler still runs.
type buildOptions struct {
	cases    []claimCase
	newGroup newGroupFunc
	after    func(a *autoscalerRun, groups map[string][]framework.ScalableGroup, outcomes []outcome)
}

// autoscalerRun is a running autoscaler build.
type autoscalerRun struct {
	proc *cluster.Process
	addr string // its metrics address
}

// runBuild creates the groups at zero of every case, runs the autoscaler build, creates the pods
// and waits for each decision; then it stops the autoscaler and removes what it created.
func runBuild(ctx context.Context, t *testing.T, c *cluster.Cluster, cl client.Client, bin, build string, templates map[string]map[string]string, opts buildOptions) []outcome {
	cases := opts.cases
	groups := map[string][]framework.ScalableGroup{}
	nGroups := 0
	for _, cc := range cases {
		name := build + "-" + cc.name
		for _, src := range cc.sources() {
			ann := map[string]string{minSize: "0", maxSize: "1"}
			maps.Copy(ann, templates[src.name])
			maps.Copy(ann, cc.annotations)
			label := caseLabel + "=" + name
			if l := ann[nodegroup.LabelsKey]; l != "" {
				label = l + "," + label
			}
			ann[nodegroup.LabelsKey] = label
			g, err := opts.newGroup(ctx, cl, name+"-"+src.name, ann)
			if err != nil {
				t.Fatal(err)
			}
			groups[cc.name] = append(groups[cc.name], g)
			nGroups++
		}
	}

	a := startAutoscaler(ctx, t, c, bin, build, nGroups)
	defer a.stop(t)
	proc := a.proc

	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
	)
	for _, cc := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := decide(ctx, c, cl, build, cc, groups[cc.name])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("%s %s: %v", build, cc.name, err)
				return
			}
			outcomes = append(outcomes, o)
		}()
	}
	wg.Wait()
	sort.Slice(outcomes, func(i, j int) bool { return caseIndex(cases, outcomes[i].name) < caseIndex(cases, outcomes[j].name) })
	for _, o := range outcomes {
		want := cases[caseIndex(cases, o.name)].scales[build]
		if o.scaled != want {
			t.Errorf("%s %s: scaled %q, want %q (autoscaler: %s)\n%s", build, o.name, o.scaled, want, o.reason, proc.LogTail(30))
		}
		t.Logf("%-13s scaled=%-5q after %-6s %s", o.name, o.scaled, o.latency.Round(100*time.Millisecond), o.reason)
	}
	if opts.after != nil && !t.Failed() {
		opts.after(a, groups, outcomes)
	}

	// Clean up for the next build: its autoscaler must see only its own groups and pods.
	for _, cc := range cases {
		name := build + "-" + cc.name
		_ = c.Client().CoreV1().Pods(podNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		_ = c.Client().ResourceV1().ResourceClaimTemplates(podNS).Delete(ctx, name, metav1.DeleteOptions{})
		for _, g := range groups[cc.name] {
			_ = g.Delete(ctx, cl)
		}
	}
	return outcomes
}

// startAutoscaler runs an autoscaler build and waits until it sees nGroups node groups (any
// number after its first loop for a negative nGroups), so that a decision measured after it is
// its decision and not its start.
func startAutoscaler(ctx context.Context, t *testing.T, c *cluster.Cluster, bin, build string, nGroups int) *autoscalerRun {
	t.Helper()
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	proc, err := c.StartProcess("cluster-autoscaler-"+build, []string{bin,
		"--cloud-provider=clusterapi",
		"--kubeconfig=" + c.KubeconfigPath(),
		"--namespace=" + podNS,
		"--node-group-auto-discovery=clusterapi:namespace=" + framework.CAPINamespace,
		"--scan-interval=1s",
		// The provider looks up the groups' infrastructure template kind, which this harness
		// does not install, with uncached discovery requests, several per group and loop: at
		// 50 QPS the client's rate limit alone made a loop of 18 groups take 10-14 s.
		"--kube-client-qps=1000", "--kube-client-burst=2000",
		"--leader-elect=false",
		"--scale-down-enabled=false",
		"--write-status-configmap=false",
		"--address=" + addr,
		"--v=4",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-proc.Done():
			return false, fmt.Errorf("autoscaler exited")
		default:
		}
		n, err := framework.ScrapeMetric(addr, "cluster_autoscaler_node_groups_count", `node_group_type="autoscaled"`)
		return err == nil && (nGroups < 0 || int(n) == nGroups), nil
	})
	a := &autoscalerRun{proc: proc, addr: addr}
	if err != nil {
		a.stop(t)
		t.Fatalf("the autoscaler does not see the %d groups: %v\n%s", nGroups, err, proc.LogTail(40))
	}
	return a
}

func (a *autoscalerRun) stop(t *testing.T) {
	if err := a.proc.Stop(); err != nil {
		t.Logf("stopping the autoscaler: %v", err)
	}
}

func caseIndex(cases []claimCase, name string) int {
	for i, cc := range cases {
		if cc.name == name {
			return i
		}
	}
	return -1
}

// decisionTimeout bounds the wait for one pod's decision. The autoscaler scales one group per
// loop and says NotTriggerScaleUp only in a loop that scales none, so a pod that stays pending
// is judged after every scale-up of its build (eight for accel-dra): 27 s on a loaded 2-core
// machine, with room for a slower one.
const decisionTimeout = 3 * time.Minute

// decide creates the case's pod and waits for the autoscaler: one of the case's groups going to
// spec.replicas 1, or (for a case that must not scale) two loops that say NotTriggerScaleUp for
// the pod while every group stays at 0. groups are in the order of cc.sources().
func decide(ctx context.Context, c *cluster.Cluster, cl client.Client, build string, cc claimCase, groups []framework.ScalableGroup) (outcome, error) {
	name := build + "-" + cc.name
	o := outcome{build: build, name: cc.name}
	rct, pod := cc.objects(name)
	if rct != nil {
		if _, err := c.Client().ResourceV1().ResourceClaimTemplates(podNS).Create(ctx, rct, metav1.CreateOptions{}); err != nil {
			return o, err
		}
	}
	if _, err := c.Client().CoreV1().Pods(podNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return o, err
	}
	var pending time.Time
	wantScale := cc.scales[build] != ""
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, decisionTimeout, true, func(ctx context.Context) (bool, error) {
		if pending.IsZero() {
			p, err := c.Client().CoreV1().Pods(podNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
					pending = time.Now()
				}
			}
			if pending.IsZero() {
				return false, nil
			}
		}
		scaled, err := scaledGroups(ctx, cl, cc, groups)
		if err != nil {
			return false, nil
		}
		if scaled != "" {
			o.scaled, o.latency = scaled, time.Since(pending)
			o.reason = eventMessage(ctx, c, name, "TriggeredScaleUp")
			return true, nil
		}
		evs, err := c.Client().CoreV1().Events(podNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=NotTriggerScaleUp"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		if o.latency == 0 {
			o.latency = time.Since(pending)
		}
		o.reason = "NotTriggerScaleUp: " + evs.Items[0].Message
		// The autoscaler says so once per pod. A case that should scale keeps waiting, so that
		// a slow first loop does not fail it.
		return !wantScale, nil
	})
	if err == nil && (o.scaled == "" || len(groups) > 1) {
		// A few more loops (--scan-interval=1s) must not scale the group, or another of the
		// case's groups, either.
		time.Sleep(3 * time.Second)
		scaled, err := scaledGroups(ctx, cl, cc, groups)
		if err != nil {
			return o, err
		}
		o.scaled = scaled
	}
	if err != nil && !(wantScale && o.reason != "") {
		return o, fmt.Errorf("no decision: %w; %s", err, framework.DescribePod(ctx, c.Client(), podNS, name))
	}
	return o, nil
}

// scaledGroups returns the sources of the case's groups (MachineDeployments or MachinePools)
// whose spec.replicas is above 0, joined by "+".
func scaledGroups(ctx context.Context, cl client.Client, cc claimCase, groups []framework.ScalableGroup) (string, error) {
	var scaled []string
	for i, g := range groups {
		n, err := g.Replicas(ctx, cl)
		if err != nil {
			return "", err
		}
		if n > 0 {
			scaled = append(scaled, cc.sources()[i].name)
		}
	}
	return strings.Join(scaled, "+"), nil
}

func eventMessage(ctx context.Context, c *cluster.Cluster, pod, reason string) string {
	evs, err := c.Client().CoreV1().Events(podNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil || len(evs.Items) == 0 {
		return reason
	}
	return reason + ": " + evs.Items[0].Message
}

// logDecisions logs each build's decision per pod and the test's wall time.
func logDecisions(t *testing.T, column string, all []outcome, start time.Time) {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-13s %-18s %s\n", "build", column, "decision", "pending → decision")
	for _, o := range all {
		d := "stays 0"
		if o.scaled != "" {
			d = o.scaled + " 0 → 1"
		}
		fmt.Fprintf(&b, "%-10s %-13s %-18s %s\n", o.build, o.name, d, o.latency.Round(100*time.Millisecond))
	}
	t.Logf("autoscaler decisions (scan interval 1s):\n%s", b.String())
	t.Logf("wall time %s", time.Since(start).Round(time.Second))
}
