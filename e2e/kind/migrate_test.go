//go:build e2e

package kind

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/framework"
)

const (
	// nvidiaRelease is the stand-in for NVIDIA's DRA driver: this chart, installed under
	// NVIDIA's driver name with NVIDIA's directory (plugins/gpu.nvidia.com), NVIDIA's
	// registration socket name (gpu.nvidia.com-reg.sock: no pod UID) and NVIDIA's classes, kept
	// off the nodes handed over as docs/migrate-from-nvidia.md tells NVIDIA's users to do.
	nvidiaRelease = "nvidia"
	nvidiaNS      = "nvidia"
	nvidiaDir     = "/var/lib/kubelet/plugins/gpu.nvidia.com"
	compatLabel   = "accel-dra.io/nvidia-compat"
	// nvidiaCheckpoint is a checkpoint as NVIDIA's driver leaves it in its directory (v25.12.0:
	// checkpoint.json, a checksum and the claims it prepared), for a rollback to find.
	nvidiaCheckpoint = `{"checksum":2718281828,"v2":{"preparedClaims":{}}}`
)

// nvidiaStandIn are the stand-in's values.
const nvidiaStandIn = `
drivers:
  npu: {enabled: false}
  gpu:
    driverName: gpu.nvidia.com
    deviceClass: {name: gpu.nvidia.com}
    migDeviceClass: {name: mig.nvidia.com}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - {key: accel-dra.io/nvidia-compat, operator: DoesNotExist}
plugin:
  rollingUpdateWithSurge: false
cleanup: {enabled: false}
`

// compatValues install accel-dra's chart as docs/migrate-from-nvidia.md "Node by node" says,
// while NVIDIA's chart still owns the classes.
var compatValues = []string{
	"--set", "drivers.gpu.compat.nvidia=true",
	"--set", "drivers.gpu.deviceClass.create=false", "--set", "drivers.gpu.migDeviceClass.create=false",
}

// TestNVIDIAMigration follows docs/migrate-from-nvidia.md on one cluster, both ways: node A
// stays with (a stand-in for) NVIDIA's driver, with a claim of gpu.nvidia.com reserved there
// and NVIDIA's checkpoint.json in its directory; node B is handed over to accel-dra ("Node by
// node") and runs a claim there. helm uninstall of accel-dra, refused while B's claim is in
// use, then without force and with cleanup.force: NVIDIA's directories, socket, CDI specs and
// claim are untouched, byte for byte, and accel-dra's directory is gone. Then "Rolling back":
// B's label removed, NVIDIA's plugin comes back to B and finds its directory as it left it.
func TestNVIDIAMigration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := newEnvWorkers(ctx, t, 1, append([]string{
		"--set", "plugin.securityContext.privileged=true", "--set", "plugin.securityContext.allowPrivilegeEscalation=true",
	}, compatValues...)...)
	nodeA, nodeB := e.node, e.name+"-worker"
	start := time.Now()
	// Both nodes are GPU nodes: the control plane takes workloads too.
	e.kubectl(ctx, t, "taint", "nodes", nodeA, "node-role.kubernetes.io/control-plane:NoSchedule-")

	// NVIDIA's driver on every node, as before the move.
	e.installNVIDIAStandIn(ctx, t)
	// With NVIDIA's class there, the chart under accel-dra's own names is refused by the real
	// helm's lookup (templates/nvidia-guard.yaml), and the release stays as it was.
	chart := filepath.Join(e.root, "deployments/helm/accel-dra")
	out, err := e.helm(ctx, append([]string{"upgrade", release, chart, "-n", releaseNS, "-f", filepath.Join(chart, "values-mock.yaml")}, e.imageArgs()...)...)
	if want := "NVIDIA's DRA driver runs in this cluster (DeviceClass gpu.nvidia.com)"; err == nil || !strings.Contains(out, want) {
		t.Errorf("helm upgrade to accel-dra's own names beside NVIDIA's driver: %v, want a refusal with %q:\n%s", err, want, out)
	}
	if args := e.compatDaemonSet(ctx, t).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--nvidia-compat") {
		t.Errorf("the refused upgrade changed the release: plugin args %q", args)
	}
	for _, n := range []string{nodeA, nodeB} {
		e.waitDevices(ctx, t, n, false)
		e.execOn(ctx, t, n, "sh", "-c", fmt.Sprintf("printf '%%s' '%s' > %s/checkpoint.json", nvidiaCheckpoint, nvidiaDir))
	}
	e.startOn(ctx, t, "nv-a", nodeA)
	t.Logf("%s: NVIDIA's driver serves both nodes; pod nv-a holds a claim on %s", since(start), nodeA)

	// docs/migrate-from-nvidia.md, "Node by node": drain B (nothing runs there), label it.
	e.kubectl(ctx, t, "drain", nodeB, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2m")
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, compatLabel)
	if _, err := e.client.CoreV1().Nodes().Patch(ctx, nodeB, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDevices(ctx, t, nodeB, true)
	e.kubectl(ctx, t, "uncordon", nodeB)
	t.Logf("%s: %s handed over: 8 GPUs of accel-dra's plugin there", since(start), nodeB)
	if out := e.execOn(ctx, t, nodeB, "cat", nvidiaDir+"/checkpoint.json"); out != nvidiaCheckpoint {
		t.Errorf("handing B over changed NVIDIA's checkpoint.json: %q", out)
	}

	claimA := e.claimOf(ctx, t, "nv-a")
	keep := e.nvidiaState(ctx, t, nodeA, nodeB)
	t.Logf("NVIDIA's state on the nodes, %d entries:\n%s", len(keep), strings.Join(entries(keep), "\n"))
	unchanged := func(step string) {
		t.Helper()
		if diff := cmp.Diff(keep, e.nvidiaState(ctx, t, nodeA, nodeB)); diff != "" {
			t.Errorf("%s changed NVIDIA's state (-before +after):\n%s", step, diff)
		}
		c := e.claimOf(ctx, t, "nv-a")
		if c.ResourceVersion != claimA.ResourceVersion || len(c.Status.ReservedFor) != 1 {
			t.Errorf("%s changed NVIDIA's claim %s: resourceVersion %s → %s, reserved for %v", step, c.Name, claimA.ResourceVersion, c.ResourceVersion, c.Status.ReservedFor)
		}
		if p, err := e.client.CoreV1().Pods(ns).Get(ctx, "nv-a", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("after %s, NVIDIA's pod nv-a is not running: %v", step, err)
		}
	}
	accelGone := func(step string) {
		t.Helper()
		if out := strings.TrimSpace(e.execOn(ctx, t, nodeB, "sh", "-c", "ls -d "+nvidiaDir+"-accel-dra 2>/dev/null; true")); out != "" {
			t.Errorf("after %s, accel-dra's directory is still on node B: %s", step, out)
		}
	}

	// "Uninstalling": refused while B's claim is in use, naming only that claim.
	e.startOn(ctx, t, "ac-b", nodeB)
	claimB := e.claimOf(ctx, t, "ac-b")
	out, err = e.helm(ctx, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "3m")
	if err == nil {
		t.Fatalf("helm uninstall went through while pod ac-b holds %s:\n%s", claimB.Name, out)
	}
	logs, _ := e.cmd(ctx, nil, filepath.Join(e.kubeBin, "kubectl"), "--kubeconfig", e.kubeconfig, "logs", "-n", releaseNS, "job/"+hookName+"-check")
	if !strings.Contains(logs, "1 ResourceClaim(s)") || !strings.Contains(logs, claimB.Name) || strings.Contains(logs, claimA.Name) {
		t.Errorf("the check's log should name %s (on B) and not NVIDIA's %s (on A):\n%s", claimB.Name, claimA.Name, logs)
	}
	unchanged("the refused uninstall")
	t.Logf("%s: helm uninstall refused, naming %s only", since(start), claimB.Name)

	// Without force, once B's workload is gone; A's claim of NVIDIA's driver does not count.
	if err := e.stopWorkload(ctx, "ac-b"); err != nil {
		t.Fatal(err)
	}
	if out, err := e.helm(ctx, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "4m"); err != nil {
		t.Fatalf("helm uninstall with only NVIDIA's claim in use: %v\n%s", err, out)
	}
	unchanged("helm uninstall")
	accelGone("helm uninstall")
	t.Logf("%s: helm uninstall went through with NVIDIA's claim %s in use", since(start), claimA.Name)

	// Forced, with a claim prepared by accel-dra on B.
	e.helmCompat(ctx, t, "--set", "cleanup.force=true")
	e.waitDevices(ctx, t, nodeB, true)
	e.startOn(ctx, t, "ac-b2", nodeB)
	if out, err := e.helm(ctx, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "4m"); err != nil {
		t.Fatalf("helm uninstall with cleanup.force: %v\n%s", err, out)
	}
	unchanged("helm uninstall with cleanup.force")
	accelGone("helm uninstall with cleanup.force")
	t.Logf("%s: helm uninstall with cleanup.force went through under pod ac-b2's claim", since(start))

	// "Rolling back": B's label removed, NVIDIA's plugin comes back to B and finds its own
	// directory as it left it.
	e.kubectl(ctx, t, "label", "node", nodeB, compatLabel+"-")
	e.waitDevices(ctx, t, nodeB, false)
	t.Logf("%s: rolled back: NVIDIA's plugin serves %s again", since(start), nodeB)
	if out := e.execOn(ctx, t, nodeB, "cat", nvidiaDir+"/checkpoint.json"); out != nvidiaCheckpoint {
		t.Errorf("after the round trip NVIDIA's checkpoint.json on B is %q, want %q", out, nvidiaCheckpoint)
	}
}

// installNVIDIAStandIn installs the stand-in for NVIDIA's driver in its own namespace.
func (e *env) installNVIDIAStandIn(ctx context.Context, t *testing.T) {
	t.Helper()
	values := filepath.Join(t.TempDir(), "nvidia.yaml")
	if err := os.WriteFile(values, []byte(nvidiaStandIn), 0o644); err != nil {
		t.Fatal(err)
	}
	e.kubectl(ctx, t, "create", "namespace", nvidiaNS)
	e.kubectl(ctx, t, "label", "namespace", nvidiaNS, "pod-security.kubernetes.io/enforce=privileged")
	chart := filepath.Join(e.root, "deployments/helm/accel-dra")
	args := append([]string{"install", nvidiaRelease, chart, "-n", nvidiaNS, "-f", filepath.Join(chart, "values-mock.yaml"), "-f", values,
		"--wait", "--timeout", "5m"}, e.imageArgs()...)
	if out, err := e.helm(ctx, args...); err != nil {
		t.Fatalf("installing the stand-in for NVIDIA's driver: %v\n%s", err, out)
	}
}

// helmCompat installs accel-dra's release in the compatibility mode, with extra values.
func (e *env) helmCompat(ctx context.Context, t *testing.T, extra ...string) {
	t.Helper()
	chart := filepath.Join(e.root, "deployments/helm/accel-dra")
	args := append([]string{"upgrade", "--install", release, chart, "-n", releaseNS, "-f", filepath.Join(chart, "values-mock.yaml"),
		"--wait", "--timeout", "5m"}, append(e.imageArgs(), compatValues...)...)
	if out, err := e.helm(ctx, append(args, extra...)...); err != nil {
		t.Fatalf("helm upgrade --install %s: %v\n%s", strings.Join(extra, " "), err, out)
	}
}

func (e *env) helm(ctx context.Context, args ...string) (string, error) {
	return e.cmd(ctx, []string{"KUBECONFIG=" + e.kubeconfig}, filepath.Join(e.tools, "helm"), args...)
}

func (e *env) kubectl(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.cmd(ctx, nil, filepath.Join(e.kubeBin, "kubectl"), append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// waitDevices waits until node publishes the mock's 8 GPUs as gpu.nvidia.com, all from
// accel-dra's compatibility mode (which adds NVIDIA's brand attribute) or all from the stand-in.
func (e *env) waitDevices(ctx context.Context, t *testing.T, node string, accel bool) {
	t.Helper()
	var got string
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, nil
		}
		var ours, theirs int
		for _, s := range list.Items {
			if s.Spec.Driver != nvidiaDriver {
				continue
			}
			for _, d := range s.Spec.Devices {
				if _, ok := d.Attributes["brand"]; ok {
					ours++
				} else {
					theirs++
				}
			}
		}
		got = fmt.Sprintf("%d devices of accel-dra, %d of NVIDIA's", ours, theirs)
		if accel {
			return ours == 8 && theirs == 0, nil
		}
		return theirs == 8 && ours == 0, nil
	}); err != nil {
		t.Fatalf("node %s: %s, want 8 of %s", node, got, map[bool]string{true: "accel-dra", false: "NVIDIA's"}[accel])
	}
}

// startOn runs a pod with a claim of one GPU of NVIDIA's class on node until deleted.
func (e *env) startOn(ctx context.Context, t *testing.T, name, node string) {
	t.Helper()
	apply(ctx, t, e, fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: %[1]s
  namespace: default
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
---
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: default
spec:
  nodeSelector:
    kubernetes.io/hostname: %[2]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: %[3]s
    imagePullPolicy: Never
    command: ["sh", "-c", "nvidia-smi -L && exec sleep 3600"]
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: %[1]s
`, name, node, e.workload))
	if _, err := framework.WaitForPodRunning(ctx, e.client, ns, name, 3*time.Minute); err != nil {
		t.Fatalf("pod %s on %s: %v\n%s", name, node, err, e.describe(ctx, ns, name))
	}
}

// claimOf is the ResourceClaim of a startOn pod.
func (e *env) claimOf(ctx context.Context, t *testing.T, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	p, err := e.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has no claim: %+v", pod, p.Status.ResourceClaimStatuses)
	}
	c, err := e.client.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// nvidiaState is what NVIDIA's driver keeps on the nodes: on A, where its plugin serves, its
// directory, its registration socket (by inode: one made anew is another) and the CDI specs;
// on B, the directory it left for a rollback. Files by content, the rest by type.
func (e *env) nvidiaState(ctx context.Context, t *testing.T, nodeA, nodeB string) map[string]string {
	t.Helper()
	const script = `for p in "$@"; do [ -e "$p" ] || { echo "$p missing"; continue; }
find "$p" \( -type f -exec sh -c 'printf "%s file %s\n" "$1" "$(sha256sum < "$1" | cut -c1-16)"' _ {} \; \) -o \( -type s -exec stat -c '%n socket %i' {} \; \) -o \( -type d -exec stat -c '%n dir %a' {} \; \)
done`
	out := map[string]string{}
	for node, paths := range map[string][]string{
		nodeA: {nvidiaDir, "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock", cdiDir},
		nodeB: {nvidiaDir},
	} {
		role := map[bool]string{true: "A", false: "B"}[node == nodeA]
		for _, l := range lines(e.execOn(ctx, t, node, append([]string{"sh", "-c", script, "sh"}, paths...)...)) {
			name, v, _ := strings.Cut(l, " ")
			out[role+":"+name] = v
		}
	}
	return out
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Second) }

// entries are a state's entries as sorted lines.
func entries(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+" "+v)
	}
	slices.Sort(out)
	return out
}
