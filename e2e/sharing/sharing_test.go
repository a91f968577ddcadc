//go:build e2e

// Package sharing checks GPU sharing end to end on real kubelets (docs/sharing.md): with
// --consumable-memory, the scheduler puts several claims on one GPU by memory and never more
// than it has; the plugin prepares each share, hands the kubelet its share ID and tells the
// container its memory; and accelctl simulate gives the same verdict as the scheduler.
//
//	go test -tags e2e -run TestConsumableMemory ./e2e/sharing/
package sharing

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/fakecri"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/accelctl"
	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
	"github.com/accel-dra/accel-dra/pkg/template"
)

const (
	nodeName = "share-node"
	ns       = metav1.NamespaceDefault
	// gpu0 restricts every claim to one 80 GiB H100 of the h100-8x-2numa profile. The index
	// attribute survives templating (it is no identity attribute), so accelctl can use the
	// same claims.
	gpu0 = `device.attributes["gpu.accel-dra.io"].index == 0`
)

type env struct {
	ctx    context.Context
	c      *cluster.Cluster
	node   *cluster.Node
	client kubernetes.Interface
	plugin *framework.Plugin
}

// startEnv starts a control plane with one node and the plugin on the h100-8x-2numa mock with
// pluginArgs, and returns once its eight GPUs are published.
func startEnv(ctx context.Context, t *testing.T, pluginArgs ...string) (*env, []resourceapi.ResourceSlice) {
	t.Helper()
	c := cluster.StartForTest(t, cluster.Options{})
	e := &env{ctx: ctx, c: c, client: c.Client()}
	if err := framework.EnsureDeviceClasses(ctx, e.client); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.node, err = c.AddNode(ctx, cluster.NodeOptions{Name: nodeName}); err != nil {
		t.Fatal(err)
	}
	if e.plugin, err = framework.StartPlugin(ctx, c, e.node, framework.PluginOptions{Backend: "mock", Profile: "h100-8x-2numa",
		ExtraArgs: pluginArgs}); err != nil {
		t.Fatal(err)
	}
	slices, err := framework.WaitForSlices(ctx, e.client, framework.GPUDriver, nodeName, 8)
	if err != nil {
		t.Fatal(err)
	}
	return e, slices
}

func TestConsumableMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ctl := standin.Build(t, standin.MockTools, "nvidia-cuda-mps-control")
	e, slices := startEnv(ctx, t, "--consumable-memory", "--nvidia-mps-control-path="+ctl)
	var uuid0 string
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || d.Capacity["memory"].RequestPolicy == nil {
				t.Fatalf("device %s published without allowMultipleAllocations and a memory request policy: %+v", d.Name, d)
			}
			if d.Name == "gpu-0" {
				uuid0 = *d.Attributes["uuid"].StringValue
			}
		}
	}

	memories := []string{"20Gi", "20Gi", "40Gi", "10Gi"}
	for i, m := range memories {
		e.createClaim(t, fmt.Sprintf("mem-%d", i), m)
	}
	for i := range 3 {
		e.createPod(t, fmt.Sprintf("p%d", i), fmt.Sprintf("mem-%d", i))
	}
	for i := range 3 {
		if _, err := framework.WaitForPodRunning(ctx, e.client, ns, fmt.Sprintf("p%d", i), 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// The fourth does not fit: 80 GiB are given out.
	e.createPod(t, "p3", "mem-3")

	t.Run("SharesOfOneGPU", func(t *testing.T) {
		shares := map[string]bool{}
		for i := range 3 {
			claim, err := e.client.ResourceV1().ResourceClaims(ns).Get(ctx, fmt.Sprintf("mem-%d", i), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r := claim.Status.Allocation.Devices.Results[0]
			if r.Device != "gpu-0" || r.ShareID == nil {
				t.Fatalf("claim %s: allocated %s share %v, want a share of gpu-0", claim.Name, r.Device, r.ShareID)
			}
			shares[string(*r.ShareID)] = true
			got := r.ConsumedCapacity["memory"]
			if got.Cmp(resource.MustParse(memories[i])) != 0 {
				t.Errorf("claim %s consumed %s of memory, want %s", claim.Name, got.String(), memories[i])
			}
			rec, err := e.node.CRI.WaitForContainer(ctx, ns, fmt.Sprintf("p%d", i), "ctr")
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%s=%s=%d", driver.EnvMemoryLimits, uuid0, got.Value())
			if !contains(rec.Env, want) {
				t.Errorf("pod p%d: environment lacks %s: %v", i, want, rec.Env)
			}
			if !hasDevice(rec, "/dev/nvidia0") {
				t.Errorf("pod p%d: no /dev/nvidia0 in %+v", i, rec.Devices)
			}
		}
		if len(shares) != 3 {
			t.Errorf("share IDs %v, want three different ones", shares)
		}
		specs, err := e.plugin.CDISpecs()
		if err != nil || len(specs) != 3 {
			t.Errorf("CDI specs %v (%v), want one per share", specs, err)
		}
	})

	t.Run("FourthStaysPending", func(t *testing.T) {
		// The scheduler has had time to try: it reports why, and allocates nothing.
		if _, err := framework.WaitForPodEvent(ctx, e.client, ns, "p3", time.Minute, "nodes are available"); err != nil {
			t.Fatalf("%v\n%s", err, framework.DescribePod(ctx, e.client, ns, "p3"))
		}
		pod, err := e.client.CoreV1().Pods(ns).Get(ctx, "p3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claim, err := e.client.ResourceV1().ResourceClaims(ns).Get(ctx, "mem-3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != "" || claim.Status.Allocation != nil {
			t.Fatalf("fourth share scheduled on a full GPU: node %q, allocation %+v", pod.Spec.NodeName, claim.Status.Allocation)
		}
	})

	t.Run("SimulateAgrees", func(t *testing.T) {
		ann := e.templateAnnotations(t)
		class, err := e.client.ResourceV1().DeviceClasses().Get(ctx, framework.GPUDriver, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var claims []*resourceapi.ResourceClaim
		for i := range memories {
			c, err := e.client.ResourceV1().ResourceClaims(ns).Get(ctx, fmt.Sprintf("mem-%d", i), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fresh := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.Name, UID: c.UID}, Spec: c.Spec}
			claims = append(claims, fresh)
		}
		for n, want := range map[int]bool{3: true, 4: false} {
			rep, err := accelctl.Simulate(ctx, accelctl.SimulateInput{Group: "g", Annotations: ann, Classes: []*resourceapi.DeviceClass{class}, Claims: claims[:n]})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Template.Fits != want || rep.Template.Error {
				t.Errorf("simulate %v on a new node: fits %v (%s), the scheduler says %v", memories[:n], rep.Template.Fits, rep.Template.Reason, want)
			}
		}
	})

	t.Run("FreedShareIsReused", func(t *testing.T) {
		e.deletePod(t, "p0")
		if err := e.client.ResourceV1().ResourceClaims(ns).Delete(ctx, "mem-0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := framework.WaitForPodRunning(ctx, e.client, ns, "p3", 2*time.Minute); err != nil {
			t.Fatalf("%v\n%s", err, framework.DescribePod(ctx, e.client, ns, "p3"))
		}
	})

	t.Run("NothingLeaks", func(t *testing.T) {
		for _, p := range []string{"p1", "p2", "p3"} {
			e.deletePod(t, p)
		}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			specs, err := e.plugin.CDISpecs()
			return err == nil && len(specs) == 0, nil
		})
		if err != nil {
			specs, _ := e.plugin.CDISpecs()
			t.Fatalf("CDI specs left after every pod ended: %v", specs)
		}
		if v, err := e.plugin.Metric("accel_dra_prepared_claims"); err != nil || v != 0 {
			t.Errorf("prepared claims %v (%v), want 0", v, err)
		}
	})

	t.Run("MPSShares", func(t *testing.T) { e.testMPSShares(ctx, t, ctl, slices) })
}

func (e *env) createClaim(t *testing.T, name, memory string) {
	t.Helper()
	e.createShareClaim(t, name, memory, gpu0, "")
}

// createShareClaim creates a claim for memory of one GPU matching selector, with the GpuConfig
// sharing settings sharing ("" for none), and returns its UID.
func (e *env) createShareClaim(t *testing.T, name, memory, selector, sharing string) string {
	t.Helper()
	dc := framework.DeviceClaim("gpu", framework.GPUDriver, 1, []string{selector}, "")
	dc.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
	if sharing != "" {
		dc.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver:     framework.GPUDriver,
			Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":` + sharing + `}`)},
		}}}}
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourceapi.ResourceClaimSpec{Devices: dc}}
	created, err := e.client.ResourceV1().ResourceClaims(ns).Create(e.ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(created.UID)
}

func (e *env) createPod(t *testing.T, name, claim string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			NodeSelector:                  map[string]string{corev1.LabelHostname: nodeName},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := framework.DeletePod(e.ctx, e.client, ns, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// templateAnnotations are what the template publisher would write for this node's group.
func (e *env) templateAnnotations(t *testing.T) map[string]string {
	t.Helper()
	list, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.Build(list.Items, template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann, err := tmpl.Encode(0)
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(ann, nodegroup.DRA(tmpl, framework.GPUDriver))
	ann[nodegroup.CPUKey], ann[nodegroup.MemoryKey] = "96", "1000Gi"
	// What an autoscaler reads back must still be shared devices with their policy.
	back, err := template.Decode(ann)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := back.ResourceSlices(accelctl.TemplateNodeName)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range decoded {
		for _, dev := range s.Spec.Devices {
			if dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations || dev.Capacity["memory"].RequestPolicy == nil {
				t.Fatalf("template device %s lost allowMultipleAllocations or the memory request policy", dev.Name)
			}
		}
	}
	return ann
}

func contains(env []string, kv string) bool {
	for _, e := range env {
		if e == kv {
			return true
		}
	}
	return false
}

func hasDevice(rec fakecri.ContainerRecord, path string) bool {
	for _, d := range rec.Devices {
		if d.Path == path {
			return true
		}
	}
	return false
}
