//go:build e2e

// Package compat checks the NVIDIA compatibility mode end to end on real kubelets
// (docs/migrate-from-nvidia.md): workloads written for NVIDIA's DRA driver, with its class
// names, CEL selectors on its attribute names, its opaque configuration and tolerations of its
// taint keys, and pods asking for nvidia.com/gpu, run unchanged on accel-dra's plugin started
// with the chart's arguments and --nvidia-compat.
//
//	go test -tags e2e -run TestNVIDIAWorkloads ./e2e/compat/
package compat

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/accel-dra/accel-dra/deployments/helm"
	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/fakecri"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

const (
	nodeName = "nvidia-node"
	ns       = metav1.NamespaceDefault
	driver   = "gpu.nvidia.com"
)

type env struct {
	ctx    context.Context
	node   *cluster.Node
	client kubernetes.Interface
	plugin *framework.Plugin
	mps    sharing.MPS
	// devices are the published devices by name.
	devices map[string]resourceapi.Device
}

// TestNVIDIAWorkloads runs, one after the other, the shapes of workload NVIDIA's driver
// documents, each written as its users write it, on the mig-mixed mock (gpu-0 an A100 with four
// MIG devices, gpu-3 an H100, gpu-4 an L4), and checks what each container got.
func TestNVIDIAWorkloads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	smi := standin.Build(t, standin.MockTools, "nvidia-smi")
	ctl := standin.Build(t, standin.MockTools, "nvidia-cuda-mps-control")
	c := cluster.StartForTest(t, cluster.Options{})
	e := &env{ctx: ctx, client: c.Client(), devices: map[string]resourceapi.Device{}}
	createCompatClasses(ctx, t, e.client)
	var err error
	if e.node, err = c.AddNode(ctx, cluster.NodeOptions{Name: nodeName}); err != nil {
		t.Fatal(err)
	}
	self, err := framework.Binary("accel-dra-kubelet-plugin")
	if err != nil {
		t.Fatal(err)
	}
	e.mps = sharing.MPS{Root: filepath.Join(e.node.PluginDataDir(driver), "mps"),
		Daemons: sharing.Processes{Control: sharing.MPSControl{Path: ctl}, Self: self}}
	cleanupMPS(t, e.mps)
	if e.plugin, err = framework.StartPlugin(ctx, c, e.node, framework.PluginOptions{Backend: "mock", Profile: "mig-mixed", Driver: driver,
		ExtraArgs: []string{"--nvidia-compat", "--nvidia-smi-path=" + smi, "--nvidia-mps-control-path=" + ctl}}); err != nil {
		t.Fatal(err)
	}
	sl, err := framework.WaitForSlices(ctx, e.client, driver, nodeName, 6)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sl {
		for _, d := range s.Spec.Devices {
			e.devices[d.Name] = d
		}
	}

	t.Run("SlicesCarryNVIDIAAttributes", e.testAttributes)
	t.Run("TimeSlicedGPUSharedByTwoContainers", func(t *testing.T) { e.testTimeSlicing(t, smi) })
	t.Run("MPS", e.testMPS)
	t.Run("MIGDevice", e.testMIG)
	t.Run("ExtendedResource", e.testExtendedResource)
	t.Run("BadConfigRefused", e.testBadConfig)
	t.Run("TolerationOfNVIDIATaint", e.testTaints)
}

// createCompatClasses creates the DeviceClasses the chart renders with drivers.gpu.compat.nvidia.
func createCompatClasses(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	r, err := helm.Render(helm.Options{Values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{
		"nvidiaDevicePluginDisabled": true, "compat": map[string]any{"nvidia": true},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range r.OfKind("DeviceClass") {
		dc := &resourceapi.DeviceClass{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dc); err != nil {
			t.Fatal(err)
		}
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, dc.Name)
	}
	slices.Sort(names)
	if want := []string{"gpu.nvidia.com", "mig.nvidia.com"}; !slices.Equal(names, want) {
		t.Fatalf("the chart's compatibility mode renders classes %v, want %v", names, want)
	}
}

func (e *env) testAttributes(t *testing.T) {
	want := map[string]string{
		"gpu-3":             "type=gpu productName=NVIDIA H100 80GB HBM3 architecture=Hopper brand=Nvidia cudaDriverVersion=12.8.0",
		"gpu-4":             "type=gpu productName=NVIDIA L4 architecture=Ada Lovelace brand=Nvidia cudaDriverVersion=12.8.0",
		"gpu-0-mig-1g5gb-2": "type=mig productName=NVIDIA A100-SXM4-40GB architecture=Ampere brand=Nvidia cudaDriverVersion=12.8.0",
	}
	for dev, w := range want {
		d, ok := e.devices[dev]
		if !ok {
			t.Errorf("no device %s in the slices of %s", dev, driver)
			continue
		}
		var got []string
		for _, a := range []resourceapi.QualifiedName{"type", "productName", "architecture", "brand", "cudaDriverVersion"} {
			v := d.Attributes[a]
			switch {
			case v.StringValue != nil:
				got = append(got, fmt.Sprintf("%s=%s", a, *v.StringValue))
			case v.VersionValue != nil:
				got = append(got, fmt.Sprintf("%s=%s", a, *v.VersionValue))
			}
		}
		if g := strings.Join(got, " "); g != w {
			t.Errorf("%s: %s\nwant %s", dev, g, w)
		}
	}
}

// testTimeSlicing: NVIDIA's time-slicing example, a claim template with a GpuConfig of strategy
// TimeSlicing and one pod whose two containers share the GPU.
func (e *env) testTimeSlicing(t *testing.T, smi string) {
	e.apply(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: hopper-timesliced
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: device.attributes['gpu.nvidia.com'].architecture == 'Hopper'
      config:
      - requests: ["gpu"]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: TimeSlicing
              timeSlicingConfig:
                interval: Long
---
apiVersion: v1
kind: Pod
metadata:
  name: ts-pod
spec:
  nodeSelector:
    kubernetes.io/hostname: nvidia-node
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr0
    image: registry.k8s.io/pause:3.10
    resources:
      claims:
      - name: shared-gpu
  - name: ctr1
    image: registry.k8s.io/pause:3.10
    resources:
      claims:
      - name: shared-gpu
  resourceClaims:
  - name: shared-gpu
    resourceClaimTemplateName: hopper-timesliced
`)
	e.waitRunning(t, "ts-pod")
	for _, ctr := range []string{"ctr0", "ctr1"} {
		rec := e.container(t, "ts-pod", ctr)
		if !hasDevice(rec, "/dev/nvidia3") || !slices.Contains(rec.Env, "NVIDIA_VISIBLE_DEVICES=void") {
			t.Errorf("%s: devices %v, env %v; want the H100 (gpu-3)", ctr, devicePaths(rec), rec.Env)
		}
	}
	uuid := *e.devices["gpu-3"].Attributes["uuid"].StringValue
	if got, want := readFile(t, smi+".calls"), uuid+" 3\n"; got != want {
		t.Errorf("nvidia-smi was asked %q, want %q (Long, for the claim's GPU)", got, want)
	}
	e.deletePod(t, "ts-pod")
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return readFile(t, smi+".calls") == uuid+" 3\n"+uuid+" 0\n", nil
	})
	if err != nil {
		t.Errorf("after the pod went, nvidia-smi was asked %q; want the Default interval back", readFile(t, smi+".calls"))
	}
}

// testMPS: a ResourceClaim with NVIDIA's MPS settings, selecting by NVIDIA's names (its
// architecture spelling, brand and cudaDriverVersion).
func (e *env) testMPS(t *testing.T) {
	e.apply(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: ada-mps
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel:
            expression: |-
              device.attributes['gpu.nvidia.com'].architecture == 'Ada Lovelace' &&
              device.attributes['gpu.nvidia.com'].brand == 'Nvidia' &&
              device.attributes['gpu.nvidia.com'].cudaDriverVersion.compareTo(semver('12.0.0')) >= 0
    config:
    - opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: GpuConfig
          sharing:
            strategy: MPS
            mpsConfig:
              defaultActiveThreadPercentage: 50
              defaultPinnedDeviceMemoryLimit: 4Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: mps-pod
spec:
  nodeSelector:
    kubernetes.io/hostname: nvidia-node
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: registry.k8s.io/pause:3.10
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimName: ada-mps
`)
	e.waitRunning(t, "mps-pod")
	rec := e.container(t, "mps-pod", "ctr")
	claim, err := e.client.ResourceV1().ResourceClaims(ns).Get(e.ctx, "ada-mps", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, logDir := e.mps.Dirs(string(claim.UID))
	if !hasDevice(rec, "/dev/nvidia4") || !slices.Contains(rec.Env, "CUDA_MPS_PIPE_DIRECTORY="+sharing.PipeDir) {
		t.Errorf("devices %v, env %v; want the L4 (gpu-4) and the MPS pipe %s", devicePaths(rec), rec.Env, sharing.PipeDir)
	}
	// NVIDIA's mpsConfig reached the claim's daemon (the stand-in logs what it was told).
	uuid := *e.devices["gpu-4"].Attributes["uuid"].StringValue
	log := readFile(t, filepath.Join(logDir, "control.log"))
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=" + uuid, "command set_default_active_thread_percentage 50", "command set_default_device_pinned_mem_limit " + uuid + " 4096M"} {
		if !strings.Contains(log, want) {
			t.Errorf("MPS daemon log lacks %q:\n%s", want, log)
		}
	}
	e.deletePod(t, "mps-pod")
	if err := e.client.ResourceV1().ResourceClaims(ns).Delete(e.ctx, "ada-mps", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// testMIG: a MIG device of NVIDIA's class by profile, with a MigDeviceConfig.
func (e *env) testMIG(t *testing.T) {
	e.apply(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: mig-1g
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel:
              expression: device.attributes['gpu.nvidia.com'].profile == '1g.5gb'
      config:
      - opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: MigDeviceConfig
            sharing:
              strategy: TimeSlicing
---
apiVersion: v1
kind: Pod
metadata:
  name: mig-pod
spec:
  nodeSelector:
    kubernetes.io/hostname: nvidia-node
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: registry.k8s.io/pause:3.10
    resources:
      claims:
      - name: mig
  resourceClaims:
  - name: mig
    resourceClaimTemplateName: mig-1g
`)
	e.waitRunning(t, "mig-pod")
	rec := e.container(t, "mig-pod", "ctr")
	var caps int
	for _, p := range devicePaths(rec) {
		if strings.HasPrefix(p, "/dev/nvidia-caps/") {
			caps++
		}
	}
	if !hasDevice(rec, "/dev/nvidia0") || caps != 2 {
		t.Errorf("devices %v: want the A100 gpu-0 and its MIG device's GI and CI caps nodes", devicePaths(rec))
	}
	e.deletePod(t, "mig-pod")
}

// testExtendedResource: a pod written for the device plugin, limits nvidia.com/gpu: 1, gets a
// whole GPU through the class that maps the extended resource.
func (e *env) testExtendedResource(t *testing.T) {
	e.apply(t, `
apiVersion: v1
kind: Pod
metadata:
  name: ext-pod
spec:
  nodeSelector:
    kubernetes.io/hostname: nvidia-node
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: registry.k8s.io/pause:3.10
    resources:
      limits:
        nvidia.com/gpu: 1
`)
	e.waitRunning(t, "ext-pod")
	rec := e.container(t, "ext-pod", "ctr")
	if !hasDevice(rec, "/dev/nvidia3") && !hasDevice(rec, "/dev/nvidia4") {
		t.Errorf("devices %v: want a whole GPU (gpu-3 or gpu-4)", devicePaths(rec))
	}
	if slices.ContainsFunc(devicePaths(rec), func(p string) bool { return strings.HasPrefix(p, "/dev/nvidia-caps/") }) {
		t.Errorf("devices %v: a MIG device for nvidia.com/gpu", devicePaths(rec))
	}
	e.deletePod(t, "ext-pod")
}

// testBadConfig: an NVIDIA config accel-dra cannot honour fails the pod's start with an event
// that names NVIDIA's field.
func (e *env) testBadConfig(t *testing.T) {
	e.apply(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: bad-interval
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
    config:
    - opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: GpuConfig
          sharing:
            strategy: TimeSlicing
            timeSlicingConfig:
              interval: Forever
---
apiVersion: v1
kind: Pod
metadata:
  name: bad-pod
spec:
  nodeSelector:
    kubernetes.io/hostname: nvidia-node
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: registry.k8s.io/pause:3.10
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimName: bad-interval
`)
	ev, err := framework.WaitForPodEvent(e.ctx, e.client, ns, "bad-pod", 2*time.Minute,
		`GpuConfig (resource.nvidia.com/v1beta1): sharing.timeSlicingConfig.interval: Unsupported value: "Forever"`)
	if err != nil {
		t.Fatalf("%v\n%s", err, framework.DescribePod(e.ctx, e.client, ns, "bad-pod"))
	}
	t.Logf("event %s: %s", ev.Reason, ev.Message)
	e.deletePod(t, "bad-pod")
	if err := e.client.ResourceV1().ResourceClaims(ns).Delete(e.ctx, "bad-interval", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// testTaints: an XID on the L4 taints it with gpu.nvidia.com/xid, and a claim that tolerates
// that key, as NVIDIA's users write it, still gets it; a GPU that falls off the bus carries
// NVIDIA's gpu.nvidia.com/gpu-lost.
func (e *env) testTaints(t *testing.T) {
	faults := filepath.Join(e.node.PluginDataDir(driver), "mock", health.FaultDir)
	inject(t, faults, "gpu-4", "xid 48\n")
	e.waitTaint(t, "gpu-4", "gpu.nvidia.com/xid")
	e.apply(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: tolerant
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel:
            expression: device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'
        tolerations:
        - key: gpu.nvidia.com/xid
          operator: Exists
          effect: NoSchedule
---
apiVersion: v1
kind: Pod
metadata:
  name: tolerant-pod
spec:
  nodeSelector:
    kubernetes.io/hostname: nvidia-node
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: registry.k8s.io/pause:3.10
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimName: tolerant
`)
	e.waitRunning(t, "tolerant-pod")
	if rec := e.container(t, "tolerant-pod", "ctr"); !hasDevice(rec, "/dev/nvidia4") {
		t.Errorf("devices %v: want the tainted L4 (gpu-4)", devicePaths(rec))
	}
	e.deletePod(t, "tolerant-pod")
	inject(t, faults, "gpu-3", "lost\n")
	e.waitTaint(t, "gpu-3", "gpu.nvidia.com/gpu-lost")
	for _, dev := range []string{"gpu-3", "gpu-4"} {
		if err := os.Remove(filepath.Join(faults, dev)); err != nil {
			t.Fatal(err)
		}
	}
}

// apply creates the objects of a manifest.
func (e *env) apply(t *testing.T, manifest string) {
	t.Helper()
	if err := framework.Apply(e.ctx, e.client, ns, manifest); err != nil {
		t.Fatal(err)
	}
}

func (e *env) waitRunning(t *testing.T, pod string) {
	t.Helper()
	if _, err := framework.WaitForPodRunning(e.ctx, e.client, ns, pod, 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, framework.DescribePod(e.ctx, e.client, ns, pod))
	}
}

func (e *env) container(t *testing.T, pod, ctr string) fakecri.ContainerRecord {
	t.Helper()
	rec, err := e.node.CRI.WaitForContainer(e.ctx, ns, pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s container %s: devices %v, env %v", pod, ctr, devicePaths(rec), rec.Env)
	return rec
}

func (e *env) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := framework.DeletePod(e.ctx, e.client, ns, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// waitTaint waits until dev carries a taint with key.
func (e *env) waitTaint(t *testing.T, dev, key string) {
	t.Helper()
	var last []resourceapi.DeviceTaint
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		if err != nil {
			return false, nil
		}
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				if d.Name == dev {
					last = d.Taints
					for _, tt := range d.Taints {
						if tt.Key == key {
							return true, nil
						}
					}
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s has taints %v, want one with key %s", dev, last, key)
	}
}

func inject(t *testing.T, dir, dev, faults string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "."+dev+".tmp")
	if err := os.WriteFile(tmp, []byte(faults), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, dev)); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func hasDevice(rec fakecri.ContainerRecord, path string) bool {
	return slices.Contains(devicePaths(rec), path)
}

func devicePaths(rec fakecri.ContainerRecord) []string {
	var out []string
	for _, d := range rec.Devices {
		out = append(out, d.Path)
	}
	return out
}

// cleanupMPS stops, when t ends, the MPS daemons and unmounts what a failed test left under
// mps.Root: the plugin runs in this machine's mount namespace.
func cleanupMPS(t *testing.T, mps sharing.MPS) {
	t.Cleanup(func() {
		keys, _ := mps.Keys(context.Background())
		for _, k := range keys {
			_ = mps.Stop(context.Background(), k)
		}
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], mps.Root+"/") {
				_ = syscall.Unmount(f[4], syscall.MNT_DETACH)
			}
		}
	})
}
