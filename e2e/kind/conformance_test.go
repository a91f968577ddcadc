//go:build e2e

package kind

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
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
	"k8s.io/client-go/tools/clientcmd"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/framework"
)

// The proposed upstream DRA driver conformance suite names seven behaviours of any DRA driver:
// kubelet registration; a ResourceSlice with at least one device; a claim allocated; Prepare
// passes; the pod runs with the driver's environment injected; no
// FailedUnprepareDynamicResources; the device reused after cleanup. conformance checks them
// for one driver and DeviceClass, knowing nothing of the driver but its name, so that the
// upstream suite can replace it when it lands. It runs here for gpu.accel-dra.io and
// npu.accel-dra.io (TestKind/Conformance) and gpu.nvidia.com in the compatibility mode
// (TestNVIDIACompat/Conformance); TestConformance runs it against any cluster:
//
//	KUBECONFIG=... go test -tags e2e ./e2e/kind/ -run TestConformance \
//	  -driver-name=gpu.nvidia.com -device-class=gpu.nvidia.com -node=<node> [-image=busybox:1.36]
var (
	conformanceDriver = flag.String("driver-name", "", "TestConformance: the DRA driver to check (skipped when empty)")
	conformanceClass  = flag.String("device-class", "", "TestConformance: a DeviceClass of the driver")
	conformanceNode   = flag.String("node", "", "TestConformance: the node whose driver is checked")
	conformanceImage  = flag.String("image", "busybox:1.36", "TestConformance: an image with sh, env and sleep")
)

// conformanceTarget is what conformance needs of a cluster.
type conformanceTarget struct {
	client kubernetes.Interface
	node   string
	image  string
	// pullPolicy is the image's: Never where the harness loaded it into the node.
	pullPolicy corev1.PullPolicy
	// nodeFiles returns the content of the files that a shell glob matches on the node.
	nodeFiles func(ctx context.Context, glob string) (string, error)
	// metrics returns the node's kubelet metrics.
	metrics func(ctx context.Context) (string, error)
}

// TestConformance runs conformance against the cluster of $KUBECONFIG, for -driver-name.
func TestConformance(t *testing.T) {
	if *conformanceDriver == "" {
		t.Skip("no -driver-name: TestConformance checks a cluster of $KUBECONFIG only when asked; the suite's own drivers are checked by TestKind/Conformance and TestNVIDIACompat/Conformance")
	}
	if *conformanceClass == "" || *conformanceNode == "" {
		t.Fatal("-device-class and -node are needed with -driver-name")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tgt := conformanceTarget{client: client, node: *conformanceNode, image: *conformanceImage, pullPolicy: corev1.PullIfNotPresent,
		metrics: func(ctx context.Context) (string, error) {
			b, err := client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", *conformanceNode, "proxy/metrics").DoRaw(ctx)
			return string(b), err
		}}
	conformance(ctx, t, tgt, *conformanceDriver, *conformanceClass)
}

// conformanceTarget of a kind env: the node's files by docker exec.
func (e *env) conformanceTarget() conformanceTarget {
	return conformanceTarget{client: e.client, node: e.node, image: e.workload, pullPolicy: corev1.PullNever,
		nodeFiles: func(ctx context.Context, glob string) (string, error) {
			return e.cmd(ctx, nil, "docker", "exec", e.node, "sh", "-c", "cat "+glob+" 2>/dev/null; true")
		},
		metrics: func(ctx context.Context) (string, error) {
			b, err := e.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", e.node, "proxy/metrics").DoRaw(ctx)
			return string(b), err
		}}
}

func conformance(ctx context.Context, t *testing.T, tgt conformanceTarget, driverName, deviceClass string) {
	name := "conformance-" + strings.ReplaceAll(driverName, ".", "-")
	step := func(what string, f func(t *testing.T)) {
		if !t.Run(what, f) {
			t.FailNow()
		}
	}

	step("KubeletRegistration", func(t *testing.T) {
		// The kubelet's plugin manager lists each registration socket it registered in
		// plugin_manager_total_plugins{state="actual_state_of_world"}.
		var metrics string
		if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			m, err := tgt.metrics(ctx)
			metrics = m
			return err == nil && registered(m, driverName), nil
		}); err != nil {
			t.Fatalf("the kubelet of %s lists no registered plugin socket of %s:\n%s", tgt.node, driverName, grepLines(metrics, "plugin_manager_total_plugins"))
		}
	})

	step("ResourceSlice", func(t *testing.T) {
		var n int
		if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			n = nodeDevices(ctx, tgt.client, driverName, tgt.node)
			return n > 0, nil
		}); err != nil {
			t.Fatalf("no ResourceSlice of %s on %s with a device", driverName, tgt.node)
		}
		t.Logf("%d devices of %s on %s", n, driverName, tgt.node)
	})

	// The first pod: one device of the class, its container printing its environment.
	pod := conformancePod(tgt, name)
	cleanup := func() {
		_ = framework.DeletePod(context.Background(), tgt.client, ns, pod.Name, 2*time.Minute)
		_ = tgt.client.ResourceV1().ResourceClaimTemplates(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	}
	t.Cleanup(cleanup)
	var claim *resourceapi.ResourceClaim
	step("ClaimAllocated", func(t *testing.T) {
		createConformancePod(ctx, t, tgt, pod, deviceClass, resourceapi.DeviceAllocationModeExactCount)
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			claim = podClaim(ctx, tgt.client, pod.Name)
			return claim != nil && claim.Status.Allocation != nil, nil
		}); err != nil {
			t.Fatalf("the claim of pod %s is not allocated: %v", pod.Name, err)
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != driverName {
				t.Errorf("the claim got device %s of driver %s, want %s", r.Device, r.Driver, driverName)
			}
		}
	})

	var out string
	step("PreparePasses", func(t *testing.T) {
		// The kubelet starts the container only once the driver prepared the claim.
		if _, err := framework.WaitForPodRunning(ctx, tgt.client, ns, pod.Name, 3*time.Minute); err != nil {
			t.Fatalf("pod %s does not run: %v%s", pod.Name, err, podEvents(ctx, tgt.client, pod.Name))
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			b, err := tgt.client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			out = string(b)
			return err == nil && strings.Contains(out, "== end"), nil
		}); err != nil {
			t.Fatalf("pod %s printed no environment: %q", pod.Name, out)
		}
	})

	step("DriverEnvironment", func(t *testing.T) {
		// The driver's environment is what its CDI specs for the claim give the container.
		if tgt.nodeFiles == nil {
			t.Skip("the node's CDI specs are not readable from here (TestConformance against a cluster of $KUBECONFIG); the kind runs read them with docker exec")
		}
		want := cdiEnv(ctx, t, tgt, string(claim.UID))
		if len(want) == 0 {
			t.Fatalf("no CDI spec on %s names claim %s with an environment", tgt.node, claim.UID)
		}
		got := lines(out)
		for _, kv := range want {
			if !slices.Contains(got, kv) {
				t.Errorf("the container's environment lacks %s, which the driver's CDI spec gives", kv)
			}
		}
	})

	step("NoFailedUnprepare", func(t *testing.T) {
		if err := framework.DeletePod(ctx, tgt.client, ns, pod.Name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		if ev := podEvents(ctx, tgt.client, pod.Name); strings.Contains(ev, "FailedUnprepareDynamicResources") {
			t.Errorf("events of pod %s:%s", pod.Name, ev)
		}
	})
	cleanup()

	step("DeviceReused", func(t *testing.T) {
		// Every device of the class on the node, the released one included.
		all := conformancePod(tgt, name+"-all")
		t.Cleanup(func() {
			_ = framework.DeletePod(context.Background(), tgt.client, ns, all.Name, 2*time.Minute)
			_ = tgt.client.ResourceV1().ResourceClaimTemplates(ns).Delete(context.Background(), all.Name, metav1.DeleteOptions{})
		})
		createConformancePod(ctx, t, tgt, all, deviceClass, resourceapi.DeviceAllocationModeAll)
		if _, err := framework.WaitForPodRunning(ctx, tgt.client, ns, all.Name, 3*time.Minute); err != nil {
			t.Fatalf("pod %s with every device of %s does not run: %v%s", all.Name, deviceClass, err, podEvents(ctx, tgt.client, all.Name))
		}
		c := podClaim(ctx, tgt.client, all.Name)
		var devs []string
		for _, r := range c.Status.Allocation.Devices.Results {
			devs = append(devs, r.Device)
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if !slices.Contains(devs, r.Device) {
				t.Errorf("the released device %s is not among %v", r.Device, devs)
			}
		}
	})
}

// registered reports whether kubelet metrics list a registered socket whose name has the
// driver's name.
func registered(metrics, driverName string) bool {
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "plugin_manager_total_plugins{") && strings.Contains(l, `state="actual_state_of_world"`) &&
			strings.Contains(l, driverName) && !strings.HasSuffix(l, " 0") {
			return true
		}
	}
	return false
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// nodeDevices counts the devices of driverName's slices on node.
func nodeDevices(ctx context.Context, client kubernetes.Interface, driverName, node string) int {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0
	}
	n := 0
	for _, s := range list.Items {
		if s.Spec.Driver == driverName && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			n += len(s.Spec.Devices)
		}
	}
	return n
}

func conformancePod(tgt conformanceTarget, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": tgt.node},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: tgt.image, ImagePullPolicy: tgt.pullPolicy,
				Command:   []string{"sh", "-c", "env; echo '== end'; exec sleep 3600"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: &name}},
		},
	}
}

func createConformancePod(ctx context.Context, t *testing.T, tgt conformanceTarget, pod *corev1.Pod, deviceClass string, mode resourceapi.DeviceAllocationMode) {
	t.Helper()
	req := resourceapi.ExactDeviceRequest{DeviceClassName: deviceClass, AllocationMode: mode}
	if mode == resourceapi.DeviceAllocationModeExactCount {
		req.Count = 1
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &req}},
		}}},
	}
	if _, err := tgt.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podClaim is the claim the pod's template made, nil before it exists.
func podClaim(ctx context.Context, client kubernetes.Interface, pod string) *resourceapi.ResourceClaim {
	p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil || len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return nil
	}
	c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return c
}

// podEvents are the pod's events, one per line, for messages.
func podEvents(ctx context.Context, client kubernetes.Interface, pod string) string {
	list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return "\n(events: " + err.Error() + ")"
	}
	var b strings.Builder
	for _, e := range list.Items {
		fmt.Fprintf(&b, "\n%s %s: %s", e.Type, e.Reason, e.Message)
	}
	return b.String()
}

// cdiEnv is the environment the CDI specs on the node give the claim's devices: the spec-level
// edits of each spec with a device named after the claim, and those devices' own.
func cdiEnv(ctx context.Context, t *testing.T, tgt conformanceTarget, claimUID string) []string {
	t.Helper()
	var env []string
	for _, dir := range []string{"/var/run/cdi", "/etc/cdi"} {
		out, err := tgt.nodeFiles(ctx, filepath.Join(dir, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			var spec cdispecs.Spec
			if err := dec.Decode(&spec); err != nil {
				t.Fatalf("a CDI spec in %s: %v", dir, err)
			}
			mine := false
			for _, d := range spec.Devices {
				if strings.Contains(d.Name, claimUID) {
					mine = true
					env = append(env, d.ContainerEdits.Env...)
				}
			}
			if mine {
				env = append(env, spec.ContainerEdits.Env...)
			}
		}
	}
	return env
}
