package cleanup

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

func claim(name, driver string, reservedFor ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if driver != "" {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: driver, Pool: "node-a", Device: "gpu-0"}},
		}}
	}
	for _, p := range reservedFor {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("u-" + p)})
	}
	return c
}

func TestCheck(t *testing.T) {
	drivers := []Scope{{Driver: "gpu.accel-dra.io"}, {Driver: "npu.accel-dra.io"}}
	for _, tc := range []struct {
		name   string
		claims []runtime.Object
		inUse  []string
	}{
		{name: "no claims"},
		{name: "allocated, reserved for no one", claims: []runtime.Object{claim("idle", "gpu.accel-dra.io")}},
		{name: "not allocated", claims: []runtime.Object{claim("pending", "", "pod-a")}},
		{name: "another driver's", claims: []runtime.Object{claim("other", "gpu.nvidia.com", "pod-a")}},
		{
			name:   "in use",
			claims: []runtime.Object{claim("train", "gpu.accel-dra.io", "pod-a"), claim("infer", "npu.accel-dra.io", "pod-b"), claim("idle", "gpu.accel-dra.io")},
			inUse:  []string{"infer", "train"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(context.Background(), fake.NewClientset(tc.claims...), drivers)
			var iu *InUseError
			if len(tc.inUse) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.As(err, &iu) {
				t.Fatalf("error %v, want an InUseError", err)
			}
			var got []string
			for _, c := range iu.Claims {
				got = append(got, c.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.inUse, ",") {
				t.Errorf("in use %v, want %v", got, tc.inUse)
			}
			if !strings.Contains(err.Error(), "ns/train (for pods/pod-a)") {
				t.Errorf("message %q does not name the claim and its pod", err)
			}
		})
	}
}

func daemonSet(desired, ready int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "rel", Name: "cleanup-gpu", Generation: 1},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cleanup"}}},
		Status:     appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: desired, NumberReady: ready, UpdatedNumberScheduled: desired},
	}
}

func cleanupPod(node string, exit int32, msg string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "rel", Name: "cleanup-" + node, Labels: map[string]string{"app": "cleanup"}}, Spec: corev1.PodSpec{NodeName: node}}
	st := corev1.ContainerStatus{Name: "cleanup"}
	if exit != 0 {
		st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: exit, Message: msg}
	}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{st}
	return p
}

func TestWaitForDaemonSets(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		err  string // "" for done
	}{
		{name: "no nodes", objs: []runtime.Object{daemonSet(0, 0)}},
		{name: "every node", objs: []runtime.Object{daemonSet(2, 2), cleanupPod("a", 0, ""), cleanupPod("b", 0, "")}},
		{name: "one node pending", objs: []runtime.Object{daemonSet(2, 1), cleanupPod("a", 0, "")}, err: "context deadline exceeded"},
		{name: "refused on a node", objs: []runtime.Object{daemonSet(2, 1), cleanupPod("a", 0, ""), cleanupPod("b", 1, "1 claim(s) of gpu.accel-dra.io are still prepared")}, err: "node b: 1 claim(s) of gpu.accel-dra.io are still prepared"},
		{name: "no DaemonSet", err: "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			err := WaitForDaemonSets(ctx, fake.NewClientset(tc.objs...), "rel", []string{"cleanup-gpu"}, 10*time.Millisecond)
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one with %q", err, tc.err)
			}
		})
	}
}

// onNode allocates c on node, as the scheduler records a node-local device's allocation.
func onNode(c *resourceapi.ResourceClaim, node string) *resourceapi.ResourceClaim {
	c.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
	return c
}

func labelledNode(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// TestCheckScoped: in NVIDIA's compatibility mode the release shares its driver name with
// NVIDIA's driver, node by node (docs/migrate-from-nvidia.md): only claims allocated on the
// nodes handed over to accel-dra are the release's. NVIDIA's claims on its own nodes never
// block the uninstall; a claim whose allocation names no node could be on any, and counts.
func TestCheckScoped(t *testing.T) {
	handedOver := map[string]string{"accel-dra.io/nvidia-compat": "true"}
	objs := []runtime.Object{
		labelledNode("nvidia-node", map[string]string{"gpu": "yes"}),
		labelledNode("accel-node", handedOver),
		onNode(claim("nvidia-train", "gpu.nvidia.com", "pod-n"), "nvidia-node"),
		onNode(claim("nvidia-idle", "gpu.nvidia.com"), "accel-node"),
	}
	scopes := []Scope{{Driver: "gpu.nvidia.com", Nodes: "accel-dra.io/nvidia-compat=true"}, {Driver: "npu.accel-dra.io"}}
	if err := Check(context.Background(), fake.NewClientset(objs...), scopes); err != nil {
		t.Fatalf("NVIDIA's claim on NVIDIA's node refused the uninstall: %v", err)
	}

	objs = append(objs,
		onNode(claim("accel-train", "gpu.nvidia.com", "pod-a"), "accel-node"),
		claim("anywhere", "gpu.nvidia.com", "pod-b"),
		onNode(claim("npu-train", "npu.accel-dra.io", "pod-c"), "nvidia-node"),
	)
	err := Check(context.Background(), fake.NewClientset(objs...), scopes)
	var iu *InUseError
	if !errors.As(err, &iu) {
		t.Fatalf("error %v, want an InUseError", err)
	}
	var got []string
	for _, c := range iu.Claims {
		got = append(got, c.Name)
	}
	if want := "accel-train,anywhere,npu-train"; strings.Join(got, ",") != want {
		t.Errorf("in use %v, want %s (not nvidia-train, on a node not handed over)", got, want)
	}

	if err := Check(context.Background(), fake.NewClientset(objs...), []Scope{{Driver: "gpu.nvidia.com", Nodes: "not a selector=="}}); err == nil || !strings.Contains(err.Error(), "gpu.nvidia.com") {
		t.Errorf("a bad node selector: %v, want an error naming the driver", err)
	}
}

func TestParseScopes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		drivers, scoped []string
		want            []Scope
		err             string
	}{
		{name: "unscoped", drivers: []string{"gpu.accel-dra.io", "npu.accel-dra.io"}, want: []Scope{{Driver: "gpu.accel-dra.io"}, {Driver: "npu.accel-dra.io"}}},
		{
			name: "compatibility mode", drivers: []string{"gpu.nvidia.com", "npu.accel-dra.io"}, scoped: []string{"gpu.nvidia.com=accel-dra.io/nvidia-compat=true"},
			want: []Scope{{Driver: "gpu.nvidia.com", Nodes: "accel-dra.io/nvidia-compat=true"}, {Driver: "npu.accel-dra.io"}},
		},
		{name: "no selector", scoped: []string{"gpu.nvidia.com"}, err: "want DRIVER=SELECTOR"},
		{name: "bad selector", scoped: []string{"gpu.nvidia.com=a=b=c"}, err: `--driver-on-nodes="gpu.nvidia.com=a=b=c"`},
		{name: "nothing", err: "no driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseScopes(tc.drivers, tc.scoped)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("scopes %v, want %v", got, tc.want)
			}
		})
	}
}
