//go:build e2e

// Package autoscaler runs the real Cluster Autoscaler (clusterapi provider, built by
// hack/build-autoscaler.sh three ways) against MachineDeployments at zero whose template the real
// publisher wrote from a real node, and judges its decisions on spec.replicas. No Cluster API
// controllers run: a scale-up is the autoscaler setting replicas to 1.
package autoscaler

import (
	"bytes"
	"context"
	"fmt"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

const (
	profile   = "h100-8x-2numa"
	podNS     = "default"
	caseLabel = "e2e.accel-dra.io/case"
	minSize   = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	maxSize   = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
)

// builds are the binaries of hack/build-autoscaler.sh.
var builds = []string{"pinned", "slicefix", "accel-dra"}

// claimCase is one pod's claim and, per build, whether the autoscaler should scale a group of
// the h100-8x-2numa shape from zero for it.
type claimCase struct {
	name      string
	class     string
	count     int64
	selectors []string
	sameNUMA  bool
	scales    map[string]bool
}

var cases = []claimCase{
	// The provider as pinned announces its synthetic pool with resourceSliceCount 0, so nothing
	// fits; with the fix its devices have only type=gpu, so only a count fits.
	{name: "one-gpu", class: framework.GPUDriver, count: 1, scales: map[string]bool{"slicefix": true, "accel-dra": true}},
	{name: "product-h100", class: framework.GPUDriver, count: 1, selectors: []string{`device.attributes["gpu.accel-dra.io"].productName == "NVIDIA H100 80GB HBM3"`}, scales: map[string]bool{"accel-dra": true}},
	{name: "memory-79gi", class: framework.GPUDriver, count: 1, selectors: []string{`device.capacity["gpu.accel-dra.io"].memory.compareTo(quantity("79Gi")) >= 0`}, scales: map[string]bool{"accel-dra": true}},
	{name: "numa-x4", class: framework.GPUDriver, count: 4, sameNUMA: true, scales: map[string]bool{"accel-dra": true}},
	{name: "any-x9", class: framework.GPUDriver, count: 9},
	{name: "product-a100", class: framework.GPUDriver, count: 1, selectors: []string{`device.attributes["gpu.accel-dra.io"].productName.startsWith("NVIDIA A100")`}},
	{name: "npu", class: framework.NPUDriver, count: 1},
}

func (cc claimCase) objects(group string) (*resourceapi.ResourceClaimTemplate, *corev1.Pod) {
	req := resourceapi.DeviceRequest{Name: "devs", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: cc.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: cc.count,
	}}
	for _, s := range cc.selectors {
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	claim := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}
	if cc.sameNUMA {
		claim.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"devs"}, MatchAttribute: new(resourceapi.FullyQualifiedName("resource.kubernetes.io/numaNode"))}}
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
	return rct, pod
}

// outcome is the autoscaler's decision for one pod.
type outcome struct {
	build, name string
	scaled      bool
	latency     time.Duration // from the pod being unschedulable to the decision
	reason      string
}

// TestAutoscalerScaleFromZero: the publisher writes the template of a real H100 node; groups at
// zero with that template get one pod each; each autoscaler build decides.
func TestAutoscalerScaleFromZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	binDir := autoscalerBinDir(ctx, t)
	c := cluster.StartForTest(t, cluster.Options{})
	cl, err := framework.NewCAPIClient(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.EnsureDeviceClasses(ctx, c.Client()); err != nil {
		t.Fatal(err)
	}
	if err := framework.InstallClusterAPI(ctx, c.RESTConfig(), cl); err != nil {
		t.Fatal(err)
	}
	source := sourceAnnotations(ctx, t, c, cl)
	t.Logf("template of a real %s node published after %s", profile, time.Since(start).Round(time.Second))

	var all []outcome
	for _, build := range builds {
		t.Run(build, func(t *testing.T) {
			all = append(all, runBuild(ctx, t, c, cl, filepath.Join(binDir, "cluster-autoscaler-"+build), build, source)...)
		})
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-13s %-9s %s\n", "build", "claim", "decision", "pending → decision")
	for _, o := range all {
		d := "stays 0"
		if o.scaled {
			d = "0 → 1"
		}
		fmt.Fprintf(&b, "%-10s %-13s %-9s %s\n", o.build, o.name, d, o.latency.Round(100*time.Millisecond))
	}
	t.Logf("autoscaler decisions (scan interval 1s):\n%s", b.String())
	t.Logf("wall time %s", time.Since(start).Round(time.Second))
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

// sourceAnnotations runs a real node of the profile in a group, lets the real publisher write
// its template, and returns the autoscaler's and the template's annotations.
func sourceAnnotations(ctx context.Context, t *testing.T, c *cluster.Cluster, cl client.Client) map[string]string {
	g, err := framework.CreateNodeGroup(ctx, cl, "source", nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.AddNode(ctx, cluster.NodeOptions{Name: "h100-source"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.StartPlugin(ctx, c, n, framework.PluginOptions{Backend: "mock", Profile: profile}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForSlices(ctx, c.Client(), framework.GPUDriver, n.Name, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := g.AddMachine(ctx, cl, "source-0", n.Name, true); err != nil {
		t.Fatal(err)
	}
	pub, err := framework.StartPublisher(ctx, c, "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: framework.CAPINamespace, Name: "source"}, md); err != nil {
			return false, nil
		}
		return md.Annotations[template.HashAnnotation] != "" && md.Annotations[nodegroup.CPUKey] != "", nil
	})
	if err != nil {
		t.Fatalf("no template on the source group: %v\n%s", err, pub.Proc.LogTail(30))
	}
	// The groups under test must keep exactly these annotations.
	if err := pub.Proc.Stop(); err != nil {
		t.Logf("stopping the publisher: %v", err)
	}
	out := map[string]string{}
	for k, v := range md.Annotations {
		if strings.HasPrefix(k, nodegroup.CapacityPrefix) || strings.HasPrefix(k, template.AnnotationPrefix) {
			out[k] = v
		}
	}
	return out
}

// runBuild creates a group at zero per case, runs the autoscaler build, creates the pods and
// waits for each decision; then it stops the autoscaler and removes what it created.
func runBuild(ctx context.Context, t *testing.T, c *cluster.Cluster, cl client.Client, bin, build string, source map[string]string) []outcome {
	groups := map[string]*framework.NodeGroup{}
	for _, cc := range cases {
		name := build + "-" + cc.name
		ann := map[string]string{minSize: "0", maxSize: "1"}
		for k, v := range source {
			ann[k] = v
		}
		label := caseLabel + "=" + name
		if l := ann[nodegroup.LabelsKey]; l != "" {
			label = l + "," + label
		}
		ann[nodegroup.LabelsKey] = label
		g, err := framework.CreateNodeGroup(ctx, cl, name, ann)
		if err != nil {
			t.Fatal(err)
		}
		groups[cc.name] = g
	}

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
		"--kube-client-qps=50", "--kube-client-burst=100",
		"--leader-elect=false",
		"--scale-down-enabled=false",
		"--write-status-configmap=false",
		"--address=" + addr,
		"--v=4",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := proc.Stop(); err != nil {
			t.Logf("stopping the autoscaler: %v", err)
		}
	}()
	// Pods are created once the autoscaler sees all groups, so that the measured time is its
	// decision and not its start.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-proc.Done():
			return false, fmt.Errorf("autoscaler exited")
		default:
		}
		n, err := framework.ScrapeMetric(addr, "cluster_autoscaler_node_groups_count", `node_group_type="autoscaled"`)
		return err == nil && int(n) == len(cases), nil
	})
	if err != nil {
		t.Fatalf("the autoscaler does not see the %d groups: %v\n%s", len(cases), err, proc.LogTail(40))
	}

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
	sort.Slice(outcomes, func(i, j int) bool { return caseIndex(outcomes[i].name) < caseIndex(outcomes[j].name) })
	for _, o := range outcomes {
		want := cases[caseIndex(o.name)].scales[build]
		if o.scaled != want {
			t.Errorf("%s %s: scaled %v, want %v (autoscaler: %s)\n%s", build, o.name, o.scaled, want, o.reason, proc.LogTail(30))
		}
		t.Logf("%-13s scaled=%-5v after %-6s %s", o.name, o.scaled, o.latency.Round(100*time.Millisecond), o.reason)
	}

	// Clean up for the next build: its autoscaler must see only its own groups and pods.
	for _, cc := range cases {
		name := build + "-" + cc.name
		_ = c.Client().CoreV1().Pods(podNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		_ = c.Client().ResourceV1().ResourceClaimTemplates(podNS).Delete(ctx, name, metav1.DeleteOptions{})
		_ = cl.Delete(ctx, groups[cc.name].MS)
		_ = cl.Delete(ctx, groups[cc.name].MD)
	}
	return outcomes
}

func caseIndex(name string) int {
	for i, cc := range cases {
		if cc.name == name {
			return i
		}
	}
	return -1
}

// decide creates the case's pod and waits for the autoscaler: the group's spec.replicas going
// to 1, or (for a case that must not scale) two loops that say NotTriggerScaleUp for the pod
// while the group stays at 0.
func decide(ctx context.Context, c *cluster.Cluster, cl client.Client, build string, cc claimCase, g *framework.NodeGroup) (outcome, error) {
	name := build + "-" + cc.name
	o := outcome{build: build, name: cc.name}
	rct, pod := cc.objects(name)
	if _, err := c.Client().ResourceV1().ResourceClaimTemplates(podNS).Create(ctx, rct, metav1.CreateOptions{}); err != nil {
		return o, err
	}
	if _, err := c.Client().CoreV1().Pods(podNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return o, err
	}
	var pending time.Time
	wantScale := cc.scales[build]
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
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
		md := &clusterv1.MachineDeployment{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(g.MD), md); err != nil {
			return false, nil
		}
		if md.Spec.Replicas != nil && *md.Spec.Replicas > 0 {
			o.scaled, o.latency = true, time.Since(pending)
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
	if err == nil && !o.scaled {
		// A few more loops (--scan-interval=1s) must not scale the group either.
		time.Sleep(3 * time.Second)
		md := &clusterv1.MachineDeployment{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(g.MD), md); err != nil {
			return o, err
		}
		o.scaled = md.Spec.Replicas != nil && *md.Spec.Replicas > 0
	}
	if err != nil && !(wantScale && o.reason != "") {
		return o, fmt.Errorf("no decision: %w; %s", err, framework.DescribePod(ctx, c.Client(), podNS, name))
	}
	return o, nil
}

func eventMessage(ctx context.Context, c *cluster.Cluster, pod, reason string) string {
	evs, err := c.Client().CoreV1().Events(podNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil || len(evs.Items) == 0 {
		return reason
	}
	return reason + ": " + evs.Items[0].Message
}
