//go:build e2e

// Package kind tests accel-dra as users run it: the plugin from its image, installed by the Helm
// chart with the real Helm, on a kind cluster whose node runs containerd and runc, which start
// real containers from the plugin's CDI specs and run their hooks. The cluster is made by
// hack/kind/up.sh --images=local: the offline node image and plugin image (hack/kind/), no
// registry. The harness's other packages run the plugin as a host process beside a fake
// runtime; what that cannot show (hooks, namespaces, the image, the chart's DaemonSet) is here.
//
//	make build && go test -tags e2e -v -timeout 60m ./e2e/kind/
//
// Needs a Docker engine, mmdebstrap, gcc and libseccomp-dev; without them it says what to
// install and skips, except in CI (CI=true), where that is a failure.
package kind

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/framework"
)

const (
	gpuClass = "gpu.accel-dra.io"
	npuClass = "npu.accel-dra.io"
	ns       = "default"
)

func TestKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	// The GPU plugin privileged, as on a real node: MPS mounts each claim's /dev/shm tmpfs and
	// needs the kubelet plugins directory's propagation to reach the runtime.
	e := newEnv(ctx, t, "--set", "plugin.securityContext.privileged=true", "--set", "plugin.securityContext.allowPrivilegeEscalation=true")
	t.Run("GPUPod", func(t *testing.T) { e.testGPUPod(ctx, t) })
	t.Run("RuntimeCDI", func(t *testing.T) { e.testRuntimeAppliesCDI(ctx, t) })
	t.Run("DaemonReload", func(t *testing.T) { e.testDaemonReload(ctx, t) })
	t.Run("DriverUpgradePause", func(t *testing.T) { e.testDriverUpgradePause(ctx, t) })
	t.Run("NPUPod", func(t *testing.T) { e.testNPUPod(ctx, t) })
	t.Run("Conformance", func(t *testing.T) {
		t.Run("gpu", func(t *testing.T) { conformance(ctx, t, e.conformanceTarget(), gpuClass, gpuClass) })
		t.Run("npu", func(t *testing.T) { conformance(ctx, t, e.conformanceTarget(), npuClass, npuClass) })
	})
	t.Run("RollingUpgrade", func(t *testing.T) { e.testRollingUpgrade(ctx, t) })
	t.Run("MPSNode", func(t *testing.T) { e.testMPSNode(ctx, t) })
	t.Run("UninstallRefused", func(t *testing.T) { e.testUninstallRefused(ctx, t) })
	t.Run("Uninstall", func(t *testing.T) { e.testUninstall(ctx, t) })
	t.Run("TwoReleases", func(t *testing.T) { e.testTwoReleases(ctx, t) })
	// Each installs the release afresh with a driver root of its own and uninstalls it.
	t.Run("ForeignLibc", func(t *testing.T) { e.testForeignLibc(ctx, t) })
	t.Run("LateDriverRoot", func(t *testing.T) { e.testLateDriverRoot(ctx, t) })
	t.Run("DriverMismatch", func(t *testing.T) { e.testDriverMismatch(ctx, t) })
	t.Run("DeviceLayouts", func(t *testing.T) { e.testDeviceLayouts(ctx, t) })
	t.Run("NVLinkPair", func(t *testing.T) { e.testNVLinkPair(ctx, t) })
}

// gpuScript prints, in sections, what a CUDA program would look for.
const gpuScript = `echo '== ldconfig'; ldconfig -p | grep -E 'libcuda\.so\.1 |libnvidia-ml\.so\.1 ' | sed 's/ (.*//'
echo '== dev'; ls /dev | grep -E '^nvidia[0-9]+$'
echo '== ctl'; ls /dev | grep -E '^nvidia(ctl|-uvm)$'
echo '== smi'; nvidia-smi -L
echo '== end'; exec sleep 3600`

// sections splits a script's output into its "== name" sections.
func sections(out string) map[string][]string {
	s := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "== "):
			cur = strings.TrimPrefix(l, "== ")
			s[cur] = s[cur]
		case l != "" && cur != "":
			s[cur] = append(s[cur], l)
		}
	}
	return s
}

// testGPUPod: a GPU container finds the driver's libraries in its ld cache (the CDI hooks ran
// in the real runtime), exactly the /dev/nvidiaN of its claim's GPUs and the control nodes,
// and nvidia-smi lists exactly its GPUs.
func (e *env) testGPUPod(ctx context.Context, t *testing.T) {
	for _, count := range []int64{1, 2} {
		t.Run(fmt.Sprintf("%dGPU", count), func(t *testing.T) { e.checkGPUPod(ctx, t, fmt.Sprintf("gpu-pod-%d", count), count, nil) })
	}
}

// checkGPUPod runs a pod with a claim of count GPUs and checks that its container has exactly
// the claim's GPUs (their nodes, and nvidia-smi lists them), the control nodes and the
// driver's libraries, and what also checks (if not nil) while it runs, then deletes it.
func (e *env) checkGPUPod(ctx context.Context, t *testing.T, name string, count int64, also func(devs []allocatedDevice)) {
	t.Helper()
	e.runPod(ctx, t, name, gpuClass, count, gpuScript)
	e.verifyGPUPod(ctx, t, name, count, also)
}

// verifyGPUPod is checkGPUPod's check of a pod that runs gpuScript.
func (e *env) verifyGPUPod(ctx context.Context, t *testing.T, name string, count int64, also func(devs []allocatedDevice)) {
	t.Helper()
	out := e.podOutput(ctx, ns, name, 3*time.Minute)
	t.Logf("container output:\n%s", out)
	sec := sections(out)
	if _, ok := sec["end"]; !ok {
		t.Fatalf("the script did not finish:\n%s", out)
	}
	devs := e.allocated(ctx, t, name)
	if int64(len(devs)) != count {
		t.Fatalf("claim of pod %s has %d devices, want %d", name, len(devs), count)
	}
	var wantDev []string
	var uuids []string
	for _, d := range devs {
		wantDev = append(wantDev, "nvidia"+strings.TrimPrefix(d.name, "gpu-"))
		uuids = append(uuids, d.uuid)
	}
	slices.Sort(wantDev)
	if got := sec["ldconfig"]; !slices.Contains(got, "libcuda.so.1") || !slices.Contains(got, "libnvidia-ml.so.1") {
		t.Errorf("ldconfig -p in the container lists %q, want libcuda.so.1 and libnvidia-ml.so.1 (the update-ldcache hook)", got)
	}
	if got := sorted(sec["dev"]); !slices.Equal(got, wantDev) {
		t.Errorf("the container has GPU nodes %q, want exactly its claim's %q", got, wantDev)
	}
	if got := sorted(sec["ctl"]); !slices.Equal(got, []string{"nvidia-uvm", "nvidiactl"}) {
		t.Errorf("the container has control nodes %q, want nvidiactl and nvidia-uvm", got)
	}
	smi := sec["smi"]
	if len(smi) != len(uuids) {
		t.Errorf("nvidia-smi -L lists %d GPUs, want %d:\n%s", len(smi), len(uuids), strings.Join(smi, "\n"))
	}
	for _, u := range uuids {
		found := false
		for _, l := range smi {
			found = found || strings.Contains(l, "(UUID: "+u+")")
		}
		if !found {
			t.Errorf("nvidia-smi -L does not list the claim's GPU %s:\n%s", u, strings.Join(smi, "\n"))
		}
	}
	if also != nil {
		also(devs)
	}
	e.deletePod(ctx, t, name)
}

// testNPUPod: an NPU container gets the Ascend driver's mounts and exactly its claim's
// /dev/davinciN with the management nodes.
func (e *env) testNPUPod(ctx context.Context, t *testing.T) {
	const script = `echo '== dev'; ls /dev | grep -E '^davinci[0-9]+$'
echo '== mgmt'; ls /dev | grep -E '^(davinci_manager|devmm_svm|hisi_hdc)$'
echo '== driver'; ls -d /usr/local/Ascend/driver/lib64 /usr/local/Ascend/driver/version.info
echo '== end'; exec sleep 3600`
	e.runPod(ctx, t, "npu-pod", npuClass, 1, script)
	out := e.podOutput(ctx, ns, "npu-pod", 3*time.Minute)
	t.Logf("container output:\n%s", out)
	sec := sections(out)
	devs := e.allocated(ctx, t, "npu-pod")
	if len(devs) != 1 {
		t.Fatalf("claim of npu-pod has %d devices, want 1", len(devs))
	}
	want := []string{"davinci" + regexp.MustCompile(`[0-9]+$`).FindString(devs[0].name)}
	if got := sorted(sec["dev"]); !slices.Equal(got, want) {
		t.Errorf("the container has NPU nodes %q, want exactly its claim's %q", got, want)
	}
	if got := sorted(sec["mgmt"]); !slices.Equal(got, []string{"davinci_manager", "devmm_svm", "hisi_hdc"}) {
		t.Errorf("the container has management nodes %q, want davinci_manager, devmm_svm, hisi_hdc", got)
	}
	if got := sec["driver"]; len(got) != 2 {
		t.Errorf("the Ascend driver's files in the container: %q, want lib64 and version.info", got)
	}
	e.deletePod(ctx, t, "npu-pod")
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// runPod creates a pod of the workload image running script, with a claim of count devices
// of class made from a template of its own.
func (e *env) runPod(ctx context.Context, t *testing.T, name, class string, count int64, script string) {
	t.Helper()
	e.runClaimPod(ctx, t, name, resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
		}}},
	}, script)
}

// runClaimPod is runPod with the claim's devices as given.
func (e *env) runClaimPod(ctx context.Context, t *testing.T, name string, devices resourceapi.DeviceClaim, script string) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: devices}},
	}
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: &tmpl.Name}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: e.workload, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sh", "-c", script},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) deletePod(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	if err := framework.DeletePod(ctx, e.client, ns, name, 2*time.Minute); err != nil {
		t.Errorf("deleting pod %s: %v", name, err)
	}
	_ = e.client.ResourceV1().ResourceClaimTemplates(ns).Delete(ctx, name, metav1.DeleteOptions{})
}

type allocatedDevice struct{ name, uuid string }

// allocated are the devices of a pod's claim, with the uuid attribute their slice gives them.
func (e *env) allocated(ctx context.Context, t *testing.T, pod string) []allocatedDevice {
	t.Helper()
	p, err := e.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has claim statuses %+v", pod, p.Status.ResourceClaimStatuses)
	}
	claim, err := e.client.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil {
		t.Fatalf("claim %s is not allocated", claim.Name)
	}
	slices, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []allocatedDevice
	for _, r := range claim.Status.Allocation.Devices.Results {
		d := allocatedDevice{name: r.Device}
		for _, s := range slices.Items {
			if s.Spec.Driver != r.Driver || s.Spec.Pool.Name != r.Pool {
				continue
			}
			for _, dev := range s.Spec.Devices {
				if dev.Name == r.Device && dev.Attributes["uuid"].StringValue != nil {
					d.uuid = *dev.Attributes["uuid"].StringValue
				}
			}
		}
		out = append(out, d)
	}
	return out
}
