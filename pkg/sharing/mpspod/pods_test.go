package mpspod

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/sharing"
)

const (
	gpuKey   = "GPU-3e8f5a6c-0b2a-5e7b-2c1d-2b6c4e5f7a8b"
	claimKey = "0f4c1d2e-9a8b-4c7d-8e6f-5a4b3c2d1e0f"
	ns       = "accel-dra"
)

func TestName(t *testing.T) {
	for key, want := range map[string]string{
		gpuKey:   "accel-dra-mps-gpu-3e8f5a6c-0b2a-5e7b-2c1d-2b6c4e5f7a8b",
		claimKey: "accel-dra-mps-" + claimKey,
	} {
		if got := Name(key); got != want {
			t.Errorf("Name(%s) = %s, want %s", key, got, want)
		}
	}
	// Keys that do not make a pod name are hashed, distinctly, to a valid one.
	odd := []string{"MIG-GPU-3e8f5a6c-0b2a-5e7b-2c1d-2b6c4e5f7a8b/1/0", "MIG-GPU-3e8f5a6c-0b2a-5e7b-2c1d-2b6c4e5f7a8b/2/0", strings.Repeat("k", 60)}
	var names []string
	for _, k := range odd {
		n := Name(k)
		if errs := validation.IsDNS1123Label(n); len(errs) != 0 || !strings.HasPrefix(n, NamePrefix) || n != Name(k) {
			t.Errorf("Name(%s) = %s: %v", k, n, errs)
		}
		names = append(names, n)
	}
	if slices.Sort(names); len(slices.Compact(names)) != len(odd) {
		t.Errorf("hashed names collide: %v", names)
	}
}

func testPods(client *fake.Clientset) Pods {
	return Pods{Client: client, Namespace: ns, NodeName: "node-a", DriverName: "gpu.accel-dra.io",
		Image: "accel-dra-kubelet-plugin:v1", HostDriverRoot: "/", ControlPath: sharing.DefaultControlPath,
		PriorityClassName: "system-node-critical", ReadyTimeout: 2 * time.Second, StopTimeout: 2 * time.Second}
}

// testNode is the plugin's Node, the daemon pods' owner.
func testNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "uid-node-a"}}
}

func spec(key string) sharing.DaemonSpec {
	return sharing.DaemonSpec{Key: key, Dir: "/var/lib/kubelet/plugins/gpu.accel-dra.io/mps/" + key, Devices: []string{gpuKey},
		Limits: sharing.MPSLimits{ActiveThreadPercentage: 40, PinnedMemoryMiB: map[string]int64{gpuKey: 1024}}}
}

// TestPod: the daemon's pod is bound to the node, runs the plugin's image as the daemon's runner
// with the daemon's devices and limits, chrooted into the host's driver root, sees the host's
// PIDs (the chroot's /proc is the host's), is probed through the control pipe, and gets no API
// credentials. Without a driver root it mounts the control binary from the host instead.
func TestPod(t *testing.T) {
	p := testPods(fake.NewClientset(testNode()))
	s := spec(gpuKey)
	pod := p.Pod(s)
	c := pod.Spec.Containers[0]
	if pod.Name != Name(gpuKey) || pod.Namespace != ns || pod.Spec.NodeName != "node-a" || !pod.Spec.HostPID ||
		*pod.Spec.AutomountServiceAccountToken || pod.Spec.PriorityClassName != "system-node-critical" ||
		pod.Labels[ComponentLabel] != Component || pod.Labels[DriverLabel] != "gpu.accel-dra.io" || pod.Annotations[KeyAnnotation] != gpuKey {
		t.Errorf("pod metadata or spec: %+v %+v", pod.ObjectMeta, pod.Spec)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"mps-control-daemon run", "--dir=" + s.Dir, "--control-root=" + DriverRootMount, "--control=" + sharing.DefaultControlPath,
		"--devices=" + gpuKey, "--active-thread-percentage=40", "--pinned-memory-mib=" + gpuKey + "=1024"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--check-period") {
		t.Errorf("args %q: the runner checks its daemon itself, which the kubelet's probes do", args)
	}
	if c.Image != p.Image || c.Command[0] != DefaultCommand || c.SecurityContext == nil || !*c.SecurityContext.Privileged {
		t.Errorf("container %+v", c)
	}
	// A private registry's image needs the secrets the chart gives its own pods.
	p.ImagePullSecrets = []string{"regcred", "mirror"}
	if got := p.Pod(s).Spec.ImagePullSecrets; len(got) != 2 || got[0].Name != "regcred" || got[1].Name != "mirror" {
		t.Errorf("imagePullSecrets %+v, want regcred and mirror", got)
	}
	p.ImagePullSecrets = nil
	// What a cluster needs of it (#27): the host's network, no probe while it serves, a
	// controller owner that drain accepts, the node, and time to serve an eviction out.
	if !pod.Spec.HostNetwork {
		t.Error("the daemon's pod is not on the host's network")
	}
	if c.LivenessProbe != nil || c.ReadinessProbe != nil {
		t.Errorf("the daemon's pod has a probe that runs while it serves: liveness %+v, readiness %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g != 3600 {
		t.Errorf("terminationGracePeriodSeconds %v, want 3600", g)
	}
	if len(pod.OwnerReferences) != 0 {
		t.Errorf("owner without the node's UID: %+v", pod.OwnerReferences)
	}
	p.NodeUID = "uid-node-a"
	owner := metav1.GetControllerOf(p.Pod(s))
	if owner == nil || owner.APIVersion != "v1" || owner.Kind != "Node" || owner.Name != "node-a" || owner.UID != "uid-node-a" || owner.BlockOwnerDeletion == nil || *owner.BlockOwnerDeletion {
		t.Errorf("controller owner %+v, want the Node node-a, not blocking its deletion", owner)
	}
	p.NodeUID = ""
	if got := strings.Join(c.StartupProbe.Exec.Command, " "); !strings.HasSuffix(got, "probe --dir="+s.Dir+" --control="+sharing.DefaultControlPath+" --control-root="+DriverRootMount+" --ready") {
		t.Errorf("startup probe %q", got)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name {
				mounts[m.MountPath] = v.HostPath.Path
			}
		}
	}
	if mounts[s.Dir] != s.Dir || mounts[DriverRootMount] != "/" || len(mounts) != 2 {
		t.Errorf("mounts (container path: host path) %v", mounts)
	}

	p.HostDriverRoot, p.ControlPath = "", "/opt/mock/nvidia-cuda-mps-control"
	pod = p.Pod(s)
	c = pod.Spec.Containers[0]
	if args := strings.Join(c.Args, " "); strings.Contains(args, "--control-root") || !strings.Contains(args, "--control=/opt/mock/nvidia-cuda-mps-control") {
		t.Errorf("args without driver root %q", args)
	}
	found := false
	for _, v := range pod.Spec.Volumes {
		found = found || v.HostPath.Path == p.ControlPath && *v.HostPath.Type == corev1.HostPathFile
	}
	if !found {
		t.Errorf("the control binary is not mounted from the host: %+v", pod.Spec.Volumes)
	}
}

// kubelet marks the pods it is told about ready, as a node's kubelet does once their startup
// probe succeeds.
func setReady(t *testing.T, client *fake.Clientset, name string, ready bool) {
	t.Helper()
	pod, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if _, err := client.CoreV1().Pods(ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// whenCreated runs fn once the pod name exists.
func whenCreated(client *fake.Clientset, name string, fn func()) {
	go func() {
		for {
			if _, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); err == nil {
				fn()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// TestPodsLifecycle: Start creates the daemon's pod and returns once it is ready; Ready finds it
// by name (another plugin instance, whatever its PID namespace); Stop deletes it and returns
// once it is gone; a pod of the same name that is not this node's daemon is neither adopted nor
// deleted.
func TestPodsLifecycle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(testNode())
	p := testPods(client)
	s := spec(gpuKey)
	s.Dir = t.TempDir()
	if ready, err := p.Ready(ctx, s); err != nil || ready {
		t.Fatalf("Ready without a pod: %v, %v", ready, err)
	}
	whenCreated(client, Name(gpuKey), func() { setReady(t, client, Name(gpuKey), true) })
	if err := p.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	if pod, err := client.CoreV1().Pods(ns).Get(ctx, Name(gpuKey), metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if owner := metav1.GetControllerOf(pod); owner == nil || owner.Kind != "Node" || owner.UID != "uid-node-a" {
		t.Errorf("the started pod's controller owner is %+v, want the Node node-a", owner)
	}
	// The other instance of a rolling update.
	other := testPods(client)
	if ready, err := other.Ready(ctx, s); err != nil || !ready {
		t.Fatalf("Ready of the started daemon, from another instance: %v, %v", ready, err)
	}
	if keys, err := other.Keys(ctx); err != nil || !slices.Equal(keys, []string{gpuKey}) {
		t.Errorf("Keys = %v, %v", keys, err)
	}
	if err := other.Stop(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(ns).Get(ctx, Name(gpuKey), metav1.GetOptions{}); err == nil {
		t.Error("the daemon's pod is left after Stop")
	}
	// Its runner was asked to stop, so that it does not serve on after SIGTERM as after an
	// eviction.
	if _, err := os.Stat(filepath.Join(s.Dir, "stop")); err != nil {
		t.Errorf("Stop did not ask the runner to stop: %v", err)
	}
	if err := p.Stop(ctx, s); err != nil {
		t.Errorf("Stop of a stopped daemon: %v", err)
	}

	// Another node's pod under the name.
	foreign := p.Pod(s)
	foreign.Spec.NodeName = "node-b"
	if _, err := client.CoreV1().Pods(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ready(ctx, s); err == nil || !strings.Contains(err.Error(), `node "node-b"`) {
		t.Errorf("Ready with another node's pod of the name: %v", err)
	}
	if err := p.Stop(ctx, s); err == nil {
		t.Error("Stop deleted another node's pod")
	}
	if keys, err := p.Keys(ctx); err != nil || len(keys) != 0 {
		t.Errorf("Keys with another node's pod: %v, %v", keys, err)
	}
}

// TestPodsNotReady: a pod that does not become ready is an error that says what it waits for;
// one that is not ready now but becomes so (its container restarting) is waited for and
// adopted.
func TestPodsNotReady(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(testNode())
	p := testPods(client)
	s := spec(claimKey)
	whenCreated(client, Name(claimKey), func() {
		pod, _ := client.CoreV1().Pods(ns).Get(ctx, Name(claimKey), metav1.GetOptions{})
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, RestartCount: 2,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "the MPS control daemon ended at start"}}}}
		_, _ = client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	})
	err := p.Start(ctx, s)
	for _, want := range []string{"not ready after 2s", "CrashLoopBackOff", "last exit 1: the MPS control daemon ended at start", "2 restarts"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Start of a pod that does not get ready: %v, want %q", err, want)
		}
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		setReady(t, client, Name(claimKey), true)
	}()
	if ready, err := p.Ready(ctx, s); err != nil || !ready {
		t.Errorf("Ready of a pod that becomes ready: %v, %v", ready, err)
	}
	// A pod that has ended (deleted by hand with restartPolicy changed, evicted) is not ready
	// and not waited for.
	pod, _ := client.CoreV1().Pods(ns).Get(ctx, Name(claimKey), metav1.GetOptions{})
	pod.Status.Phase, pod.Status.Conditions = corev1.PodFailed, nil
	if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if ready, err := p.Ready(ctx, s); err != nil || ready {
		t.Errorf("Ready of an evicted pod: %v, %v", ready, err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("Ready waited %s for a pod that has ended", time.Since(start))
	}
}

// TestPodsKeys: the sweep sees this driver's daemon pods of this node only.
func TestPodsKeys(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(testNode())
	p := testPods(client)
	mine, other, otherDriver := p.Pod(spec(gpuKey)), p.Pod(spec(claimKey)), p.Pod(spec("GPU-other"))
	other.Spec.NodeName = "node-b"
	otherDriver.Labels[DriverLabel] = "gpu.example.com"
	for _, pod := range []*corev1.Pod{mine, other, otherDriver} {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if keys, err := p.Keys(ctx); err != nil || !slices.Equal(keys, []string{gpuKey}) {
		t.Errorf("Keys = %v, %v; want this node's and driver's only", keys, err)
	}
}

// TestPodsStartWithoutNode: a daemon pod needs its owner, the Node; without it (an API server
// that does not answer, a Node that is gone) Start fails, saying so, and creates nothing.
func TestPodsStartWithoutNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	p := testPods(client)
	err := p.Start(ctx, spec(gpuKey))
	if err == nil || !strings.Contains(err.Error(), "reading its owner, node node-a") {
		t.Errorf("Start without the Node: %v", err)
	}
	if pods, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("pods created without an owner: %d", len(pods.Items))
	}
}
