//go:build e2e

package kind

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/framework"
)

// nvidiaDriver is NVIDIA's driver name, which the compatibility mode publishes under.
const nvidiaDriver = "gpu.nvidia.com"

// TestNVIDIACompat installs the chart in the NVIDIA compatibility mode
// (docs/migrate-from-nvidia.md) and runs workloads written for NVIDIA's driver: the plugin
// stays off the node until the node is labelled as handed over, then publishes its GPUs as
// gpu.nvidia.com, and containers that containerd starts see the GPUs they claimed through
// NVIDIA's class with NVIDIA's configuration, and through nvidia.com/gpu.
func TestNVIDIACompat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := newEnv(ctx, t, "--set", "plugin.securityContext.privileged=true", "--set", "plugin.securityContext.allowPrivilegeEscalation=true")
	e.helmMock(ctx, t, false, "--set", "drivers.gpu.compat.nvidia=true")

	// Not labelled: no plugin, so no second driver of the name can meet NVIDIA's on the node.
	ds := e.compatDaemonSet(ctx, t)
	if ds.Status.DesiredNumberScheduled != 0 {
		t.Fatalf("the plugin DaemonSet %s wants %d pods before the node is labelled", ds.Name, ds.Status.DesiredNumberScheduled)
	}
	patch := []byte(`{"metadata":{"labels":{"accel-dra.io/nvidia-compat":"true"}}}`)
	if _, err := e.client.CoreV1().Nodes().Patch(ctx, e.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		n = 0
		for _, s := range list.Items {
			if s.Spec.Driver == nvidiaDriver {
				n += len(s.Spec.Devices)
			}
		}
		return n == 8, nil
	}); err != nil {
		t.Fatalf("%d devices of driver %s after the node was labelled, want the mock's 8", n, nvidiaDriver)
	}

	t.Run("NVIDIAClaimTemplate", func(t *testing.T) {
		apply(ctx, t, e, fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: hopper-shared
  namespace: default
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: |-
                device.attributes['gpu.nvidia.com'].architecture == 'Hopper' &&
                device.attributes['gpu.nvidia.com'].brand == 'Nvidia'
      config:
      - opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: TimeSlicing
              timeSlicingConfig:
                interval: Short
---
apiVersion: v1
kind: Pod
metadata:
  name: nvidia-claim
  namespace: default
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", %q]
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: hopper-shared
`, e.workload, gpuScript))
		e.checkCompatGPUs(ctx, t, "nvidia-claim")
		e.deletePod(ctx, t, "nvidia-claim")
		_ = e.client.ResourceV1().ResourceClaimTemplates(ns).Delete(ctx, "hopper-shared", metav1.DeleteOptions{})
	})

	t.Run("Conformance", func(t *testing.T) { conformance(ctx, t, e.conformanceTarget(), nvidiaDriver, "gpu.nvidia.com") })
	t.Run("NVIDIAQuickstart", func(t *testing.T) { e.testNVIDIAQuickstart(ctx, t) })

	t.Run("ExtendedResource", func(t *testing.T) {
		apply(ctx, t, e, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: nvidia-ext
  namespace: default
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", %q]
    resources:
      limits:
        nvidia.com/gpu: 1
`, e.workload, gpuScript))
		e.checkCompatGPUs(ctx, t, "nvidia-ext")
		e.deletePod(ctx, t, "nvidia-ext")
	})
}

// compatDaemonSet is the GPU plugin's DaemonSet, once its controller has looked at it.
func (e *env) compatDaemonSet(ctx context.Context, t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	var found *appsv1.DaemonSet
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.AppsV1().DaemonSets(releaseNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			d := &list.Items[i]
			for _, a := range d.Spec.Template.Spec.Containers[0].Args {
				if a == "--driver-name="+nvidiaDriver && d.Status.ObservedGeneration == d.Generation {
					found = d
					return true, nil
				}
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no plugin DaemonSet for %s", nvidiaDriver)
	}
	return found
}

// checkCompatGPUs checks a gpuScript pod's output: one GPU node, the control nodes, the
// driver's libraries, and nvidia-smi listing that GPU by the UUID its gpu.nvidia.com slice
// gives it.
func (e *env) checkCompatGPUs(ctx context.Context, t *testing.T, pod string) {
	t.Helper()
	out := e.podOutput(ctx, ns, pod, 3*time.Minute)
	t.Logf("pod %s container output:\n%s", pod, out)
	sec := sections(out)
	if _, ok := sec["end"]; !ok {
		t.Fatalf("the script did not finish:\n%s", out)
	}
	if len(sec["dev"]) != 1 {
		t.Fatalf("the container has GPU nodes %q, want one", sec["dev"])
	}
	name := "gpu-" + strings.TrimPrefix(sec["dev"][0], "nvidia")
	list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var uuid string
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if s.Spec.Driver == nvidiaDriver && d.Name == name && d.Attributes["uuid"].StringValue != nil {
				uuid = *d.Attributes["uuid"].StringValue
			}
		}
	}
	if got := sec["ldconfig"]; !slices.Contains(got, "libcuda.so.1") || !slices.Contains(got, "libnvidia-ml.so.1") {
		t.Errorf("ldconfig -p in the container lists %q, want libcuda.so.1 and libnvidia-ml.so.1", got)
	}
	if got := sorted(sec["ctl"]); !slices.Equal(got, []string{"nvidia-uvm", "nvidiactl"}) {
		t.Errorf("the container has control nodes %q, want nvidiactl and nvidia-uvm", got)
	}
	if smi := sec["smi"]; uuid == "" || len(smi) != 1 || !strings.Contains(smi[0], "(UUID: "+uuid+")") {
		t.Errorf("nvidia-smi -L lists %q, want exactly %s (UUID %q) of driver %s", smi, name, uuid, nvidiaDriver)
	}
}

func apply(ctx context.Context, t *testing.T, e *env, manifest string) {
	t.Helper()
	if err := framework.Apply(ctx, e.client, ns, manifest); err != nil {
		t.Fatal(err)
	}
}
