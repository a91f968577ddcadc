//go:build e2e

package kind

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/framework"
)

const (
	// cdDriver is NVIDIA's ComputeDomain driver, whose kubelet plugin NVIDIA's chart runs with
	// resources.gpus.enabled=false beside accel-dra (docs/migrate-from-nvidia.md, ComputeDomains).
	cdDriver  = "compute-domain.nvidia.com"
	cdClass   = "compute-domain-default-channel.nvidia.com"
	cdRelease = "nvidia-dra-driver-gpu"
	cdNS      = "nvidia-dra-driver-gpu"
	cdDir     = "/var/lib/kubelet/plugins/" + cdDriver
	cdSocket  = "/var/lib/kubelet/plugins_registry/" + cdDriver + "-reg.sock"
	// accelCompatDir is accel-dra's own directory in the compatibility mode.
	accelCompatDir = "/var/lib/kubelet/plugins/gpu.nvidia.com-accel-dra"
)

// cdStandIn stands in for NVIDIA's chart kept for ComputeDomains only: a kubelet plugin of its
// own driver name, directory and registration socket (no pod UID in its name, as NVIDIA's),
// publishing devices that are not GPUs and name no GPU UUID, as NVIDIA's channels and daemons
// do. It is this chart's mock NPU plugin under NVIDIA's ComputeDomain names, in NVIDIA's
// chart's namespace and release name.
const cdStandIn = `
drivers:
  gpu: {enabled: false}
  npu:
    enabled: true
    driverName: compute-domain.nvidia.com
    deviceClass: {name: compute-domain-default-channel.nvidia.com}
plugin:
  rollingUpdateWithSurge: false
cleanup: {enabled: false}
`

// TestNVIDIAComputeDomains follows docs/migrate-from-nvidia.md, "ComputeDomains (GB200)": NVIDIA's
// chart kept for ComputeDomains beside accel-dra in the compatibility mode serving the GPUs. On
// one node both plugins register and serve, one pod holding a GPU of gpu.nvidia.com and a
// ComputeDomain channel; helm uninstall of accel-dra, without and with cleanup.force, leaves the
// ComputeDomain plugin's directory, socket, CDI specs, slices and a running pod's claim as they
// were, byte for byte. The cluster runs accel-dra with consumable memory, where NVIDIA's
// consumable-shares workloads run (docs/migrate-from-nvidia.md, "Consumable shares").
func TestNVIDIAComputeDomains(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	accelValues := []string{
		"--set", "plugin.securityContext.privileged=true", "--set", "plugin.securityContext.allowPrivilegeEscalation=true",
		"--set", "drivers.npu.enabled=false", "--set", "drivers.gpu.compat.nvidia=true", "--set", "plugin.sharing.consumableMemory=true",
	}
	e := newEnv(ctx, t, accelValues...)
	start := time.Now()
	e.installCDStandIn(ctx, t)
	e.kubectl(ctx, t, "label", "node", e.node, compatLabel+"=true")
	e.waitDevices(ctx, t, e.node, true)
	cdDevices := nodeDevices(ctx, e.client, cdDriver, e.node)
	if cdDevices == 0 {
		t.Fatalf("no devices of %s on %s", cdDriver, e.node)
	}
	t.Logf("%s: accel-dra serves 8 GPUs as %s, the ComputeDomain stand-in %d devices as %s", since(start), nvidiaDriver, cdDevices, cdDriver)

	t.Run("BothServe", func(t *testing.T) {
		metrics, err := e.conformanceTarget().metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{nvidiaDriver, cdDriver} {
			if !registered(metrics, d) {
				t.Errorf("the kubelet has no registered plugin of %s:\n%s", d, grepLines(metrics, "plugin_manager_total_plugins"))
			}
		}
		e.startWithChannel(ctx, t, "gpu-and-channel", true)
		out := e.podOutput(ctx, ns, "gpu-and-channel", 3*time.Minute)
		if sec := sections(out); len(sec["smi"]) != 1 || len(sec["npu"]) != 1 {
			t.Errorf("the pod sees GPUs %q and ComputeDomain devices %q, want one of each:\n%s", sec["smi"], sec["npu"], out)
		}
		if err := e.stopWorkload(ctx, "gpu-and-channel"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ConsumableShares", func(t *testing.T) { e.testConsumableShares(ctx, t) })

	// A ComputeDomain workload that runs through accel-dra's uninstalls.
	e.startWithChannel(ctx, t, "cd-job", false)
	claim := e.claimOf(ctx, t, "cd-job")
	keep, restarts := e.cdState(ctx, t), e.cdRestarts(ctx, t)
	t.Logf("the ComputeDomain plugin's state, %d entries:\n%s", len(keep), strings.Join(entries(keep), "\n"))
	unchanged := func(step string) {
		t.Helper()
		now, nowRestarts := e.cdState(ctx, t), e.cdRestarts(ctx, t)
		want := keep
		if nowRestarts != restarts {
			// The stand-in's own container restarted (on this loaded machine, a liveness probe
			// that timed out): it made its sockets, instance lock and slice anew itself. What
			// accel-dra could have removed is still compared: every file and directory, and that
			// each socket is there.
			t.Logf("the ComputeDomain stand-in restarted during %s (%d → %d); comparing its state without what a restart renews", step, restarts, nowRestarts)
			want, now = beyondRestart(keep), beyondRestart(now)
		}
		if diff := cmp.Diff(want, now); diff != "" {
			t.Errorf("%s changed the ComputeDomain plugin's state (-before +after):\n%s", step, diff)
		}
		keep, restarts = e.cdState(ctx, t), nowRestarts
		c := e.claimOf(ctx, t, "cd-job")
		if c.ResourceVersion != claim.ResourceVersion || len(c.Status.ReservedFor) != 1 {
			t.Errorf("%s changed the ComputeDomain claim %s: resourceVersion %s → %s, reserved for %v", step, c.Name, claim.ResourceVersion, c.ResourceVersion, c.Status.ReservedFor)
		}
		if p, err := e.client.CoreV1().Pods(ns).Get(ctx, "cd-job", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("after %s, the ComputeDomain pod cd-job is not running: %v", step, err)
		}
		if out := strings.TrimSpace(e.execOn(ctx, t, e.node, "sh", "-c", "ls -d "+accelCompatDir+" 2>/dev/null; true")); out != "" {
			t.Errorf("after %s, accel-dra's directory is still there: %s", step, out)
		}
	}

	if out, err := e.helm(ctx, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "4m"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	unchanged("helm uninstall")
	t.Logf("%s: helm uninstall left the ComputeDomain plugin alone", since(start))

	chart := filepath.Join(e.root, "deployments/helm/accel-dra")
	args := append([]string{"upgrade", "--install", release, chart, "-n", releaseNS, "-f", filepath.Join(chart, "values-mock.yaml"),
		"--wait", "--timeout", "5m", "--set", "cleanup.force=true"}, append(e.imageArgs(), accelValues...)...)
	if out, err := e.helm(ctx, args...); err != nil {
		t.Fatalf("reinstalling accel-dra: %v\n%s", err, out)
	}
	e.waitDevices(ctx, t, e.node, true)
	e.startOn(ctx, t, "gpu-held", e.node)
	if out, err := e.helm(ctx, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "4m"); err != nil {
		t.Fatalf("helm uninstall with cleanup.force: %v\n%s", err, out)
	}
	unchanged("helm uninstall with cleanup.force")
	t.Logf("%s: helm uninstall with cleanup.force under pod gpu-held's claim left the ComputeDomain plugin alone", since(start))
	metrics, err := e.conformanceTarget().metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !registered(metrics, cdDriver) {
		t.Errorf("after accel-dra's uninstall the kubelet has no registered plugin of %s", cdDriver)
	}
	if n := nodeDevices(ctx, e.client, cdDriver, e.node); n != cdDevices {
		t.Errorf("%s publishes %d devices after accel-dra's uninstall, want %d", cdDriver, n, cdDevices)
	}
}

// installCDStandIn installs the ComputeDomain stand-in under NVIDIA's chart's release and
// namespace names.
func (e *env) installCDStandIn(ctx context.Context, t *testing.T) {
	t.Helper()
	values := filepath.Join(t.TempDir(), "cd.yaml")
	if err := os.WriteFile(values, []byte(cdStandIn), 0o644); err != nil {
		t.Fatal(err)
	}
	e.kubectl(ctx, t, "create", "namespace", cdNS)
	chart := filepath.Join(e.root, "deployments/helm/accel-dra")
	args := append([]string{"install", cdRelease, chart, "-n", cdNS, "-f", filepath.Join(chart, "values-mock.yaml"), "-f", values,
		"--wait", "--timeout", "5m"}, e.imageArgs()...)
	if out, err := e.helm(ctx, args...); err != nil {
		t.Fatalf("installing the ComputeDomain stand-in: %v\n%s", err, out)
	}
}

// startWithChannel runs a pod with a claim of a ComputeDomain channel (and, withGPU, one of a
// GPU of NVIDIA's class) until deleted.
func (e *env) startWithChannel(ctx context.Context, t *testing.T, name string, withGPU bool) {
	t.Helper()
	gpuRequest, script := "", `echo '== npu'; ls /dev | grep -E '^davinci[0-9]+$'; echo '== end'; exec sleep 3600`
	if withGPU {
		gpuRequest = `
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com`
		script = `echo '== smi'; nvidia-smi -L; ` + script
	}
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
      - name: channel
        exactly:
          deviceClassName: %[2]s%[3]s
---
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: %[4]s
    imagePullPolicy: Never
    command: ["sh", "-c", %[5]q]
    resources:
      claims:
      - name: devices
  resourceClaims:
  - name: devices
    resourceClaimTemplateName: %[1]s
`, name, cdClass, gpuRequest, e.workload, script))
	if _, err := framework.WaitForPodRunning(ctx, e.client, ns, name, 3*time.Minute); err != nil {
		t.Fatalf("pod %s: %v\n%s", name, err, e.describe(ctx, ns, name))
	}
}

// cdRestarts is how often the ComputeDomain stand-in's containers restarted.
func (e *env) cdRestarts(ctx context.Context, t *testing.T) int32 {
	t.Helper()
	pods, err := e.client.CoreV1().Pods(cdNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			n += c.RestartCount
		}
	}
	return n
}

// beyondRestart is a cdState less what the plugin renews when it starts: its sockets' inodes
// (each stays, as a socket), its instance lock and its slices' names and versions (their number
// stays).
func beyondRestart(state map[string]string) map[string]string {
	out := map[string]string{}
	slices := 0
	for k, v := range state {
		switch {
		case strings.HasPrefix(k, "slice "):
			slices++
		case strings.Contains(k, "/checkpoint/instances/"):
		case strings.HasPrefix(v, "socket "):
			out[k] = "socket"
		default:
			out[k] = v
		}
	}
	out["slices"] = fmt.Sprint(slices)
	return out
}

// cdState is what the ComputeDomain plugin keeps on the node: its directory (files by content),
// its registration socket (by inode: one made anew is another), its CDI specs, and its
// ResourceSlices (by resourceVersion).
func (e *env) cdState(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	const script = `for p in "$@"; do [ -e "$p" ] || { echo "$p missing"; continue; }
find "$p" \( -type f -exec sh -c 'printf "%s file %s\n" "$1" "$(sha256sum < "$1" | cut -c1-16)"' _ {} \; \) -o \( -type s -exec stat -c '%n socket %i' {} \; \) -o \( -type d -exec stat -c '%n dir %a' {} \; \)
done
for f in /var/run/cdi/accel-dra.io-npu*; do [ -e "$f" ] && printf "%s file %s\n" "$f" "$(sha256sum < "$f" | cut -c1-16)"; done; true`
	out := map[string]string{}
	for _, l := range lines(e.execOn(ctx, t, e.node, "sh", "-c", script, "sh", cdDir, cdSocket)) {
		name, v, _ := strings.Cut(l, " ")
		out[name] = v
	}
	list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + cdDriver})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		out["slice "+s.Name] = s.ResourceVersion
	}
	return out
}

// testConsumableShares runs NVIDIA's consumable-shares workloads, written from its
// demo/specs/consumable-shares (kubernetes-sigs/dra-driver-nvidia-gpu): Deployments whose
// replicas each get a claim from one template, with nvidia-smi -L in an ubuntu-like container.
// With accel-dra's consumable memory (NVIDIA's --consumable-shares=memory), claims of 4Gi share
// the GPUs: nine replicas on eight GPUs run, some GPU holds two shares, none gives out more
// memory than it has. A claim that asks for no memory (NVIDIA's unlimited and integer modes)
// gets the whole GPU, as in NVIDIA's memory mode.
func (e *env) testConsumableShares(ctx context.Context, t *testing.T) {
	deploy := func(name, template, capacity string, replicas int) {
		t.Helper()
		manifest := fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: %[1]s
  name: %[2]s
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com%[3]s
---
apiVersion: apps/v1
kind: Deployment
metadata:
  namespace: %[1]s
  name: sharing
spec:
  replicas: %[4]d
  selector:
    matchLabels: {app: sharing}
  template:
    metadata:
      labels: {app: sharing}
    spec:
      terminationGracePeriodSeconds: 1
      resourceClaims:
      - name: gpu
        resourceClaimTemplateName: %[2]s
      containers:
      - name: ctr
        image: %[5]s
        imagePullPolicy: Never
        command: ["sh", "-c"]
        args: ["nvidia-smi -L; echo 'sharing the GPU'; exec sleep 3600"]
        resources:
          claims:
          - name: gpu
      tolerations:
      - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
`, name, template, capacity, replicas, e.workload)
		f := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		e.kubectl(ctx, t, "apply", "-f", f)
	}
	// shares waits until the namespace's replicas run and returns, per GPU, the memory its
	// claims consume.
	shares := func(namespace string, replicas int) map[string][]resource.Quantity {
		t.Helper()
		var got map[string][]resource.Quantity
		var running int
		if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := e.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			running = 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			claims, err := e.client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			got = map[string][]resource.Quantity{}
			for _, c := range claims.Items {
				if c.Status.Allocation == nil {
					continue
				}
				for _, r := range c.Status.Allocation.Devices.Results {
					got[r.Device] = append(got[r.Device], r.ConsumedCapacity["memory"])
				}
			}
			return running == replicas, nil
		}); err != nil {
			t.Fatalf("%d of %d replicas in %s running: %v\n%s", running, replicas, namespace, err, e.kubectl(ctx, t, "get", "pods,resourceclaims", "-n", namespace, "-o", "wide"))
		}
		return got
	}
	const gpuMemory = "80Gi" // the mock's H100 80GB HBM3

	// NVIDIA's memory-sharing.yaml, scaled past the node's eight GPUs.
	deploy("gpu-share-memory", "gpu-4gi", `
          capacity:
            requests:
              memory: 4Gi`, 9)
	perGPU := shares("gpu-share-memory", 9)
	shared := false
	for dev, qs := range perGPU {
		sum := resource.MustParse("0")
		for _, q := range qs {
			if q.Cmp(resource.MustParse("4Gi")) != 0 {
				t.Errorf("%s: a claim consumes %s, want the 4Gi it asked for", dev, q.String())
			}
			sum.Add(q)
		}
		if sum.Cmp(resource.MustParse(gpuMemory)) > 0 {
			t.Errorf("%s: claims consume %s, more than its %s", dev, sum.String(), gpuMemory)
		}
		shared = shared || len(qs) > 1
	}
	if !shared {
		t.Errorf("nine 4Gi claims on eight GPUs, none shares one: %v", perGPU)
	}
	e.kubectl(ctx, t, "delete", "namespace", "gpu-share-memory", "--wait", "--timeout=3m")

	// NVIDIA's unlimited-sharing.yaml (and integer-sharing.yaml's template): no memory asked,
	// so each claim gets the whole GPU.
	deploy("gpu-share-unlimited", "gpu-unlimited", "", 2)
	for dev, qs := range shares("gpu-share-unlimited", 2) {
		if len(qs) != 1 || qs[0].Cmp(resource.MustParse(gpuMemory)) != 0 {
			t.Errorf("%s: claims consume %v, want one claim of the whole %s", dev, qs, gpuMemory)
		}
	}
	e.kubectl(ctx, t, "delete", "namespace", "gpu-share-unlimited", "--wait", "--timeout=3m")
}
