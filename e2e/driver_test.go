//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/fakecri"
	"github.com/accel-dra/accel-dra/e2e/framework"
)

const (
	gpuClass = framework.GPUDriver
	npuClass = framework.NPUDriver
	podWait  = 3 * time.Minute
)

// driverEnv is one cluster with a mock 8x H100 node and a mock 8x Ascend 910B node, each with
// a real kubelet, a fake CRI and the real plugin binary, shared by the node-driver scenarios.
type driverEnv struct {
	t         *testing.T
	ctx       context.Context
	c         *cluster.Cluster
	client    kubernetes.Interface
	gpuNode   *cluster.Node
	npuNode   *cluster.Node
	gpuPlugin *framework.Plugin
	npuPlugin *framework.Plugin
	ns        string
}

// TestNodeDriver runs the node driver's scenarios in order on one cluster: they build on each
// other's state (pods still running are what the crash scenario restarts under).
func TestNodeDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	c := cluster.StartForTest(t, cluster.Options{})
	e := &driverEnv{t: t, ctx: ctx, c: c, client: c.Client(), ns: "default"}
	var err error
	if err := framework.EnsureDeviceClasses(ctx, e.client); err != nil {
		t.Fatal(err)
	}
	if e.gpuNode, err = c.AddNode(ctx, cluster.NodeOptions{Name: "gpu-node"}); err != nil {
		t.Fatal(err)
	}
	if e.npuNode, err = c.AddNode(ctx, cluster.NodeOptions{Name: "npu-node"}); err != nil {
		t.Fatal(err)
	}
	if e.gpuPlugin, err = framework.StartPlugin(ctx, c, e.gpuNode, framework.PluginOptions{Backend: "mock", Profile: "h100-8x-2numa"}); err != nil {
		t.Fatal(err)
	}
	if e.npuPlugin, err = framework.StartPlugin(ctx, c, e.npuNode, framework.PluginOptions{Backend: "npu-mock", Profile: "ascend910b-8x"}); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster, two nodes and two plugins ready after %s", time.Since(start).Round(time.Second))

	for _, s := range []struct {
		name string
		fn   func(*driverEnv, *testing.T)
	}{
		{"PublishesDocumentedSlices", (*driverEnv).testSlices},
		{"PodsGetDevices", (*driverEnv).testPods},
		{"DeleteReleasesDevice", (*driverEnv).testDeleteReleases},
		{"CrashRestartKeepsState", (*driverEnv).testCrashRestart},
		{"BadInputReachesUser", (*driverEnv).testBadInput},
	} {
		if !t.Run(s.name, func(t *testing.T) { s.fn(e, t) }) {
			// Later scenarios rely on earlier state; stop at the first failure.
			return
		}
	}
}

func (e *driverEnv) testSlices(t *testing.T) {
	gpuSlices, err := framework.WaitForSlices(e.ctx, e.client, gpuClass, "gpu-node", 8)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("gpu-%d", i)
		attrs, capacity, err := deviceAttrs(gpuSlices, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []resourceapi.QualifiedName{"type", "uuid", "productName", "architecture", "index", "driverVersion", "cudaComputeCapability",
			"resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode"} {
			if _, ok := attrs[a]; !ok {
				t.Errorf("%s lacks attribute %s", name, a)
			}
		}
		if got := *attrs["productName"].StringValue; got != "NVIDIA H100 80GB HBM3" {
			t.Errorf("%s productName %q", name, got)
		}
		if got := *attrs["resource.kubernetes.io/numaNode"].IntValue; got != int64(i/4) {
			t.Errorf("%s numaNode %d, want %d", name, got, i/4)
		}
		if got := *attrs["driverVersion"].VersionValue; got != "570.124.6" {
			t.Errorf("%s driverVersion %q", name, got)
		}
		if got := *attrs["cudaComputeCapability"].VersionValue; got != "9.0.0" {
			t.Errorf("%s cudaComputeCapability %q", name, got)
		}
		if m := capacity["memory"].Value; m.String() != "80Gi" {
			t.Errorf("%s memory %s", name, m.String())
		}
	}
	npuSlices, err := framework.WaitForSlices(e.ctx, e.client, npuClass, "npu-node", 8)
	if err != nil {
		t.Fatal(err)
	}
	attrs, capacity, err := deviceAttrs(npuSlices, "npu-5")
	if err != nil {
		t.Fatal(err)
	}
	if *attrs["type"].StringValue != "npu" || *attrs["productName"].StringValue != "Ascend 910B" || *attrs["resource.kubernetes.io/numaNode"].IntValue != 1 {
		t.Errorf("npu-5 attributes %v", attrs)
	}
	if m := capacity["memory"].Value; m.String() != "64Gi" {
		t.Errorf("npu-5 memory %s", m.String())
	}
}

// allocated returns the devices allocated to a pod's claim, sorted.
func (e *driverEnv) allocated(t *testing.T, podName string) (*resourceapi.ResourceClaim, []string) {
	t.Helper()
	pod, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, podName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has no generated claim: %+v", podName, pod.Status.ResourceClaimStatuses)
	}
	claim, err := e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		devs = append(devs, r.Device)
	}
	sort.Strings(devs)
	return claim, devs
}

// runPod creates a template and a pod that uses it, waits for it to run and returns what the
// runtime gave its container.
func (e *driverEnv) runPod(t *testing.T, node *cluster.Node, tmpl *resourceapi.ResourceClaimTemplate, podName string) fakecri.ContainerRecord {
	t.Helper()
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, podWithTemplate(e.ns, podName, tmpl.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForPodRunning(e.ctx, e.client, e.ns, podName, podWait); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	rec, err := node.CRI.WaitForContainer(ctx, e.ns, podName, "ctr")
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

func devicePaths(rec fakecri.ContainerRecord) []string {
	var out []string
	for _, d := range rec.Devices {
		out = append(out, d.Path)
	}
	sort.Strings(out)
	return out
}

// checkGPUContainer asserts a container got exactly the allocated GPUs: their device nodes,
// the control nodes, and NVIDIA_VISIBLE_DEVICES=void.
func (e *driverEnv) checkGPUContainer(t *testing.T, rec fakecri.ContainerRecord, devs []string) {
	t.Helper()
	rs, err := framework.WaitForSlices(e.ctx, e.client, gpuClass, "gpu-node", 8)
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	want := []string{"/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"}
	for _, d := range devs {
		attrs, _, err := deviceAttrs(rs, d)
		if err != nil {
			t.Fatal(err)
		}
		uuids = append(uuids, *attrs["uuid"].StringValue)
		want = append(want, "/dev/nvidia"+strings.TrimPrefix(d, "gpu-"))
	}
	sort.Strings(want)
	if got := devicePaths(rec); !slices.Equal(got, want) {
		t.Errorf("container device nodes %v, want %v", got, want)
	}
	// On the CDI path the devices reach the container as nodes only; the variable is "void" as
	// in NVIDIA's own CDI specs, so that a legacy NVIDIA hook injects nothing more.
	if got := envValue(rec.Env, "NVIDIA_VISIBLE_DEVICES"); got != "void" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want void", got)
	}
	if len(uuids) != len(devs) {
		t.Errorf("UUIDs %v of devices %v", uuids, devs)
	}
}

func (e *driverEnv) testPods(t *testing.T) {
	t.Run("OneGPU", func(t *testing.T) {
		rec := e.runPod(t, e.gpuNode, claimTemplate(e.ns, "one-gpu", gpuClass, 1, nil, "", ""), "one-gpu")
		_, devs := e.allocated(t, "one-gpu")
		if len(devs) != 1 {
			t.Fatalf("allocated %v", devs)
		}
		e.checkGPUContainer(t, rec, devs)
		if got := envValue(rec.Env, "NVIDIA_DRIVER_CAPABILITIES"); got != "compute,utility" {
			t.Errorf("NVIDIA_DRIVER_CAPABILITIES %q", got)
		}
	})
	t.Run("TwoGPUsSameNUMA", func(t *testing.T) {
		rec := e.runPod(t, e.gpuNode, claimTemplate(e.ns, "two-gpu-numa", gpuClass, 2, nil, "resource.kubernetes.io/numaNode", ""), "two-gpu-numa")
		_, devs := e.allocated(t, "two-gpu-numa")
		if len(devs) != 2 {
			t.Fatalf("allocated %v", devs)
		}
		numa := func(d string) int { var i int; fmt.Sscanf(d, "gpu-%d", &i); return i / 4 }
		if numa(devs[0]) != numa(devs[1]) {
			t.Errorf("devices %v are on different NUMA nodes", devs)
		}
		e.checkGPUContainer(t, rec, devs)
	})
	t.Run("CELProductAndMemory", func(t *testing.T) {
		sel := `device.attributes["gpu.accel-dra.io"].productName == "NVIDIA H100 80GB HBM3" && device.capacity["gpu.accel-dra.io"].memory.compareTo(quantity("80Gi")) >= 0`
		tmpl := claimTemplate(e.ns, "cel-gpu", gpuClass, 1, []string{sel}, "", `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilities":["compute","video"]}`)
		rec := e.runPod(t, e.gpuNode, tmpl, "cel-gpu")
		_, devs := e.allocated(t, "cel-gpu")
		e.checkGPUContainer(t, rec, devs)
		if got := envValue(rec.Env, "NVIDIA_DRIVER_CAPABILITIES"); got != "compute,video" {
			t.Errorf("claim config not applied: NVIDIA_DRIVER_CAPABILITIES %q", got)
		}
	})
	t.Run("CELThatCannotMatchStaysPending", func(t *testing.T) {
		sel := `device.capacity["gpu.accel-dra.io"].memory.compareTo(quantity("100Gi")) >= 0`
		tmpl := claimTemplate(e.ns, "too-big", gpuClass, 1, []string{sel}, "", "")
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, podWithTemplate(e.ns, "too-big", "too-big"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := framework.WaitForPodEvent(e.ctx, e.client, e.ns, "too-big", podWait, "cannot allocate all claims"); err != nil {
			t.Fatal(err)
		}
		if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, "too-big", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("NPU", func(t *testing.T) {
		rec := e.runPod(t, e.npuNode, claimTemplate(e.ns, "one-npu", npuClass, 1, nil, "", ""), "one-npu")
		_, devs := e.allocated(t, "one-npu")
		if len(devs) != 1 {
			t.Fatalf("allocated %v", devs)
		}
		idx := strings.TrimPrefix(devs[0], "npu-")
		want := []string{"/dev/davinci" + idx, "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"}
		sort.Strings(want)
		if got := devicePaths(rec); !slices.Equal(got, want) {
			t.Errorf("container device nodes %v, want %v", got, want)
		}
		if got := envValue(rec.Env, "ASCEND_VISIBLE_DEVICES"); got != idx {
			t.Errorf("ASCEND_VISIBLE_DEVICES %q, want %q", got, idx)
		}
	})
}

func (e *driverEnv) specPath(p *framework.Plugin, claimUID string) string {
	kind := strings.Split(p.Driver, ".")[0]
	return filepath.Join(p.CDIDir, "accel-dra.io-"+kind+"_"+claimUID+".json")
}

func (e *driverEnv) testDeleteReleases(t *testing.T) {
	sel := `device.attributes["gpu.accel-dra.io"].index == 7`
	tmpl := claimTemplate(e.ns, "gpu-seven", gpuClass, 1, []string{sel}, "", "")
	e.runPod(t, e.gpuNode, tmpl, "seven-a")
	claimA, _ := e.allocated(t, "seven-a")
	spec := e.specPath(e.gpuPlugin, string(claimA.UID))
	if _, err := os.Stat(spec); err != nil {
		t.Fatalf("CDI spec of the running pod's claim: %v", err)
	}
	if _, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, podWithTemplate(e.ns, "seven-b", "gpu-seven"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForPodEvent(e.ctx, e.client, e.ns, "seven-b", podWait, "cannot allocate all claims"); err != nil {
		t.Fatal(err)
	}
	if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, "seven-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, podWait, true, func(context.Context) (bool, error) {
		_, err := os.Stat(spec)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Fatalf("CDI spec %s still there after the pod was deleted (NodeUnprepareResources not called?)", spec)
	}
	if _, err := framework.WaitForPodRunning(e.ctx, e.client, e.ns, "seven-b", podWait); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	rec, err := e.gpuNode.CRI.WaitForContainer(ctx, e.ns, "seven-b", "ctr")
	if err != nil {
		t.Fatal(err)
	}
	e.checkGPUContainer(t, rec, []string{"gpu-7"})
}

// readSpecs returns the plugin's CDI specs by file name.
func readSpecs(t *testing.T, p *framework.Plugin) map[string]string {
	t.Helper()
	names, err := p.CDISpecs()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(p.CDIDir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = string(b)
	}
	return out
}

// readRecords returns the plugin's checkpoint records by file name.
func readRecords(t *testing.T, p *framework.Plugin) map[string]string {
	t.Helper()
	dir := filepath.Join(p.Node.PluginDataDir(p.Driver), "checkpoint")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ent := range entries {
		if !strings.HasSuffix(ent.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[ent.Name()] = string(b)
	}
	return out
}

func (e *driverEnv) testCrashRestart(t *testing.T) {
	before := readSpecs(t, e.gpuPlugin)
	// one-gpu, two-gpu-numa, cel-gpu, seven-b hold GPUs.
	if len(before) != 4 {
		t.Fatalf("%d GPU specs before the crash, want 4: %v", len(before), keys(before))
	}
	prepared, err := e.gpuPlugin.Metric("accel_dra_prepared_claims")
	if err != nil || prepared != 4 {
		t.Fatalf("prepared claims before crash: %v, %v", prepared, err)
	}

	// Nothing is fsynced (docs/node-plugin.md, Durability): a crash of the process must lose
	// nothing anyway, because the page cache outlives it.
	recordsBefore := readRecords(t, e.gpuPlugin)
	if len(recordsBefore) != 4 {
		t.Fatalf("%d checkpoint records before the crash, want 4: %v", len(recordsBefore), keys(recordsBefore))
	}
	e.gpuPlugin.Kill()
	if err := e.gpuPlugin.Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	if after := readSpecs(t, e.gpuPlugin); !equalMaps(before, after) {
		t.Fatalf("CDI specs changed across a crash: before %v after %v", keys(before), keys(after))
	}
	if after := readRecords(t, e.gpuPlugin); !equalMaps(recordsBefore, after) {
		t.Fatalf("checkpoint records changed across a crash: before %v after %v", keys(recordsBefore), keys(after))
	}
	if prepared, err := e.gpuPlugin.Metric("accel_dra_prepared_claims"); err != nil || prepared != 4 {
		t.Fatalf("prepared claims after restart: %v, %v", prepared, err)
	}
	// Two more GPUs fit; each must be one no running pod holds.
	inUse := map[string]bool{}
	for _, p := range []string{"one-gpu", "two-gpu-numa", "cel-gpu", "seven-b"} {
		_, devs := e.allocated(t, p)
		for _, d := range devs {
			inUse[d] = true
		}
	}
	rec := e.runPod(t, e.gpuNode, claimTemplate(e.ns, "after-crash", gpuClass, 1, nil, "", ""), "after-crash")
	_, devs := e.allocated(t, "after-crash")
	if inUse[devs[0]] {
		t.Fatalf("device %s given to a second pod after the plugin restarted", devs[0])
	}
	e.checkGPUContainer(t, rec, devs)

	// The CDI dir is tmpfs on real nodes: wipe it and restart; the specs come back.
	before = readSpecs(t, e.gpuPlugin)
	for n := range before {
		if err := os.Remove(filepath.Join(e.gpuPlugin.CDIDir, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.gpuPlugin.Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	if after := readSpecs(t, e.gpuPlugin); !equalMaps(before, after) {
		t.Fatalf("CDI specs not re-created after wiping the CDI dir: before %v after %v", keys(before), keys(after))
	}
}

func (e *driverEnv) testBadInput(t *testing.T) {
	t.Run("InvalidOpaqueConfig", func(t *testing.T) {
		tmpl := claimTemplate(e.ns, "bad-config", gpuClass, 1, nil, "", `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilities":["gpus"]}`)
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, podWithTemplate(e.ns, "bad-config", "bad-config"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ev, err := framework.WaitForPodEvent(e.ctx, e.client, e.ns, "bad-config", podWait, "driverCapabilities[0]", `"gpus"`)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("event the user sees: %s: %s", ev.Reason, ev.Message)
		pod, _ := e.client.CoreV1().Pods(e.ns).Get(e.ctx, "bad-config", metav1.GetOptions{})
		if pod.Status.Phase == corev1.PodRunning {
			t.Fatal("pod with an invalid claim config is running")
		}
		for _, r := range e.gpuNode.CRI.Containers() {
			if r.PodName == "bad-config" {
				t.Fatal("the runtime created a container for a pod whose claim failed to prepare")
			}
		}
		_ = e.client.CoreV1().Pods(e.ns).Delete(e.ctx, "bad-config", metav1.DeleteOptions{})
	})
	t.Run("DeviceNotOnNode", func(t *testing.T) {
		// An allocation naming a device this node does not have, as a stale scheduler cache or a
		// hand-edited claim would produce.
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "ghost"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			}}}},
		}
		claim, err := e.client.ResourceV1().ResourceClaims(e.ns).Create(e.ctx, claim, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod := podWithTemplate(e.ns, "ghost", "unused")
		pod.Spec.ResourceClaims[0] = corev1.PodResourceClaim{Name: "acc", ResourceClaimName: ptr.To("ghost")}
		pod.Spec.NodeName = "gpu-node"
		pod, err = e.client.CoreV1().Pods(e.ns).Create(e.ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "dev", Driver: gpuClass, Pool: "gpu-node", Device: "gpu-12",
		}}}}
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		if _, err := e.client.ResourceV1().ResourceClaims(e.ns).UpdateStatus(e.ctx, claim, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		ev, err := framework.WaitForPodEvent(e.ctx, e.client, e.ns, "ghost", podWait, "gpu-12", "not on node gpu-node")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("event the user sees: %s: %s", ev.Reason, ev.Message)
	})
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
