//go:build e2e

package autoscaler

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/publisher"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// staleCases are pods that only the group's first machine type (8×H100) can hold: a whole GPU,
// which slicefix judges by gpu-count, and an H100 by its product name, which only the accel-dra
// reader sees. Each is the only pod and the group the only group, so it selects no case label.
var staleCases = []claimCase{
	{name: "one-gpu", class: framework.GPUDriver, count: 1, anyGroup: true, scales: map[string]string{"slicefix": "h100", "accel-dra": "h100"}},
	{name: "product-h100", class: framework.GPUDriver, count: 1, anyGroup: true,
		selectors: []string{`device.attributes["gpu.accel-dra.io"].productName == "NVIDIA H100 80GB HBM3"`}, scales: map[string]string{"accel-dra": "h100"}},
}

// TestStaleTemplateAtZero: a MachineDeployment whose template the publisher took from its real
// H100 node goes to zero, and its infrastructure template is then replaced by one of another
// machine type, as Cluster API users change a group's type (infrastructure machine templates
// are immutable, so a new type is a new template that infrastructureRef names). Before the
// change each build scales the group up for a pod that only the H100 machines can hold; after
// it, with the publisher's default policy (withdraw), no build does, and the group has a
// TemplateStale event and is counted in groups_with_problems.
func TestStaleTemplateAtZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	binDir := autoscalerBinDir(ctx, t)
	c, cl := startCAPICluster(ctx, t)

	// The group's real node, and the publisher taking its template.
	n, err := c.AddNode(ctx, cluster.NodeOptions{Name: "stale-h100", KubeletFlags: []string{"--provider-id=" + framework.ProviderID("stale-h100")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.StartPlugin(ctx, c, n, framework.PluginOptions{Backend: "mock", Profile: h100.profile}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForSlices(ctx, c.Client(), framework.GPUDriver, n.Name, h100.devices); err != nil {
		t.Fatal(err)
	}
	g, err := framework.CreateNodeGroup(ctx, cl, "stale", map[string]string{minSize: "0", maxSize: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Join(ctx, cl, n.Name, framework.ProviderID(n.Name)); err != nil {
		t.Fatal(err)
	}
	pub, err := framework.StartPublisher(ctx, c, "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	ann := waitForAnnotations(ctx, t, cl, g, pub, "the template of the group's node", func(ann map[string]string) bool {
		return ann[template.HashAnnotation] != "" && ann[nodegroup.CPUKey] != "" && ann[nodegroup.SourceAnnotation] == nodegroup.SourceNodes
	})
	t.Logf("template of %s: %s, %s=%s, %s=%q", n.Name, ann[template.HashAnnotation], nodegroup.GPUCountKey, ann[nodegroup.GPUCountKey],
		nodegroup.MachineTemplateAnnotation, ann[nodegroup.MachineTemplateAnnotation])

	// To zero: the Machine goes (Cluster API deletes it when the group scales down); its node is
	// cordoned rather than stopped, so that no pod of the test lands there.
	if err := cl.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: framework.CAPINamespace, Name: n.Name}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// judge runs each build once per pod (a fresh autoscaler each, so that a scale-up of the
	// last pod and its reset leave no state behind), checks that it scales the group as want
	// says, and that it counts groups node groups.
	judge := func(phase string, groups int, want func(claimCase, string) string) {
		for _, build := range []string{"slicefix", "accel-dra"} {
			for _, cc := range staleCases {
				if cc.scales[build] == "" {
					// This build never scales for the pod: no test of the template.
					continue
				}
				t.Run(phase+"/"+build+"/"+cc.name, func(t *testing.T) {
					a := startAutoscaler(ctx, t, c, filepath.Join(binDir, "cluster-autoscaler-"+build), build, -1)
					defer a.stop(t)
					run := phase + "-" + build
					judged := cc
					judged.scales = map[string]string{run: want(cc, build)}
					o, err := decide(ctx, c, cl, run, judged, []framework.ScalableGroup{g})
					if err != nil {
						t.Fatal(err)
					}
					if o.scaled != judged.scales[run] {
						t.Errorf("%s %s: scaled %q, want %q (autoscaler: %s)\n%s", build, cc.name, o.scaled, judged.scales[run], o.reason, a.proc.LogTail(20))
					}
					t.Logf("%-13s scaled=%-5q after %-6s %s", cc.name, o.scaled, o.latency.Round(100*time.Millisecond), o.reason)
					if n, err := framework.ScrapeMetric(a.addr, "cluster_autoscaler_node_groups_count", `node_group_type="autoscaled"`); err != nil || int(n) != groups {
						t.Errorf("the autoscaler counts %v node groups (%v), want %d", n, err, groups)
					}
					// Back to zero: no Cluster API controllers create a machine here.
					deletePod(ctx, c, run+"-"+cc.name)
					if err := setReplicas(ctx, cl, g, 0); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
	// The control: the same pods do scale the group up while its template is right, so that
	// what follows cannot pass for another reason.
	judge("h100", 1, func(cc claimCase, build string) string { return cc.scales[build] })

	// The group's machine type changes while it is at zero.
	md := g.MD.DeepCopy()
	if err := cl.Get(ctx, client.ObjectKeyFromObject(md), md); err != nil {
		t.Fatal(err)
	}
	orig := md.DeepCopy()
	md.Spec.Template.Spec.InfrastructureRef.Name = "cpu-only"
	if err := cl.Patch(ctx, md, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	was := publisher.MachineTemplateRef(orig.Spec.Template.Spec.InfrastructureRef)
	ann = waitForAnnotations(ctx, t, cl, g, pub, "the stale template withdrawn", func(ann map[string]string) bool {
		return ann[template.HashAnnotation] == "" && ann[nodegroup.CPUKey] == ""
	})
	if got := ann[nodegroup.MachineTemplateAnnotation]; got != was {
		t.Errorf("%s = %q after the withdrawal, want what the template was taken from, %q", nodegroup.MachineTemplateAnnotation, got, was)
	}

	// Without cpu and memory the clusterapi provider takes the group's capacity from the new
	// infrastructure template's status.capacity; this harness has no infrastructure provider,
	// so the group cannot scale from zero and the autoscaler counts no node group at all.
	judge("cpu-only", 0, func(claimCase, string) string { return "" })

	if ev, err := groupEvent(ctx, c, g.MD.Name, publisher.ReasonTemplateStale); err != nil {
		t.Error(err)
	} else if !strings.Contains(ev, "/cpu-only") || !strings.Contains(ev, "withdrawn") {
		t.Errorf("%s event: %s", publisher.ReasonTemplateStale, ev)
	}
	if v, err := framework.ScrapeMetric(pub.MetricsAddr, "accel_dra_template_publisher_groups_with_problems", `reason="`+publisher.ReasonTemplateStale+`"`); err != nil || v != 1 {
		t.Errorf("groups_with_problems{reason=%q} = %v (%v), want 1", publisher.ReasonTemplateStale, v, err)
	}
	t.Logf("wall time %s", time.Since(start).Round(time.Second))
}

// waitForAnnotations waits up to a minute until the group's annotations satisfy ok, and returns
// them; it fails the test (not fatally: what the autoscaler then does is worth seeing) if they
// do not.
func waitForAnnotations(ctx context.Context, t *testing.T, cl client.Client, g framework.ScalableGroup, pub *framework.Publisher, what string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	var ann map[string]string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := groupAnnotations(ctx, cl, g)
		if err != nil {
			return false, nil
		}
		ann = got
		return ok(ann), nil
	})
	if err != nil {
		t.Errorf("%s: not on %s: %v; annotations: %v\n%s", what, g.Key(), err, publisherKeys(ann), pub.Proc.LogTail(20))
	}
	return ann
}

// publisherKeys are the annotations of the publisher's keys, values shortened.
func publisherKeys(ann map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range ann {
		if nodegroup.IsManagedKey(k) {
			if len(v) > 80 {
				v = v[:80] + "…"
			}
			out[k] = v
		}
	}
	return out
}

// groupEvent returns the note of the publisher's event of the reason on the group.
func groupEvent(ctx context.Context, c *cluster.Cluster, name, reason string) (string, error) {
	evs, err := c.Client().EventsV1().Events(framework.CAPINamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var seen []string
	for _, ev := range evs.Items {
		if ev.Reason == reason && ev.Regarding.Name == name {
			return ev.Note, nil
		}
		seen = append(seen, ev.Reason)
	}
	return "", fmt.Errorf("no %s event on %s; events: %q", reason, name, seen)
}

func deletePod(ctx context.Context, c *cluster.Cluster, name string) {
	_ = c.Client().CoreV1().Pods(podNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	_ = c.Client().ResourceV1().ResourceClaimTemplates(podNS).Delete(ctx, name, metav1.DeleteOptions{})
}

func setReplicas(ctx context.Context, cl client.Client, g *framework.NodeGroup, n int32) error {
	md := &clusterv1.MachineDeployment{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(g.MD), md); err != nil {
		return err
	}
	orig := md.DeepCopy()
	md.Spec.Replicas = &n
	return cl.Patch(ctx, md, client.MergeFrom(orig))
}
