//go:build e2e

package autoscaler

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
)

// extendedResource is the GPU DeviceClass's extendedResourceName here, set through the chart's
// drivers.gpu.deviceClass.extendedResourceName: a pod asks for GPUs in its limits, no claim.
const extendedResource corev1.ResourceName = "example.com/gpu"

// mismatchMetric is the autoscaler's count of differences between a ready node's ResourceSlices
// and its group's template node's, per driver and kind (missing, extra, mismatch, unknown). It
// compares which attribute and capacity names the devices have and how many there are, not
// their values.
const mismatchMetric = "cluster_autoscaler_dra_node_template_resources_mismatch"

// loopsMetric counts the autoscaler's finished main loops (with function="main").
const loopsMetric = "cluster_autoscaler_function_duration_seconds_count"

// erCase: one GPU as an extended resource. The pinned provider's template pool is incomplete, so
// nothing fits; slicefix's invented devices have type gpu, which the class selects.
var erCase = claimCase{name: "er-one-gpu", extendedResource: extendedResource, count: 1, scales: map[string]string{"slicefix": "h100", "accel-dra": "h100"}}

// poolCases are the cases that tell the builds apart, on MachinePools at zero whose template the
// publisher wrote from a real node of a MachinePool.
var poolCases = []claimCase{
	{name: "one-gpu", class: framework.GPUDriver, count: 1, scales: map[string]string{"slicefix": "h100", "accel-dra": "h100"}},
	{name: "product-h100", class: framework.GPUDriver, count: 1, selectors: []string{`device.attributes["gpu.accel-dra.io"].productName == "NVIDIA H100 80GB HBM3"`}, scales: map[string]string{"accel-dra": "h100"}},
	{name: "any-x9", class: framework.GPUDriver, count: 9},
	erCase,
}

// TestAutoscalerMachinePool: MachinePools are node groups. The publisher writes the template of
// a real node that is in a MachinePool by its provider ID; MachinePools at zero with it get one
// pod per case, and each autoscaler build decides on spec.replicas of the MachinePool. For the
// extended-resource pod a real node then joins the scaled pool as Cluster API would record it
// (providerIDList, status.nodeRefs), the pod runs there, and the autoscaler's template mismatch
// count is judged.
func TestAutoscalerMachinePool(t *testing.T) {
	runScaleUps(t, machinePool, poolCases)
}

// TestAutoscalerExtendedResource: a pod that asks for the GPU class's extended resource (no
// claim) scales a MachineDeployment at zero; a real node joins it, the pod runs there, and the
// autoscaler's template mismatch count stays 0 with the published template (and is not 0 with
// the devices a stock provider invents from gpu-count, which shows the check can fail).
func TestAutoscalerExtendedResource(t *testing.T) {
	runScaleUps(t, machineDeployment, []claimCase{erCase})
}

// runScaleUps runs the cases against every build on groups of newGroup's kind, whose template
// the publisher wrote from a real H100 node in a group of that kind, and joins a real node to
// each group scaled for an extended-resource case.
func runScaleUps(t *testing.T, newGroup newGroupFunc, cs []claimCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	binDir := autoscalerBinDir(ctx, t)
	c := cluster.StartForTest(t, cluster.Options{})
	cl, err := framework.NewCAPIClient(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	// The GPU class's extended resource is the cases' (one per test), example.com/gpu by default.
	er := extendedResource
	for _, cc := range cs {
		er = cmp.Or(cc.extendedResource, er)
	}
	classes, err := framework.ChartDeviceClassesWith(map[string]any{"extendedResourceName": string(er)})
	if err != nil {
		t.Fatal(err)
	}
	for _, dc := range classes {
		if err := cl.Create(ctx, dc); err != nil {
			t.Fatal(err)
		}
	}
	if err := framework.InstallClusterAPI(ctx, c.RESTConfig(), cl); err != nil {
		t.Fatal(err)
	}
	templates := sourceAnnotations(ctx, t, c, cl, []source{h100}, newGroup)
	t.Logf("template of a real node published after %s", time.Since(start).Round(time.Second))

	var all []outcome
	for _, build := range builds {
		t.Run(build, func(t *testing.T) {
			opts := buildOptions{cases: cs, newGroup: newGroup, after: func(a *autoscalerRun, groups map[string][]framework.ScalableGroup, outcomes []outcome) {
				for _, o := range outcomes {
					cc := cs[caseIndex(cs, o.name)]
					if cc.extendedResource == "" || o.scaled == "" {
						continue
					}
					joinAndJudge(ctx, t, c, cl, a, build, cc, groups[cc.name][0])
				}
			}}
			all = append(all, runBuild(ctx, t, c, cl, filepath.Join(binDir, "cluster-autoscaler-"+build), build, templates, opts)...)
		})
	}
	logDecisions(t, "case", all, start)
}

// stabilization is the autoscaler's delay before a ready node becomes its group's template
// (stabilizationDelay in its node info provider): until then it compares the node with the
// template built from the group's annotations, after that with itself.
const stabilization = time.Minute

// joinAndJudge brings up the node the autoscaler asked for: a real kubelet with the group's
// provider ID and the plugin on the source's profile, recorded in the group as Cluster API
// would. The case's pod must then run on it, the autoscaler must map the node to the group, and
// its mismatch count for the GPU driver, read while it still compares the node with the
// annotations' template, must be 0 with accel-dra's template and above 0 with slicefix's
// invented devices.
func joinAndJudge(ctx context.Context, t *testing.T, c *cluster.Cluster, cl client.Client, a *autoscalerRun, build string, cc claimCase, g framework.ScalableGroup) {
	t.Helper()
	name := build + "-" + cc.name
	node := name + "-0"
	joinStart := time.Now()
	n, err := c.AddNode(ctx, cluster.NodeOptions{
		Name:         node,
		Labels:       map[string]string{caseLabel: name},
		KubeletFlags: []string{"--provider-id=" + framework.ProviderID(node)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	defer func() {
		// Gone, so that the next build's autoscaler does not count an unready node.
		n.Stop()
		if err := c.Client().CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}); err != nil {
			t.Logf("deleting node %s: %v", node, err)
		}
	}()
	if _, err := framework.StartPlugin(ctx, c, n, framework.PluginOptions{Backend: "mock", Profile: h100.profile}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForSlices(ctx, c.Client(), framework.GPUDriver, node, h100.devices); err != nil {
		t.Fatal(err)
	}
	if err := g.Join(ctx, cl, node, framework.ProviderID(node)); err != nil {
		t.Fatal(err)
	}
	pod, err := framework.WaitForPodRunning(ctx, c.Client(), podNS, name, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != node {
		t.Fatalf("pod %s runs on %s, want the joined node %s", name, pod.Spec.NodeName, node)
	}
	// The autoscaler finds the node's group by its provider ID (a Machine's spec.providerID, a
	// MachinePool's spec.providerIDList); only then does it compare the node with the template.
	inGroup := fmt.Sprintf("node %q is in nodegroup %q", node, g.Key())
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		log, err := os.ReadFile(a.proc.LogPath)
		return err == nil && strings.Contains(string(log), inGroup), nil
	}); err != nil {
		t.Fatalf("the autoscaler did not log %s: %v\n%s", inGroup, err, a.proc.LogTail(30))
	}
	t.Logf("%s: node %s ready %s after the join started, pod running on it after %s", g.Key(), node,
		ready.Sub(joinStart).Round(100*time.Millisecond), time.Since(joinStart).Round(100*time.Millisecond))

	// Five loops of the autoscaler's comparison after it mapped the node, all before the node is
	// stable enough to become the template itself.
	loops := func() float64 {
		n, err := framework.ScrapeMetric(a.addr, loopsMetric, `function="main"`)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var (
		seen    []float64
		samples []string // as read: a value, or "absent"
	)
	for first := loops(); ; time.Sleep(500 * time.Millisecond) {
		// The last sample is read after the fifth loop has ended.
		done := loops() >= first+5
		if time.Since(ready) > stabilization-5*time.Second {
			t.Fatalf("node %s has been ready for %s: the autoscaler may now compare it with itself; %s samples so far %v",
				node, time.Since(ready).Round(time.Second), mismatchMetric, samples)
		}
		v, err := framework.ScrapeMetric(a.addr, mismatchMetric, `driver="`+framework.GPUDriver+`"`)
		if err != nil && !strings.Contains(err.Error(), "not found") {
			t.Fatal(err)
		}
		// Absent: no difference for the driver since the autoscaler started.
		seen = append(seen, v)
		if err != nil {
			samples = append(samples, "absent")
		} else {
			samples = append(samples, strconv.FormatFloat(v, 'g', -1, 64))
		}
		if done {
			break
		}
	}
	worst := 0.0
	for _, v := range seen {
		worst = max(worst, v)
	}
	switch build {
	case "accel-dra":
		if worst != 0 {
			t.Errorf("%s{driver=%q} = %v with the published template, want 0 (samples %v)\n%s", mismatchMetric, framework.GPUDriver, worst, samples, a.proc.LogTail(30))
		}
	case "slicefix":
		if worst == 0 {
			t.Errorf("%s{driver=%q} = 0 with the devices invented from gpu-count (type only), want > 0 (samples %v)", mismatchMetric, framework.GPUDriver, samples)
		}
	}
	t.Logf("%s{driver=%q} every 0.5s over 5 loops: %v", mismatchMetric, framework.GPUDriver, samples)
}
