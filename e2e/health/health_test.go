//go:build e2e

// Package health checks device health end to end on real kubelets: faults injected into the mock
// GPU machine become device taints in the node's ResourceSlice, which the scheduler and the
// controller-manager's device taint eviction act on, and Unhealthy entries in the running pods'
// allocatedResourcesStatus, through the kubelet's DRAResourceHealth stream.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/health"
)

const (
	nodeName = "health-node"
	ns       = metav1.NamespaceDefault
	xidKey   = framework.GPUDriver + "/xid"
	eccKey   = framework.GPUDriver + "/ecc"
	lostKey  = framework.GPUDriver + "/lost"
)

type env struct {
	ctx    context.Context
	c      *cluster.Cluster
	node   *cluster.Node
	client kubernetes.Interface
	plugin *framework.Plugin
	uuids  map[string]string
	faults string
}

func TestDeviceHealth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{})
	e := &env{ctx: ctx, c: c, client: c.Client(), uuids: map[string]string{}}
	if err := framework.EnsureDeviceClasses(ctx, e.client); err != nil {
		t.Fatal(err)
	}
	node, err := c.AddNode(ctx, cluster.NodeOptions{Name: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	e.node = node
	// As the chart runs the mock, with lost GPUs configured to evict their pods.
	e.plugin, err = framework.StartPlugin(ctx, c, node, framework.PluginOptions{Backend: "mock", Profile: "h100-8x-2numa",
		ExtraArgs: []string{"--device-taint-effects=lost=NoExecute", "--device-metadata"}})
	if err != nil {
		t.Fatal(err)
	}
	e.faults = filepath.Join(node.PluginDataDir(framework.GPUDriver), "mock", health.FaultDir)
	slices, err := framework.WaitForSlices(ctx, e.client, framework.GPUDriver, nodeName, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			e.uuids[d.Name] = *d.Attributes["uuid"].StringValue
		}
	}
	if !t.Run("XID", e.testXID) {
		return
	}
	if !t.Run("RestartKeepsTaint", e.testRestart) {
		return
	}
	if !t.Run("LostGPUEvicts", e.testLost) {
		return
	}
	if !t.Run("Fabric", e.testFabric) {
		return
	}
	t.Run("Disabled", e.testDisabled)
}

// testDisabled: with --device-health=false the plugin offers the kubelet no health service and
// publishes no taints, whatever the GPUs report.
func (e *env) testDisabled(t *testing.T) {
	const other = "no-health-node"
	node, err := e.c.AddNode(e.ctx, cluster.NodeOptions{Name: other})
	if err != nil {
		t.Fatal(err)
	}
	p, err := framework.StartPlugin(e.ctx, e.c, node, framework.PluginOptions{Backend: "mock", Profile: "h100-8x-2numa",
		ExtraArgs: []string{"--device-health=false"}})
	if err != nil {
		t.Fatal(err)
	}
	faults := filepath.Join(node.PluginDataDir(framework.GPUDriver), "mock", health.FaultDir)
	if err := os.MkdirAll(faults, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(faults, "gpu-2"), []byte("xid 48\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.createPodOn(t, "unwatched", "any-gpu", other)
	// Long enough for a watching plugin to have tainted gpu-2 many times over.
	time.Sleep(5 * time.Second)
	list, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + other})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if len(d.Taints) > 0 {
				t.Errorf("device %s tainted with health off: %v", d.Name, d.Taints)
			}
		}
	}
	if h, msg, err := e.podHealth(e.ctx, "unwatched"); err == nil && h != "Unknown" {
		t.Errorf("pod device health %q (%q) with health off, want none or Unknown", h, msg)
	}
	if _, err := p.Metric("accel_dra_device_health"); err == nil {
		t.Error("accel_dra_device_health exported with health off")
	}
	e.deletePod(t, "unwatched")
}

// testXID: an XID on the GPU of a running pod taints the GPU and shows in the pod's status; the
// recovery clears both. A pod that fits only on the tainted GPU waits until it recovers.
func (e *env) testXID(t *testing.T) {
	e.template(t, "gpu-3-only", "gpu-3")
	e.createPod(t, "holder", "gpu-3-only")
	e.checkMetadata(t, "holder", "gpu-3")
	e.waitPodHealth(t, "holder", "Healthy", "")

	e.inject(t, "gpu-3", "xid 48\n")
	taint := e.waitTaint(t, "gpu-3", xidKey, true)
	if taint.Value != "48" || taint.Effect != resourceapi.DeviceTaintEffectNoSchedule || taint.TimeAdded == nil {
		t.Errorf("XID taint %+v, want value 48, NoSchedule, a timeAdded", taint)
	}
	e.waitPodHealth(t, "holder", "Unhealthy", "XID 48")
	e.waitNodeEvent(t, "DeviceUnhealthy", "gpu-3", "XID 48")
	if v, err := e.plugin.Metric("accel_dra_device_health", `device="gpu-3"`, `state="Unhealthy"`); err != nil || v != 1 {
		t.Errorf("accel_dra_device_health{device=gpu-3,state=Unhealthy} = %v, %v; want 1", v, err)
	}
	// The XID is counted once, by the GPU's UUID and the XID (docs/observability.md).
	if v, err := e.plugin.Metric("accel_dra_xid_events_total", `uuid="`+e.uuids["gpu-3"]+`"`, `xid="48"`); err != nil || v != 1 {
		t.Errorf("accel_dra_xid_events_total{uuid=<gpu-3>,xid=48} = %v, %v; want 1", v, err)
	}

	e.recover(t, "gpu-3")
	e.waitTaint(t, "gpu-3", xidKey, false)
	e.waitPodHealth(t, "holder", "Healthy", "")

	// Free gpu-3, break it again, and ask for it.
	e.deletePod(t, "holder")
	e.inject(t, "gpu-3", "xid 48\n")
	e.waitTaint(t, "gpu-3", xidKey, true)
	e.createPod(t, "waiter", "gpu-3-only")
	e.waitUnschedulable(t, "waiter")
	// Still pending after the scheduler retried on its own backoff: the taint, not a race, keeps
	// it off.
	time.Sleep(10 * time.Second)
	if p, err := e.client.CoreV1().Pods(ns).Get(e.ctx, "waiter", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("pod that fits only on the tainted gpu-3 was scheduled: %v %s", err, framework.DescribePod(e.ctx, e.client, ns, "waiter"))
	}
	e.recover(t, "gpu-3")
	e.waitTaint(t, "gpu-3", xidKey, false)
	if _, err := framework.WaitForPodRunning(e.ctx, e.client, ns, "waiter", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	e.waitPodHealth(t, "waiter", "Healthy", "")
	e.deletePod(t, "waiter")
}

// testRestart: a plugin restart while a GPU is unhealthy keeps its taint and timeAdded, and the
// kubelet's health stream resumes with the device Unhealthy and keeps it from timing out.
func (e *env) testRestart(t *testing.T) {
	e.template(t, "gpu-6-only", "gpu-6")
	e.createPod(t, "survivor", "gpu-6-only")
	e.waitPodHealth(t, "survivor", "Healthy", "")
	// XID 94 (a contained ECC error) asks for no reset by NVIDIA's catalogue, so the GPU mock
	// is told the driver's recovery action: the fault then lasts until the file goes.
	e.inject(t, "gpu-6", "xid 94 reset\n")
	before := e.waitTaint(t, "gpu-6", xidKey, true)
	e.waitPodHealth(t, "survivor", "Unhealthy", "XID 94")

	// Watch the pod's health through the restart and well past the kubelet's 30s timeout. The
	// 1.37 kubelet clears a driver's health cache when its stream ends
	// (HandleWatchResourcesStream in pkg/kubelet/cm/dra/manager.go), so between the old
	// instance's death and the new one's first report a pod status sync shows Unknown; no
	// plugin can prevent that gap. What the plugin owes is that the gap ends with its first
	// report and does not come back: the re-sends keep the device from timing out.
	watchCtx, stopWatch := context.WithCancel(e.ctx)
	var mu sync.Mutex
	var transitions []string // "<state> at <time>", on every change
	last := "Unhealthy"
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		_ = wait.PollUntilContextCancel(watchCtx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			if h, _, err := e.podHealth(ctx, "survivor"); err == nil && h != last {
				mu.Lock()
				transitions = append(transitions, fmt.Sprintf("%s at %s", h, time.Now().Format(time.TimeOnly)))
				last = h
				mu.Unlock()
			}
			return false, nil
		})
	}()

	if err := e.plugin.Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	// Republished slices keep the taint as it was.
	for range 10 {
		after := e.waitTaint(t, "gpu-6", xidKey, true)
		if !after.TimeAdded.Equal(before.TimeAdded) || after.Value != before.Value {
			t.Fatalf("taint after restart %+v, want %+v", after, before)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The stream carries new observations.
	e.inject(t, "gpu-6", "xid 94 reset\necc\n")
	e.waitTaint(t, "gpu-6", eccKey, true)
	e.waitPodHealth(t, "survivor", "Unhealthy", "ECC")
	time.Sleep(35 * time.Second)
	stopWatch()
	<-watchDone
	mu.Lock()
	// At most one gap (one change away from Unhealthy and one back), and Unhealthy at the end.
	t.Logf("the pod's device health through the restart: Unhealthy, then %v", transitions)
	if len(transitions) > 2 || last != "Unhealthy" {
		t.Errorf("the pod's device health left Unhealthy more than once around the plugin restart, or did not come back: %v", transitions)
	}
	mu.Unlock()
	e.recover(t, "gpu-6")
	e.waitTaint(t, "gpu-6", xidKey, false)
	e.waitPodHealth(t, "survivor", "Healthy", "")
	e.deletePod(t, "survivor")
}

// testLost: a GPU that falls off the bus gets a NoExecute taint (configured), the device taint
// eviction controller evicts its pod, and the ReplicaSet's replacement gets a healthy GPU.
func (e *env) testLost(t *testing.T) {
	e.template(t, "any-gpu", "")
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "worker"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "worker"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "worker"}},
				Spec:       podSpec("any-gpu"),
			},
		},
	}
	if _, err := e.client.AppsV1().ReplicaSets(ns).Create(e.ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, dev := e.waitWorker(t, "")
	e.inject(t, dev, "lost\n")
	taint := e.waitTaint(t, dev, lostKey, true)
	if taint.Effect != resourceapi.DeviceTaintEffectNoExecute {
		t.Errorf("lost taint %+v, want NoExecute", taint)
	}
	second, dev2 := e.waitWorker(t, first)
	if dev2 == dev {
		t.Errorf("replacement %s got the lost %s", second, dev)
	}
	t.Logf("pod %s on lost %s evicted, replacement %s on %s", first, dev, second, dev2)
	e.recover(t, dev)
	e.waitTaint(t, dev, lostKey, false)
	if err := e.client.AppsV1().ReplicaSets(ns).Delete(e.ctx, "worker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitWorker waits for the running pod of the worker ReplicaSet that is not notPod (and for
// notPod to be gone), and returns it with its GPU.
func (e *env) waitWorker(t *testing.T, notPod string) (string, string) {
	t.Helper()
	var name, dev string
	err := wait.PollUntilContextTimeout(e.ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=worker"})
		if err != nil {
			return false, nil
		}
		name, dev = "", ""
		for _, p := range pods.Items {
			if p.Name == notPod {
				return false, nil // not evicted yet
			}
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || len(p.Status.ResourceClaimStatuses) == 0 {
				continue
			}
			claim, err := e.client.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
			if err != nil || claim.Status.Allocation == nil {
				continue
			}
			name, dev = p.Name, claim.Status.Allocation.Devices.Results[0].Device
		}
		return name != "", nil
	})
	if err != nil {
		t.Fatalf("no running worker pod other than %q: %v", notPod, err)
	}
	return name, dev
}

// checkMetadata: the container of the pod gets the device metadata file the kubelet plugin
// helper writes, mounted by the CDI spec it writes, and the file names the pod's GPU with the
// attributes of its slice.
func (e *env) checkMetadata(t *testing.T, pod, dev string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	rec, err := e.node.CRI.WaitForContainer(ctx, ns, pod, "ctr")
	if err != nil {
		t.Fatal(err)
	}
	want := metadata.ResourceClaimTemplateFilePath(framework.GPUDriver, "acc", "gpu")
	var source string
	for _, m := range rec.Mounts {
		if m.Destination == want {
			source = m.Source
		}
	}
	if source == "" {
		t.Fatalf("container %s/ctr has no mount at %s: %+v", pod, want, rec.Mounts)
	}
	f, err := os.Open(source)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var md metadatav1beta1.DeviceMetadata
	if err := json.NewDecoder(f).Decode(&md); err != nil {
		t.Fatalf("metadata file %s: %v", source, err)
	}
	if md.APIVersion != metadatav1beta1.SchemeGroupVersion.String() || len(md.Requests) != 1 || len(md.Requests[0].Devices) != 1 {
		t.Fatalf("metadata %+v", md)
	}
	d := md.Requests[0].Devices[0]
	uuid := d.Attributes["uuid"].StringValue
	if d.Name != dev || d.Driver != framework.GPUDriver || uuid == nil || *uuid != e.uuids[dev] || d.Attributes["resource.kubernetes.io/pciBusID"].StringValue == nil {
		t.Errorf("metadata device %+v, want %s with UUID %s and its PCI bus ID", d, dev, e.uuids[dev])
	}
}

func (e *env) inject(t *testing.T, dev, faults string) {
	t.Helper()
	if err := os.MkdirAll(e.faults, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(e.faults, "."+dev+".tmp")
	if err := os.WriteFile(tmp, []byte(faults), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.faults, dev)); err != nil {
		t.Fatal(err)
	}
}

func (e *env) recover(t *testing.T, dev string) {
	t.Helper()
	if err := os.Remove(filepath.Join(e.faults, dev)); err != nil {
		t.Fatal(err)
	}
}

// waitTaint waits until dev has (or has not) a taint with key and returns it.
func (e *env) waitTaint(t *testing.T, dev, key string, present bool) resourceapi.DeviceTaint {
	t.Helper()
	return e.waitTaintOn(t, nodeName, dev, key, present)
}

// waitTaintOn is waitTaint for a device of node.
func (e *env) waitTaintOn(t *testing.T, node, dev, key string, present bool) resourceapi.DeviceTaint {
	t.Helper()
	var found *resourceapi.DeviceTaint
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + framework.GPUDriver})
		if err != nil {
			return false, nil
		}
		found = nil
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				for i := range d.Taints {
					if d.Name == dev && d.Taints[i].Key == key {
						found = &d.Taints[i]
					}
				}
			}
		}
		return (found != nil) == present, nil
	})
	if err != nil {
		t.Fatalf("%s: taint %s present=%v: %v (found %+v)", dev, key, present, err, found)
	}
	if found == nil {
		return resourceapi.DeviceTaint{}
	}
	return *found
}

func (e *env) template(t *testing.T, name, dev string) {
	t.Helper()
	var selectors []string
	if dev != "" {
		selectors = []string{fmt.Sprintf("device.attributes[%q].uuid == %q", framework.GPUDriver, e.uuids[dev])}
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: framework.DeviceClaim("gpu", framework.GPUDriver, 1, selectors, ""),
		}},
	}
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func podSpec(template string) corev1.PodSpec {
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To(int64(1)),
		ResourceClaims:                []corev1.PodResourceClaim{{Name: "acc", ResourceClaimTemplateName: &template}},
		Containers: []corev1.Container{{
			Name: "ctr", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "acc"}}},
		}},
	}
}

func (e *env) createPod(t *testing.T, name, template string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: podSpec(template)}
	if _, err := e.client.CoreV1().Pods(ns).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(name, "waiter") {
		return
	}
	if _, err := framework.WaitForPodRunning(e.ctx, e.client, ns, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// createPodOn creates a pod of template on node and waits until it runs.
func (e *env) createPodOn(t *testing.T, name, template, node string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: podSpec(template)}
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	if _, err := e.client.CoreV1().Pods(ns).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForPodRunning(e.ctx, e.client, ns, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

func (e *env) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := e.client.CoreV1().Pods(ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		// Its claim, made from the template, goes with it and frees the GPU.
		claims, err := e.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range claims.Items {
			if strings.HasPrefix(c.Name, name+"-") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pod %s or its claim not gone: %v", name, err)
	}
}

// podHealth returns the health and message of the pod's only device, as the kubelet reports it.
func (e *env) podHealth(ctx context.Context, name string) (string, string, error) {
	p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	for _, cs := range p.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			if !strings.HasPrefix(string(rs.Name), "claim:") {
				continue
			}
			for _, r := range rs.Resources {
				return string(r.Health), ptr.Deref(r.Message, ""), nil
			}
		}
	}
	return "", "", fmt.Errorf("pod %s has no allocatedResourcesStatus for a claim", name)
}

func (e *env) waitPodHealth(t *testing.T, name, want, msg string) {
	t.Helper()
	var health, message string
	var lastErr error
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		health, message, lastErr = e.podHealth(ctx, name)
		return lastErr == nil && health == want && strings.Contains(message, msg), nil
	})
	if err != nil {
		t.Fatalf("pod %s: device health %q (%q, %v), want %q with %q", name, health, message, lastErr, want, msg)
	}
}

func (e *env) waitUnschedulable(t *testing.T, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s not reported unschedulable: %v; %s", name, err, framework.DescribePod(e.ctx, e.client, ns, name))
	}
}

func (e *env) waitNodeEvent(t *testing.T, reason string, substrs ...string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := e.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName})
		if err != nil {
			return false, nil
		}
	next:
		for _, ev := range evs.Items {
			if ev.Reason != reason {
				continue
			}
			for _, s := range substrs {
				if !strings.Contains(ev.Message, s) {
					continue next
				}
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on node %s with %q: %v", reason, nodeName, substrs, err)
	}
}
