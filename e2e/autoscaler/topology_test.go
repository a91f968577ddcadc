//go:build e2e

package autoscaler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/accelctl"
)

// The NVLink profiles of docs/examples/topology-*.yaml: a real node of each is the source of a
// group's template.
var (
	bridged  = source{name: "bridged", profile: "h100-nvl-4x", devices: 4, gpuCount: "4", arch: "amd64"}
	cubeMesh = source{name: "cube", profile: "v100-8x-cube-mesh", devices: 8, gpuCount: "8", arch: "amd64"}
	nvswitch = source{name: "nvswitch", profile: "h100-8x-nvswitch", devices: 8, gpuCount: "8", arch: "amd64"}
)

// topologyExamples are the constrained claims whose answers are compared. The pairwise-list
// example needs the alpha gate DRAListTypeAttributes, which this cluster does not have: the
// plugin publishes no nvlinkCliques and it fits nowhere (pkg/accelctl TestTopologyAgreement
// compares it with and without the gate).
var topologyExamples = []string{"topology-4-connected", "topology-bridge-pair", "topology-island-8", "topology-prefer-nvlink"}

// TestTopologyAtZero: for groups at zero whose template the real publisher took from a real node
// of each NVLink profile (bridged pairs, hybrid cube mesh, NVSwitch), the real scheduler on that
// real node, accelctl simulate on the group's template and the patched autoscaler (accel-dra
// build) give the same answer, fits or not, for each constrained claim of docs/examples; and the
// scheduler's answers are the wiring's (want).
func TestTopologyAtZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	binDir := autoscalerBinDir(ctx, t)
	c, cl := startCAPICluster(ctx, t)
	srcs := []source{bridged, cubeMesh, nvswitch}
	templates := sourceAnnotations(ctx, t, c, cl, srcs, machineDeployment)
	t.Logf("templates of %d real NVLink nodes published after %s", len(srcs), time.Since(start).Round(time.Second))

	want := map[string]map[string]bool{
		"bridged":  {"topology-bridge-pair": true, "topology-prefer-nvlink": true},
		"cube":     {"topology-4-connected": true, "topology-bridge-pair": true, "topology-island-8": true, "topology-prefer-nvlink": true},
		"nvswitch": {"topology-4-connected": true, "topology-bridge-pair": true, "topology-island-8": true, "topology-prefer-nvlink": true},
	}
	classes, err := c.Client().ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var classPtrs []*resourceapi.DeviceClass
	for i := range classes.Items {
		classPtrs = append(classPtrs, &classes.Items[i])
	}

	type answers struct{ scheduler, simulate bool }
	got := map[string]answers{}
	var cases []claimCase
	for _, file := range topologyExamples {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", file+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := accelctl.ParseObjects(data)
		if err != nil {
			t.Fatal(err)
		}
		claims, err := objs.ClaimsToAllocate()
		if err != nil {
			t.Fatal(err)
		}
		if len(objs.Templates) != 1 || len(objs.Pods) != 1 {
			t.Fatalf("%s: want one claim template and one pod", file)
		}
		for _, src := range srcs {
			name := src.name + "-" + strings.TrimPrefix(file, "topology-")
			sched := schedulerFits(ctx, t, c, src.name+"-source", name, objs.Templates[0], objs.Pods[0])
			rep, err := accelctl.Simulate(ctx, accelctl.SimulateInput{Group: name, Annotations: templates[src.name], Classes: classPtrs, Claims: claims})
			if err != nil {
				t.Fatal(err)
			}
			got[name] = answers{scheduler: sched, simulate: rep.Template.Fits}
			if sched != want[src.name][file] {
				t.Errorf("%s: the scheduler on the real %s node: fits %v, want %v", file, src.profile, sched, want[src.name][file])
			}
			if rep.Template.Fits != sched {
				t.Errorf("%s on %s: accelctl simulate fits %v (%s), the real scheduler %v", file, src.profile, rep.Template.Fits, rep.Template.Reason, sched)
			}
			// The autoscaler must scale the group up exactly where the real node fits.
			cc := claimCase{name: name, groups: []source{src}, claim: &objs.Templates[0].Spec.Spec.Devices, scales: map[string]string{}}
			if sched {
				cc.scales["accel-dra"] = src.name
			}
			cases = append(cases, cc)
		}
	}
	t.Logf("scheduler and simulate answered after %s", time.Since(start).Round(time.Second))

	var outcomes []outcome
	t.Run("accel-dra", func(t *testing.T) {
		outcomes = runBuild(ctx, t, c, cl, filepath.Join(binDir, "cluster-autoscaler-accel-dra"), "accel-dra", templates, buildOptions{cases: cases, newGroup: machineDeployment})
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %-10s %-10s %s\n", "claim on node", "scheduler", "simulate", "autoscaler (accel-dra)")
	for _, o := range outcomes {
		a := got[o.name]
		fmt.Fprintf(&b, "%-22s %-10s %-10s %s\n", o.name, fits(a.scheduler), fits(a.simulate), fits(o.scaled != ""))
	}
	t.Logf("answers per claim:\n%s", b.String())
	t.Logf("wall time %s", time.Since(start).Round(time.Second))
}

func fits(ok bool) string {
	if ok {
		return "fits"
	}
	return "no"
}

// schedulerFits asks the real scheduler: the example's claim template (renamed) and pod, bound
// to the real node by its hostname label. It returns whether the pod was bound, or false once the
// scheduler has said the pod's claims cannot be allocated; then it removes both and waits until
// the claim is gone, so that the next example finds the node's devices free.
func schedulerFits(ctx context.Context, t *testing.T, c *cluster.Cluster, node, name string, tmpl *resourceapi.ResourceClaimTemplate, pod *corev1.Pod) bool {
	t.Helper()
	client := c.Client()
	rct := tmpl.DeepCopy()
	rct.Namespace, rct.Name = podNS, "sched-"+name
	if _, err := client.ResourceV1().ResourceClaimTemplates(podNS).Create(ctx, rct, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := pod.DeepCopy()
	p.Namespace, p.Name = podNS, "sched-"+name
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	p.Spec.ResourceClaims[0].ResourceClaimTemplateName = &rct.Name
	p.Spec.TerminationGracePeriodSeconds = new(int64(0))
	// The harness's kubelet runs containers with its fake runtime; only the binding matters.
	p.Spec.Containers[0].Image, p.Spec.Containers[0].Command = "registry.k8s.io/pause:3.10", nil
	if _, err := client.CoreV1().Pods(podNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var bound bool
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().Pods(podNS).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if got.Spec.NodeName != "" {
			bound = true
			return true, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, "cannot allocate all claims") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the scheduler does not decide on %s: %v\n%s", p.Name, err, framework.DescribePod(ctx, client, podNS, p.Name))
	}
	if err := framework.DeletePod(ctx, client, podNS, p.Name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := client.ResourceV1().ResourceClaimTemplates(podNS).Delete(ctx, rct.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The claim made from the template goes with its pod (the resourceclaim controller).
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceClaims(podNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, rc := range list.Items {
			if strings.HasPrefix(rc.Name, p.Name) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the claim of %s is not gone: %v", p.Name, err)
	}
	return bound
}
