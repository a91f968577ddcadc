//go:build e2e

package kind

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

const (
	release   = "accel-dra"
	releaseNS = "accel-dra"
	gpuData   = "/var/lib/kubelet/plugins/gpu.accel-dra.io"
	cdiDir    = "/var/run/cdi"
)

// workload is a pod that runs until deleted: a claim of one device of class (default: whole
// GPUs) with an optional GpuConfig.
type workload struct {
	name   string
	class  string
	config string // GpuConfig JSON, or ""
	// restart makes the pod restart its container when it exits (restartPolicy Always), and
	// the container print its GPU nodes (/dev/nvidiaN, /dev/nvidia-caps) and /dev/dri nodes
	// instead of running nvidia-smi: a container restarted from a spec the previous release
	// wrote finds this release's mock nvidia-smi in the mock driver root, without the machine
	// description this release's specs mount for it (the previous mock had none), so it could
	// not answer. The nodes are what the claim's CDI spec gives.
	restart bool
}

// claimTemplate is a one-device template with config as the claim's opaque GpuConfig.
func claimTemplate(name, class, config string) *resourceapi.ResourceClaimTemplate {
	if class == "" {
		class = gpuClass
	}
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		}}},
	}}
	if config != "" {
		spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: gpuClass, Parameters: runtime.RawExtension{Raw: []byte(config)}},
		}}}
	}
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
}

// startWorkload creates a pod that runs until deleted, with a claim from its own template.
func (e *env) startWorkload(ctx context.Context, w workload) error {
	tmpl := claimTemplate(w.name, w.class, w.config)
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return err
	}
	policy, command := corev1.RestartPolicyNever, "nvidia-smi -L && exec sleep 3600"
	if w.restart {
		policy, command = corev1.RestartPolicyAlways, "echo '== dev'; ls /dev | grep -E '^nvidia[0-9]+$'; echo '== caps'; ls /dev/nvidia-caps 2>/dev/null; echo '== dri'; ls /dev/dri 2>/dev/null; echo '== end'; exec sleep 3600"
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 policy,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: &tmpl.Name}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: e.workload, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sh", "-c", command},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}},
			}},
		},
	}
	_, err := e.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

func (e *env) stopWorkload(ctx context.Context, name string) error {
	if err := framework.DeletePod(ctx, e.client, ns, name, 2*time.Minute); err != nil {
		return err
	}
	return e.client.ResourceV1().ResourceClaimTemplates(ns).Delete(ctx, name, metav1.DeleteOptions{})
}

// record is what the node's checkpoint says of one claim (pkg/checkpoint's file format).
type record struct {
	Claim struct {
		UID     string `json:"uid"`
		Name    string `json:"name"`
		State   string `json:"state"`
		Devices []struct {
			Device      string `json:"device"`
			UUID        string `json:"uuid"`
			ShareID     string `json:"shareID"`
			AdminAccess bool   `json:"adminAccess"`
		} `json:"devices"`
	} `json:"claim"`
}

// records reads the GPU plugin's checkpoint on the node.
func (e *env) records(ctx context.Context, t *testing.T) []record {
	t.Helper()
	out := e.exec(ctx, "sh", "-c", "for f in "+gpuData+"/checkpoint/*.json; do [ -e \"$f\" ] && cat \"$f\" && echo; done; true")
	var recs []record
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("checkpoint record %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// heldOnce fails the test if a device is held by two claims' records exclusively.
func heldOnce(t *testing.T, recs []record) {
	t.Helper()
	holder := map[string]string{}
	for _, r := range recs {
		for _, d := range r.Claim.Devices {
			if d.AdminAccess || d.ShareID != "" {
				continue
			}
			if other, ok := holder[d.UUID]; ok {
				t.Errorf("GPU %s (%s) is held by claims %s and %s", d.Device, d.UUID, other, r.Claim.Name)
			}
			holder[d.UUID] = r.Claim.Name
		}
	}
}

// computeModes reads the compute modes the mock GPUs were set to on the node.
func (e *env) computeModes(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	data := e.exec(ctx, "sh", "-c", "cat "+gpuData+"/mock/"+nvmlmock.StateFileName+" 2>/dev/null; true")
	if err := os.WriteFile(filepath.Join(dir, nvmlmock.StateFileName), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if data == "" {
		return map[string]string{}
	}
	m, err := nvmlmock.ComputeModes(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// nodeLeftovers lists what of prepared claims is still on the node: CDI specs of the
// drivers, checkpoint records, mounts under the plugins' directories, GPUs not in the default
// compute mode.
func (e *env) nodeLeftovers(ctx context.Context, t *testing.T) []string {
	t.Helper()
	var left []string
	if out := strings.TrimSpace(e.exec(ctx, "sh", "-c", "ls "+cdiDir+" 2>/dev/null | grep '^accel-dra.io-' ; true")); out != "" {
		left = append(left, "CDI specs: "+out)
	}
	if out := strings.TrimSpace(e.exec(ctx, "sh", "-c", "ls /var/lib/kubelet/plugins/*/checkpoint/ 2>/dev/null | grep '\\.json$'; true")); out != "" {
		left = append(left, "checkpoint records: "+out)
	}
	if out := strings.TrimSpace(e.exec(ctx, "sh", "-c", "grep ' /var/lib/kubelet/plugins/[a-z]*\\.accel-dra\\.io/' /proc/mounts; true")); out != "" {
		left = append(left, "mounts: "+out)
	}
	for uuid, mode := range e.computeModes(ctx, t) {
		if mode != "DEFAULT" {
			left = append(left, fmt.Sprintf("GPU %s in compute mode %s", uuid, mode))
		}
	}
	return left
}

// testRollingUpgrade: helm upgrade to a new plugin image with surge, while a whole-GPU pod, a
// time-sliced pod and an MPS pod run and short pods come and go through both plugin pods:
// every long pod keeps running, MPS keeps its one daemon, no GPU is held twice, and once the
// pods are gone nothing of them is left on the node.
func (e *env) testRollingUpgrade(ctx context.Context, t *testing.T) {
	long := []workload{
		{name: "whole"},
		{name: "sliced", config: `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`},
		{name: "mps", config: `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`},
	}
	uids := e.startRunning(ctx, t, long)
	mpsBefore := e.mpsDaemonStarts(ctx, t)
	if mpsBefore == 0 {
		t.Errorf("no MPS daemon started for the MPS pod")
	}
	oldPlugin := e.pluginPod(ctx, t)

	// The new image: the same binaries under another tag, so that the DaemonSet rolls.
	tag := "e2e-upgrade"
	image := strings.TrimSpace(e.runEnv(ctx, []string{"BIN=" + filepath.Join(e.root, "bin")}, "hack/kind/plugin-image.sh", tag))
	e.load(ctx, t, image)
	start := time.Now()
	n := e.whileChurning(ctx, t, "churn", func() {
		if out, err := e.cmd(ctx, []string{"KUBECONFIG=" + e.kubeconfig}, filepath.Join(e.tools, "helm"), "upgrade", release,
			filepath.Join(e.root, "deployments/helm/accel-dra"), "-n", releaseNS, "--reuse-values", "--set", "plugin.image.tag="+tag, "--wait", "--timeout", "5m"); err != nil {
			t.Fatalf("helm upgrade: %v\n%s", err, out)
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			p := e.pluginPodOrNil(ctx)
			return p != nil && p.UID != oldPlugin.UID && strings.HasSuffix(p.Spec.Containers[0].Image, ":"+tag) && len(e.pluginPods(ctx)) == 1, nil
		}); err != nil {
			t.Fatalf("the GPU plugin did not roll to %s: %v", image, err)
		}
	})
	t.Logf("rolled to %s in %v; %d short pods came and went meanwhile", image, time.Since(start).Round(time.Second), n)

	for _, w := range long {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, w.name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("pod %s: %v", w.name, err)
		case string(p.UID) != uids[w.name] || p.Status.Phase != corev1.PodRunning:
			t.Errorf("pod %s is %s (UID %s), want the same pod running", w.name, p.Status.Phase, p.UID)
		case len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0:
			t.Errorf("pod %s's container restarted: %+v", w.name, p.Status.ContainerStatuses)
		}
	}
	if got := e.mpsDaemonStarts(ctx, t); got != mpsBefore {
		t.Errorf("MPS daemons started %d times before the upgrade and %d times after it: the MPS pod's server did not survive the plugin's upgrade", mpsBefore, got)
	}
	recs := e.records(ctx, t)
	heldOnce(t, recs)
	if len(recs) != len(long) {
		t.Errorf("%d checkpoint records with %d pods running: %+v", len(recs), len(long), recs)
	}

	for _, w := range long {
		if err := e.stopWorkload(ctx, w.name); err != nil {
			t.Error(err)
		}
	}
	e.expectNoLeftovers(ctx, t)
}

// expectNoLeftovers waits a minute at most for nothing of prepared claims to be left on the
// node (nodeLeftovers), once their pods went.
func (e *env) expectNoLeftovers(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(e.nodeLeftovers(ctx, t)) == 0, nil
	}); err != nil {
		t.Errorf("left on the node after the pods went: %q", e.nodeLeftovers(ctx, t))
	}
}

// mpsDaemonStarts counts the MPS control daemons started on the node, from their logs.
func (e *env) mpsDaemonStarts(ctx context.Context, t *testing.T) int {
	t.Helper()
	out := e.exec(ctx, "sh", "-c", "cat "+gpuData+"/mps/*/log/control.log 2>/dev/null; true")
	return strings.Count(out, "daemon started")
}

func (e *env) pluginPods(ctx context.Context) []corev1.Pod {
	pods, err := e.client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=gpu-plugin"})
	if err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func (e *env) pluginPodOrNil(ctx context.Context) *corev1.Pod {
	pods := e.pluginPods(ctx)
	for i := range pods {
		if pods[i].Status.Phase == corev1.PodRunning {
			for _, c := range pods[i].Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return &pods[i]
				}
			}
		}
	}
	return nil
}

func (e *env) pluginPod(ctx context.Context, t *testing.T) *corev1.Pod {
	t.Helper()
	p := e.pluginPodOrNil(ctx)
	if p == nil {
		t.Fatal("no ready GPU plugin pod")
	}
	return p
}

// testUninstall: helm uninstall, with no workload left, leaves nothing of the plugins on the
// node: no CDI specs, records, mounts, compute modes, registration sockets.
func (e *env) testUninstall(ctx context.Context, t *testing.T) {
	if out, err := e.cmd(ctx, []string{"KUBECONFIG=" + e.kubeconfig}, filepath.Join(e.tools, "helm"), "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	if left := append(e.nodeLeftovers(ctx, t), e.uninstallLeftovers(ctx, t)...); len(left) > 0 {
		t.Errorf("left on the node after helm uninstall: %q", left)
	}
	if out := strings.TrimSpace(e.exec(ctx, "sh", "-c", "ls /var/lib/kubelet/plugins_registry/ | grep accel-dra; true")); out != "" {
		t.Errorf("registration sockets left after helm uninstall: %s", out)
	}
}

// startRunning starts the workloads and waits for their pods to run; it returns their pod UIDs
// by name.
func (e *env) startRunning(ctx context.Context, t *testing.T, ws []workload) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for _, w := range ws {
		if err := e.startWorkload(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		p, err := framework.WaitForPodRunning(ctx, e.client, ns, w.name, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		uids[w.name] = string(p.UID)
	}
	return uids
}
