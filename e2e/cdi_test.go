//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/fakecri"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
)

// mockNVIDIADriverVersion is the driver version of the nvmlmock profiles; the fake driver root
// the mock generates holds this version's libraries and firmware.
const mockNVIDIADriverVersion = "570.124.06"

// TestCDI runs, on real kubelets with a runtime that applies CDI through the CDI library, one pod
// per device kind with two containers, each using one request of a two-request claim (the
// second request a prioritized list, so its result names a subrequest), plus a container using
// the whole claim. Each container must see only its request's device nodes and environment,
// and every container the driver's files and hooks from the driver root the plugin found.
func TestCDI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{})
	client := c.Client()
	if err := framework.EnsureDeviceClasses(ctx, client); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []struct {
		name, backend, profile, class string
		check                         func(t *testing.T, rec fakecri.ContainerRecord, devs []string)
	}{
		{"GPU", "mock", "h100-8x-2numa", gpuClass, checkGPUDriverFiles},
		{"NPU", "npu-mock", "ascend910b-8x", npuClass, checkAscendDriverFiles},
	} {
		t.Run(kind.name, func(t *testing.T) {
			nodeName := strings.ToLower(kind.name) + "-cdi-node"
			node, err := c.AddNode(ctx, cluster.NodeOptions{Name: nodeName})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{Backend: kind.backend, Profile: kind.profile}); err != nil {
				t.Fatal(err)
			}
			ns := metav1.NamespaceDefault
			name := strings.ToLower(kind.name) + "-two-requests"
			tmpl := twoRequestTemplate(ns, name, kind.class)
			if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pod := twoContainerPod(ns, name, name, nodeName)
			if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := framework.WaitForPodRunning(ctx, client, ns, name, podWait); err != nil {
				t.Fatal(err)
			}
			byRequest := allocatedByRequest(ctx, t, client, ns, name)
			if len(byRequest["a"]) != 2 || len(byRequest["b"]) != 1 {
				t.Fatalf("allocation by request %v, want 2 devices for a and 1 for b", byRequest)
			}
			wctx, wcancel := context.WithTimeout(ctx, time.Minute)
			defer wcancel()
			all := slices.Concat(byRequest["a"], byRequest["b"])
			for ctr, devs := range map[string][]string{"uses-a": byRequest["a"], "uses-b": byRequest["b"], "uses-all": all} {
				rec, err := node.CRI.WaitForContainer(wctx, ns, name, ctr)
				if err != nil {
					t.Fatal(err)
				}
				t.Run(ctr, func(t *testing.T) {
					checkOnlyDevices(t, kind.name, rec, devs)
					kind.check(t, rec, devs)
				})
			}
		})
	}
}

// twoRequestTemplate: request a takes two devices; request b is a prioritized list whose first
// choice (all eight) cannot be met next to a, so it gets its second (one device) and the
// allocation result names "b/one".
func twoRequestTemplate(ns, name, class string) *resourceapi.ResourceClaimTemplate {
	exact := func(n int64) *resourceapi.ExactDeviceRequest {
		return &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n}
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{
				{Name: "a", Exactly: exact(2)},
				{Name: "b", FirstAvailable: []resourceapi.DeviceSubRequest{
					{Name: "eight", DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 8},
					{Name: "one", DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
				}},
			},
		}}},
	}
}

func twoContainerPod(ns, name, template, nodeName string) *corev1.Pod {
	ctr := func(name string, claims ...corev1.ResourceClaim) corev1.Container {
		return corev1.Container{Name: name, Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Claims: claims}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: nodeName},
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "acc", ResourceClaimTemplateName: &template}},
			Containers: []corev1.Container{
				ctr("uses-a", corev1.ResourceClaim{Name: "acc", Request: "a"}),
				ctr("uses-b", corev1.ResourceClaim{Name: "acc", Request: "b"}),
				ctr("uses-all", corev1.ResourceClaim{Name: "acc"}),
			},
		},
	}
}

// allocatedByRequest returns the devices of the pod's claim by base request, sorted.
func allocatedByRequest(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, podName string) map[string][]string {
	t.Helper()
	pod, err := client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has no generated claim: %+v", podName, pod.Status.ResourceClaimStatuses)
	}
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Request == "b" {
			t.Errorf("result for %q: want a subrequest of the prioritized list", r.Request)
		}
		base := resourceclaim.BaseRequestRef(r.Request)
		out[base] = append(out[base], r.Device)
	}
	for _, devs := range out {
		sort.Strings(devs)
	}
	return out
}

// deviceNode is the per-device node of a mock device: gpu-N is /dev/nvidiaN, npu-N /dev/davinciN.
func deviceNode(dev string) string {
	if n, ok := strings.CutPrefix(dev, "gpu-"); ok {
		return "/dev/nvidia" + n
	}
	return "/dev/davinci" + strings.TrimPrefix(dev, "npu-")
}

// checkOnlyDevices: the container has the per-device nodes of devs and no other per-device node.
func checkOnlyDevices(t *testing.T, kind string, rec fakecri.ContainerRecord, devs []string) {
	t.Helper()
	var want, got []string
	for _, d := range devs {
		want = append(want, deviceNode(d))
	}
	for _, p := range devicePaths(rec) {
		base := strings.TrimPrefix(p, "/dev/")
		if n, ok := strings.CutPrefix(base, "nvidia"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			got = append(got, p)
		}
		if n, ok := strings.CutPrefix(base, "davinci"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			got = append(got, p)
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s container %s: per-device nodes %v, want %v (all nodes %v)", kind, rec.ContainerName, got, want, devicePaths(rec))
	}
}

// checkGPUDriverFiles: the driver's libraries, nvidia-smi and firmware from the mock's driver
// root, mounted from paths that exist; the toolkit's four hooks, run by the copy of the hook the
// plugin ships that it installed on the node; NVIDIA_VISIBLE_DEVICES=void.
func checkGPUDriverFiles(t *testing.T, rec fakecri.ContainerRecord, _ []string) {
	t.Helper()
	checkMounts(t, rec, "/usr/lib64/libcuda.so."+mockNVIDIADriverVersion, "/usr/lib64/libnvidia-ml.so."+mockNVIDIADriverVersion,
		"/usr/bin/nvidia-smi", "/lib/firmware/nvidia/"+mockNVIDIADriverVersion+"/gsp_ga10x.bin", "/run/nvidia-persistenced/socket")
	shipped, err := framework.Binary("nvidia-cdi-hook")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	hooks := map[string]bool{}
	for _, h := range rec.Hooks["createContainer"] {
		if len(h.Args) < 2 || filepath.Base(h.Path) != "nvidia-cdi-hook" {
			continue
		}
		if got, err := os.ReadFile(h.Path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("container %s: hook %s runs %s (%v), not an installed copy of the hook the plugin ships (%s)", rec.ContainerName, h.Args[1], h.Path, err, shipped)
			continue
		}
		hooks[h.Args[1]] = true
	}
	for _, h := range []string{"create-symlinks", "update-ldcache", "enable-cuda-compat", "disable-device-node-modification"} {
		if !hooks[h] {
			t.Errorf("container %s: no %s hook (createContainer hooks %+v)", rec.ContainerName, h, rec.Hooks["createContainer"])
		}
	}
	if got := envValue(rec.Env, "NVIDIA_VISIBLE_DEVICES"); got != "void" {
		t.Errorf("container %s: NVIDIA_VISIBLE_DEVICES=%q, want void", rec.ContainerName, got)
	}
}

// checkAscendDriverFiles: the Ascend driver mounts and ASCEND_VISIBLE_DEVICES of exactly devs.
func checkAscendDriverFiles(t *testing.T, rec fakecri.ContainerRecord, devs []string) {
	t.Helper()
	// The Ascend driver's nodes are crw-rw---- HwHiAiUser, which the mock lays out as root
	// (npumock.DriverGID); the container's nodes must keep that group for a non-root user in it.
	if os.Geteuid() == 0 {
		for _, n := range rec.Devices {
			if n.GID != npumock.DriverGID || n.FileMode.Perm() != 0o660 {
				t.Errorf("container %s: %s has group %d mode %v, want the host node's %d and 0660", rec.ContainerName, n.Path, n.GID, n.FileMode, npumock.DriverGID)
			}
		}
	}
	checkMounts(t, rec, "/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info",
		"/etc/ascend_install.info", "/usr/local/dcmi", "/usr/local/bin/npu-smi")
	var want []string
	for _, d := range devs {
		want = append(want, strings.TrimPrefix(d, "npu-"))
	}
	got := strings.Split(envValue(rec.Env, "ASCEND_VISIBLE_DEVICES"), ",")
	if len(devs) == 3 {
		// Known limit (docs/cdi.md): a container that uses every request of a multi-request
		// claim gets each request's CDI device, and CDI keeps the last value of a variable set
		// by several, so ASCEND_VISIBLE_DEVICES names one request's NPUs; its nodes are right.
		// What still must hold: it names none but the container's own NPUs.
		t.Logf("container %s uses the whole claim: ASCEND_VISIBLE_DEVICES=%v covers one request only (known limit, docs/cdi.md)", rec.ContainerName, got)
		for _, g := range got {
			if !slices.Contains(want, g) {
				t.Errorf("container %s: ASCEND_VISIBLE_DEVICES=%v names NPU %s, not one of its own %v", rec.ContainerName, got, g, want)
			}
		}
		return
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("container %s: ASCEND_VISIBLE_DEVICES=%v, want %v", rec.ContainerName, got, want)
	}
	if n := strings.Count(strings.Join(rec.Env, "\n"), "ASCEND_VISIBLE_DEVICES="); n != 1 {
		t.Errorf("container %s: ASCEND_VISIBLE_DEVICES set %d times: %v", rec.ContainerName, n, rec.Env)
	}
}

func checkMounts(t *testing.T, rec fakecri.ContainerRecord, paths ...string) {
	t.Helper()
	for _, p := range paths {
		i := slices.IndexFunc(rec.Mounts, func(m oci.Mount) bool { return m.Destination == p })
		if i < 0 {
			t.Errorf("container %s: no mount of %s", rec.ContainerName, p)
			continue
		}
		if _, err := os.Stat(rec.Mounts[i].Source); err != nil {
			t.Errorf("container %s: mount of %s from a path that does not exist: %v", rec.ContainerName, p, err)
		}
	}
}
