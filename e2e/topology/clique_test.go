//go:build e2e

package topology

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/nodelabels"
)

// The fabric cliques of the mock NVL72 racks: the cluster UUID and clique ID their fabric
// manager reports (pkg/backend/nvmlmock, nvlinkprofiles.go: gb200-4x, gb200-4x-rack2).
const (
	rack1Clique = "7a1d3c52-9e04-4b8f-a16e-2d905bc37701.32766"
	rack2Clique = "7a1d3c52-9e04-4b8f-a16e-2d905bc37702.32766"
)

// TestCliqueLabel: the real plugin on two GB200 trays of one rack and one of another labels
// each Node with its fabric clique; the pods of docs/examples/nvlink-domain-8-gpus.yaml keep to
// one clique through pod affinity on that label; the label goes once the fabric registration is
// no longer complete when the plugin starts again.
func TestCliqueLabel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{})
	e := &env{ctx: ctx, client: c.Client()}
	if err := framework.EnsureChartDeviceClasses(ctx, e.client); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tray-a": rack1Clique, "tray-b": rack1Clique, "rack2": rack2Clique}
	profiles := map[string]string{"tray-a": "gb200-4x", "tray-b": "gb200-4x", "rack2": "gb200-4x-rack2"}
	plugins := map[string]*framework.Plugin{}
	for _, name := range []string{"rack2", "tray-a", "tray-b"} {
		n, err := c.AddNode(ctx, cluster.NodeOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if plugins[name], err = framework.StartPlugin(ctx, c, n, framework.PluginOptions{Backend: "mock", Profile: profiles[name]}); err != nil {
			t.Fatal(err)
		}
		if _, err := framework.WaitForSlices(ctx, e.client, framework.GPUDriver, name, 4); err != nil {
			t.Fatal(err)
		}
	}
	for name, clique := range want {
		e.waitLabel(t, name, clique)
	}
	// No churn: a restart that finds the label right writes nothing; the apply of the same
	// value leaves the plugin's field manager entry as it was.
	before := e.appliedAt(t, "tray-a")
	if err := plugins["tray-a"].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitLabel(t, "tray-a", rack1Clique)
	if after := e.appliedAt(t, "tray-a"); !after.Equal(&before) {
		t.Errorf("a restart wrote the label again: applied at %v, then %v", before, after)
	}

	ex := load(t, "nvlink-domain-8-gpus.yaml")
	tmpl := ex.template.DeepCopy()
	tmpl.Namespace = ns
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The first member on tray-a; the second, free to go to tray-b or rack2 (4 free GPUs each)
	// but for its affinity, must go to tray-b.
	// The first member on tray-a; then the second, free to go to tray-b or rack2 (4 free GPUs
	// each) but for its affinity, must go to tray-b. One after the other: created together, the
	// second could be placed first, in rack 2, and hold the first off tray-a.
	e.createPinned(t, ex, "domain-0", "tray-a")
	if a := e.running(t, "domain-0"); a.node != "tray-a" || len(a.devices) != 4 {
		t.Fatalf("pod domain-0 got %v on %s, want 4 GPUs on tray-a", a.devices, a.node)
	}
	e.createPinned(t, ex, "domain-1", "")
	if a := e.running(t, "domain-1"); a.node != "tray-b" || len(a.devices) != 4 {
		t.Errorf("pod domain-1 got %v on %s, want 4 GPUs on tray-b, in domain-0's clique", a.devices, a.node)
	}
	for _, p := range []string{"domain-1", "domain-0"} {
		if err := framework.DeletePod(ctx, e.client, ns, p, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// With the first member in rack 2, the second has no node: rack 2 has no other tray, and
	// the free trays of rack 1 are in another clique.
	e.createPinned(t, ex, "domain-0", "rack2")
	if a := e.running(t, "domain-0"); a.node != "rack2" {
		t.Fatalf("domain-0 on %s, want rack2", a.node)
	}
	e.createPinned(t, ex, "domain-1", "")
	if _, err := framework.WaitForPodEvent(ctx, e.client, ns, "domain-1", podWait, "didn't match pod affinity rules"); err != nil {
		t.Fatalf("domain-1: %v\n%s", err, framework.DescribePod(ctx, e.client, ns, "domain-1"))
	}
	for _, p := range []string{"domain-1", "domain-0"} {
		if err := framework.DeletePod(ctx, e.client, ns, p, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	// tray-b's fabric registration is in progress when its plugin starts again (a re-enumeration
	// after a driver change): no GPU reports a clique, and the label goes.
	p := plugins["tray-b"]
	p.Kill()
	<-p.Process().Done()
	for i, a := range p.Args {
		if a == "--mock-profile=gb200-4x" {
			p.Args[i] = "--mock-profile=gb200-4x-fabric-in-progress"
		}
	}
	if !slices.Contains(p.Args, "--mock-profile=gb200-4x-fabric-in-progress") {
		t.Fatalf("no --mock-profile=gb200-4x in the plugin's args %v", p.Args)
	}
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitLabel(t, "tray-b", "")
	if got := e.node(t, "tray-a").Labels[nodelabels.CliqueLabel]; got != rack1Clique {
		t.Errorf("tray-a's label is %q after tray-b's went", got)
	}
}

func (e *env) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitLabel waits for the Node's clique label to be want ("" for none).
func (e *env) waitLabel(t *testing.T, name, want string) {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(e.ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got = e.node(t, name).Labels[nodelabels.CliqueLabel]
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("Node %s: label %s=%q, want %q", name, nodelabels.CliqueLabel, got, want)
	}
}

// createPinned creates a member of the example's job, on node where node is not "".
func (e *env) createPinned(t *testing.T, ex example, name, node string) {
	t.Helper()
	pod := ex.pod.DeepCopy()
	pod.Namespace, pod.Name = ns, name
	if node != "" {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}},
		}}
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// appliedAt is when the plugin's field manager last changed what it owns of the Node.
func (e *env) appliedAt(t *testing.T, name string) metav1.Time {
	t.Helper()
	for _, m := range e.node(t, name).ManagedFields {
		if m.Manager == "accel-dra-kubelet-plugin/"+framework.GPUDriver && m.Operation == metav1.ManagedFieldsOperationApply && m.Time != nil {
			return *m.Time
		}
	}
	t.Fatalf("Node %s: no field manager entry of the plugin", name)
	return metav1.Time{}
}
