//go:build e2e

// Package mig runs MIG on real kubelets: static MIG devices, dynamic MIG partitions allocated
// by the real scheduler through shared counters, and a plugin killed between creating a MIG
// instance and recording it. Run with:
//
//	KUBE_BIN_DIR=$(hack/build-k8s.sh) ACCEL_DRA_BIN_DIR=$PWD/bin go test -tags e2e -run TestMIG ./e2e/mig/
package mig

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/fakecri"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/accelctl"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

const (
	driver   = framework.GPUDriver
	migClass = "mig.gpu.accel-dra.io"
	// parentClass is a class of the kind a tool that manages a GPU in MIG mode, or keeps it
	// free of partitions, brings: the chart has none, and its GPU class never selects one.
	parentClass = "mig-parent.gpu.accel-dra.io"
	ns          = "default"
	podWait     = 3 * time.Minute
)

type env struct {
	ctx    context.Context
	client kubernetes.Interface
}

// classes are the chart's GPU and MIG classes (deployments/helm/.../deviceclasses.yaml), and
// parentClass.
func classes() []*resourceapi.DeviceClass {
	mk := func(name, typ string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].type == %q", driver, driver, typ),
			}}}},
		}
	}
	return []*resourceapi.DeviceClass{mk(driver, "gpu"), mk(migClass, "mig"), mk(parentClass, "mig-parent")}
}

// runPod creates a claim template of one device of class matching selectors, and a pod using
// it on node.
func (e *env) createPod(t *testing.T, node, name, class string, selectors ...string) {
	t.Helper()
	req := resourceapi.DeviceRequest{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
	}}
	for _, s := range selectors {
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}},
	}
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      "",
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "acc", ResourceClaimTemplateName: &tmpl.Name}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "acc"}}},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) runPod(t *testing.T, node *cluster.Node, name, class string, selectors ...string) (fakecri.ContainerRecord, string) {
	t.Helper()
	e.createPod(t, node.Name, name, class, selectors...)
	if _, err := framework.WaitForPodRunning(e.ctx, e.client, ns, name, podWait); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	rec, err := node.CRI.WaitForContainer(ctx, ns, name, "ctr")
	if err != nil {
		t.Fatal(err)
	}
	return rec, e.allocated(t, name)
}

// allocated is the device allocated to a pod's claim.
func (e *env) allocated(t *testing.T, pod string) string {
	t.Helper()
	p, err := e.client.CoreV1().Pods(ns).Get(e.ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has no claim: %+v", pod, p.Status.ResourceClaimStatuses)
	}
	c, err := e.client.ResourceV1().ResourceClaims(ns).Get(e.ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Status.Allocation.Devices.Results[0].Device
}

func (e *env) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := framework.DeletePod(e.ctx, e.client, ns, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// stayPending asserts that a pod is not scheduled for a while.
func (e *env) stayPending(t *testing.T, name string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		p, err := e.client.CoreV1().Pods(ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" || p.Status.Phase == corev1.PodRunning {
			t.Fatalf("pod %s was scheduled to %s while it should stay pending", name, p.Spec.NodeName)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func devicePaths(rec fakecri.ContainerRecord) []string {
	var out []string
	for _, d := range rec.Devices {
		out = append(out, d.Path)
	}
	return out
}

// capsNodes are the /dev/nvidia-caps nodes a container got. The runtime creates each from the
// CDI spec alone (the mock's /dev has none), so each must carry the mock driver's numbers and
// mode.
func capsNodes(t *testing.T, rec fakecri.ContainerRecord) []string {
	t.Helper()
	var out []string
	for _, d := range rec.Devices {
		if !strings.HasPrefix(d.Path, "/dev/nvidia-caps/") {
			continue
		}
		if d.Path != fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", d.Minor) || d.Type != "c" || d.Major != nvmlmock.CapsMajor || d.FileMode != 0o444 {
			t.Errorf("container %s/%s: caps node %+v, want type c, major %d, the minor of its name and mode 0444", rec.PodName, rec.ContainerName, d, nvmlmock.CapsMajor)
		}
		out = append(out, d.Path)
	}
	return out
}

func deviceAttr(t *testing.T, sl []resourceapi.ResourceSlice, device, attr string) string {
	t.Helper()
	for _, s := range sl {
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				if a, ok := d.Attributes[resourceapi.QualifiedName(attr)]; ok && a.StringValue != nil {
					return *a.StringValue
				}
				t.Fatalf("device %s has no string attribute %s", device, attr)
			}
		}
	}
	t.Fatalf("no device %s", device)
	return ""
}

// mockInstances reads the mock's MIG instances from its state file.
func mockInstances(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, nvmlmock.StateFileName))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		GPUs map[string]struct {
			GIs []struct {
				ID, ProfileIndex int
				Start            int
				CIs              []struct{ UUID string }
			} `json:"gis"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	var out []string
	for gpu, g := range st.GPUs {
		for _, gi := range g.GIs {
			e := fmt.Sprintf("gpu%s/gi%d@%d", gpu, gi.ID, gi.Start)
			for _, ci := range gi.CIs {
				e += "/" + ci.UUID
			}
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return out
}

func TestMIG(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{})
	e := &env{ctx: ctx, client: c.Client()}
	for _, dc := range classes() {
		if _, err := e.client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	staticNode, err := c.AddNode(ctx, cluster.NodeOptions{Name: "static-node"})
	if err != nil {
		t.Fatal(err)
	}
	dynNode, err := c.AddNode(ctx, cluster.NodeOptions{Name: "dynamic-node"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.StartPlugin(ctx, c, staticNode, framework.PluginOptions{Backend: "mock", Profile: "mig-mixed"}); err != nil {
		t.Fatal(err)
	}
	dynPlugin, err := framework.StartPlugin(ctx, c, dynNode, framework.PluginOptions{Backend: "mock", Profile: "mig-mixed", ExtraArgs: []string{"--dynamic-mig"}})
	if err != nil {
		t.Fatal(err)
	}
	mockDir := filepath.Join(dynNode.PluginDataDir(driver), "mock")

	t.Run("StaticMIGDevicesRunPods", func(t *testing.T) {
		// gpu-0's four operator-made MIG devices and the two whole GPUs (gpu-3 not in MIG mode,
		// gpu-4 without MIG).
		sl, err := framework.WaitForSlices(ctx, e.client, driver, staticNode.Name, 6)
		if err != nil {
			t.Fatal(err)
		}
		rec, dev := e.runPod(t, staticNode, "static-2g", migClass, fmt.Sprintf("device.attributes[%q].profile == \"2g.10gb\"", driver))
		if dev != "gpu-0-mig-2g10gb-0" {
			t.Errorf("allocated %s", dev)
		}
		if caps := capsNodes(t, rec); len(caps) != 2 || !slices.Contains(devicePaths(rec), "/dev/nvidia0") {
			t.Errorf("container devices %v, want /dev/nvidia0 and the GI and CI caps nodes", devicePaths(rec))
		}
		if uuid := deviceAttr(t, sl, dev, "uuid"); !strings.HasPrefix(uuid, "MIG-") {
			t.Errorf("static MIG device UUID %q", uuid)
		}
		// A whole-GPU claim gets a GPU that is not in MIG mode, never a MIG-mode one.
		_, whole := e.runPod(t, staticNode, "static-whole", driver)
		if whole != "gpu-3" && whole != "gpu-4" {
			t.Errorf("whole GPU claim got %s", whole)
		}
	})

	t.Run("DynamicPartitionsShareAGPU", func(t *testing.T) {
		// 26 devices on each of the three MIG-mode GPUs, and gpu-3 and gpu-4.
		sl, err := framework.WaitForSlices(ctx, e.client, driver, dynNode.Name, 80)
		if err != nil {
			t.Fatal(err)
		}
		if got := mockInstances(t, mockDir); len(got) != 0 {
			t.Fatalf("operator-made instances %v not destroyed at start in dynamic mode", got)
		}
		parent := deviceAttr(t, sl, "gpu-1", "uuid")
		onGPU1 := fmt.Sprintf("device.attributes[%q].parentUUID == %q", driver, parent)
		rec1, d1 := e.runPod(t, dynNode, "mig-1g", migClass, onGPU1, fmt.Sprintf("device.attributes[%q].profile == \"1g.5gb\"", driver))
		rec3, d3 := e.runPod(t, dynNode, "mig-3g", migClass, onGPU1, fmt.Sprintf("device.attributes[%q].profile == \"3g.20gb\"", driver))
		t.Logf("1g partition %s, 3g partition %s", d1, d3)
		for _, rec := range []fakecri.ContainerRecord{rec1, rec3} {
			if caps := capsNodes(t, rec); len(caps) != 2 || !slices.Contains(devicePaths(rec), "/dev/nvidia1") {
				t.Errorf("container devices %v, want /dev/nvidia1 and two caps nodes", devicePaths(rec))
			}
		}
		if slices.Equal(capsNodes(t, rec1), capsNodes(t, rec3)) {
			t.Error("two partitions got the same caps nodes")
		}
		if got := mockInstances(t, mockDir); len(got) != 2 {
			t.Errorf("MIG instances %v, want the two pods'", got)
		}

		// A claim for a GPU never gets one in MIG mode, which CUDA cannot use whole: on this
		// node only the H100 gpu-3 and the L4 gpu-4 are GPUs; the A100s are all in MIG mode.
		e.createPod(t, dynNode.Name, "gpu-a100", driver, fmt.Sprintf("device.attributes[%q].productName.startsWith(\"NVIDIA A100\")", driver))
		e.stayPending(t, "gpu-a100", 15*time.Second)
		e.deletePod(t, "gpu-a100")

		// The whole of gpu-1 (type mig-parent) consumes every counter: pending while a
		// partition is allocated.
		e.createPod(t, dynNode.Name, "whole-gpu1", parentClass, fmt.Sprintf("device.attributes[%q].uuid == %q", driver, parent))
		e.stayPending(t, "whole-gpu1", 15*time.Second)
		e.deletePod(t, "mig-1g")
		e.stayPending(t, "whole-gpu1", 5*time.Second)
		e.deletePod(t, "mig-3g")
		if _, err := framework.WaitForPodRunning(ctx, e.client, ns, "whole-gpu1", podWait); err != nil {
			t.Fatal(err)
		}
		if got := mockInstances(t, mockDir); len(got) != 0 {
			t.Errorf("MIG instances %v left after their pods were deleted", got)
		}
		e.deletePod(t, "whole-gpu1")
	})

	t.Run("KillBetweenCreateAndRecord", func(t *testing.T) {
		// The mock kills the plugin with SIGKILL right after NVML created the compute instance,
		// before the checkpoint records it, let alone PrepareCompleted.
		if err := os.WriteFile(filepath.Join(mockDir, nvmlmock.CrashFileName), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		e.createPod(t, dynNode.Name, "after-kill", migClass, fmt.Sprintf("device.attributes[%q].profile == \"2g.20gb\"", driver))
		select {
		case <-dynPlugin.Process().Done():
		case <-time.After(2 * time.Minute):
			t.Fatal("plugin was not killed during prepare")
		}
		if got := mockInstances(t, mockDir); len(got) != 1 {
			t.Fatalf("at the kill, instances %v, want the one just created", got)
		}
		leaked := mockInstances(t, mockDir)[0]
		if err := dynPlugin.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := framework.WaitForPodRunning(ctx, e.client, ns, "after-kill", podWait); err != nil {
			t.Fatal(err)
		}
		got := mockInstances(t, mockDir)
		if len(got) != 1 {
			t.Fatalf("instances %v after restart and retry, want exactly the pod's", got)
		}
		if got[0] == leaked {
			t.Errorf("the instance of the killed attempt %s was kept instead of destroyed and made again", leaked)
		}
		e.deletePod(t, "after-kill")
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return len(mockInstances(t, mockDir)) == 0, nil
		}); err != nil {
			t.Errorf("instances %v after the pod was deleted", mockInstances(t, mockDir))
		}
	})

	// The real publisher mirrors the dynamic-MIG node's slices (counter sets and partitions)
	// onto its Cluster API MachineDeployment; accelctl simulate on those annotations gives the
	// verdicts the real scheduler gives on the real node, for MIG claims whose fit depends on
	// the counters.
	t.Run("TemplateAgreesWithRealNode", func(t *testing.T) {
		cl, err := framework.NewCAPIClient(c.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		if err := framework.InstallClusterAPI(ctx, c.RESTConfig(), cl); err != nil {
			t.Fatal(err)
		}
		g, err := framework.CreateNodeGroup(ctx, cl, "mig", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.AddMachine(ctx, cl, "mig-m0", dynNode.Name, true); err != nil {
			t.Fatal(err)
		}
		pub, err := framework.StartPublisher(ctx, c, "--leader-election-namespace=default")
		if err != nil {
			t.Fatal(err)
		}
		var ann map[string]string
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			md := &clusterv1.MachineDeployment{}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: framework.CAPINamespace, Name: "mig"}, md); err != nil {
				return false, nil
			}
			ann = md.Annotations
			return ann[template.HashAnnotation] != "", nil
		}); err != nil {
			t.Fatalf("no template on MachineDeployment mig: %v\n%s", err, pub.Proc.LogTail(30))
		}
		size := 0
		for k, v := range ann {
			size += len(k) + len(v)
		}
		t.Logf("MachineDeployment annotations of the dynamic-MIG group: %d bytes", size)
		decoded, err := template.Decode(ann)
		if err != nil {
			t.Fatal(err)
		}
		counterSets := 0
		for _, d := range decoded.Drivers {
			counterSets += len(d.SharedCounters)
		}
		if counterSets != 3 {
			t.Fatalf("the published template has %d counter sets, want one per GPU in MIG mode (3)", counterSets)
		}
		// Cluster API's infrastructure templates normally give cpu and memory; this harness has
		// none, so the node's capacity is added as the publisher's capacity keys would carry it.
		if _, ok := ann[nodegroup.CPUKey]; !ok {
			node, err := e.client.CoreV1().Nodes().Get(ctx, dynNode.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ann = maps.Clone(ann)
			maps.Copy(ann, nodegroup.Capacity([]*corev1.Node{node}))
		}
		fitting := 0
		for _, s := range migShapes {
			real := e.realFits(t, dynNode.Name, s)
			claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name}, Spec: s.claimSpec()}
			rep, err := accelctl.Simulate(ctx, accelctl.SimulateInput{Group: "mig", Annotations: ann, Classes: classes(), Claims: []*resourceapi.ResourceClaim{claim}})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Template.Fits != real {
				t.Errorf("%s: simulate on the template says fits=%v (%s), the real node says %v", s.name, rep.Template.Fits, rep.Template.Reason, real)
			}
			if real {
				fitting++
			}
			t.Logf("%-22s real node: %-5v template: %v", s.name, real, rep.Template.Fits)
		}
		if fitting == 0 || fitting == len(migShapes) {
			t.Errorf("%d of %d shapes fit; the shapes should include both", fitting, len(migShapes))
		}
	})
}

// shape is a MIG claim: requests of profiles, optionally all on one GPU.
type shape struct {
	name     string
	requests []shapeRequest
	sameGPU  bool
}

type shapeRequest struct {
	profile string
	count   int64
}

func (s shape) claimSpec() resourceapi.ResourceClaimSpec {
	var spec resourceapi.DeviceClaim
	var names []string
	for i, r := range s.requests {
		name := fmt.Sprintf("r%d", i)
		names = append(names, name)
		spec.Requests = append(spec.Requests, resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: migClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: r.count,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.attributes[%q].profile == %q", driver, r.profile)}}},
		}})
	}
	if s.sameGPU {
		spec.Constraints = []resourceapi.DeviceConstraint{{Requests: names, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(driver + "/parentUUID"))}}
	}
	return resourceapi.ResourceClaimSpec{Devices: spec}
}

// migShapes are claims whose fit on the mixed node depends on the MIG model: placements,
// memory slices, the one OFA engine, per-GPU constraints. The node has two A100s and one H100
// in MIG mode.
var migShapes = []shape{
	{name: "one-1g5gb", requests: []shapeRequest{{"1g.5gb", 1}}},
	{name: "seven-1g5gb-one-gpu", requests: []shapeRequest{{"1g.5gb", 7}}, sameGPU: true},
	{name: "eight-1g5gb-one-gpu", requests: []shapeRequest{{"1g.5gb", 8}}, sameGPU: true},
	{name: "eight-1g5gb-two-gpus", requests: []shapeRequest{{"1g.5gb", 8}}},
	{name: "two-3g20gb-one-gpu", requests: []shapeRequest{{"3g.20gb", 2}}, sameGPU: true},
	{name: "two-4g20gb-one-gpu", requests: []shapeRequest{{"4g.20gb", 2}}, sameGPU: true},
	{name: "4g-and-3g-one-gpu", requests: []shapeRequest{{"4g.20gb", 1}, {"3g.20gb", 1}}, sameGPU: true},
	{name: "7g-and-1g-one-gpu", requests: []shapeRequest{{"7g.40gb", 1}, {"1g.5gb", 1}}, sameGPU: true},
	{name: "two-me-one-gpu", requests: []shapeRequest{{"1g.5gb+me", 2}}, sameGPU: true},
	{name: "me-and-7g-one-gpu", requests: []shapeRequest{{"1g.5gb+me", 1}, {"7g.40gb", 1}}, sameGPU: true},
	{name: "four-1g20gb-h100", requests: []shapeRequest{{"1g.20gb", 4}}, sameGPU: true},
	{name: "five-1g20gb-h100", requests: []shapeRequest{{"1g.20gb", 5}}, sameGPU: true},
	{name: "three-7g-a100", requests: []shapeRequest{{"7g.40gb", 3}}},
}

// realFits runs a pod with the shape's claim on node and reports whether the real scheduler
// (and kubelet, and plugin) got it running, or found it unschedulable; the pod is deleted after.
func (e *env) realFits(t *testing.T, node string, s shape) bool {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: s.claimSpec()}}
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "acc", ResourceClaimTemplateName: &tmpl.Name}},
			Containers: []corev1.Container{{Name: "ctr", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "acc"}}}}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var fits bool
	if err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, podWait, true, func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, s.name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Status.Phase == corev1.PodRunning {
			fits = true
			return true, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("pod %s neither ran nor was found unschedulable: %v\n%s", s.name, err, framework.DescribePod(e.ctx, e.client, ns, s.name))
	}
	e.deletePod(t, s.name)
	return fits
}
