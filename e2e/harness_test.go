//go:build e2e

// Package e2e holds the end-to-end tests. They need real Kubernetes binaries (see package
// e2e/cluster) and run only with the e2e build tag:
//
//	go test -tags e2e -v -timeout 30m ./e2e/
package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/cluster"
)

// hostSysctls are the kernel settings a kubelet rewrites when it is not confined; the harness
// must leave them alone.
var hostSysctls = []string{
	"/proc/sys/vm/overcommit_memory",
	"/proc/sys/kernel/panic",
	"/proc/sys/kernel/panic_on_oops",
}

// hostPaths are directories an unconfined kubelet creates outside its --root-dir.
var hostPaths = []string{"/var/log/containers", "/var/log/pods", "/var/lib/kubelet", "/usr/libexec/kubernetes"}

// TestHarness checks the harness itself: a control plane, one real kubelet on the fake runtime,
// and a plain pod that runs, with the host's kernel settings and directories untouched.
func TestHarness(t *testing.T) {
	sysctlsBefore := readFiles(t, hostSysctls)
	pathsBefore := existing(hostPaths)
	checkHost := func(when string) {
		t.Helper()
		for path, v := range readFiles(t, hostSysctls) {
			if v != sysctlsBefore[path] {
				t.Errorf("%s: host %s changed from %q to %q", when, path, sysctlsBefore[path], v)
			}
		}
		for path, ok := range existing(hostPaths) {
			if ok != pathsBefore[path] {
				t.Errorf("%s: host path %s existence changed from %v to %v", when, path, pathsBefore[path], ok)
			}
		}
	}
	// Registered before the cluster's cleanup, so it runs after the kubelet has stopped.
	t.Cleanup(func() { checkHost("after cluster stop") })

	start := time.Now()
	c := cluster.StartForTest(t, cluster.Options{})
	t.Logf("control plane started in %s", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start = time.Now()
	node, err := c.AddNode(ctx, cluster.NodeOptions{Name: "node-1", Labels: map[string]string{"e2e.accel-dra.io/role": "smoke"}})
	if err != nil {
		t.Fatalf("adding node: %v", err)
	}
	t.Logf("node %s ready in %s", node.Name, time.Since(start).Round(time.Millisecond))

	client := c.Client()
	n, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Labels["e2e.accel-dra.io/role"]; got != "smoke" {
		t.Errorf("node label e2e.accel-dra.io/role = %q, want smoke", got)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"e2e.accel-dra.io/role": "smoke"},
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers: []corev1.Container{{
				Name:  "pause",
				Image: "registry.k8s.io/pause:3.10",
				Env:   []corev1.EnvVar{{Name: "SMOKE", Value: "1"}},
			}},
		},
	}
	start = time.Now()
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	waitPodRunning(ctx, t, client, pod.Namespace, pod.Name)
	t.Logf("pod running in %s", time.Since(start).Round(time.Millisecond))

	rec, err := node.CRI.WaitForContainer(ctx, pod.Namespace, pod.Name, "pause")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.CDIDevices) != 0 || len(rec.Devices) != 0 {
		t.Errorf("container record has CDI devices %v / device nodes %v, want none", rec.CDIDevices, rec.Devices)
	}
	if !slices.Contains(rec.Env, "SMOKE=1") {
		t.Errorf("container env %v lacks SMOKE=1", rec.Env)
	}
	if rec.Spec == nil || rec.ContainerName != "pause" || rec.PodUID == "" {
		t.Errorf("incomplete container record: %+v", rec)
	}
	checkHost("while the kubelet runs")

	// A graceful delete goes through the kubelet (StopContainer, StopPodSandbox) before the pod
	// object disappears.
	if err := client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("pod was not deleted by the kubelet: %v", err)
	}
}

func waitPodRunning(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err == nil {
		return
	}
	msg := fmt.Sprintf("pod %s/%s not Running: %v", ns, name, err)
	if last != nil {
		msg += fmt.Sprintf("\nphase %s, node %q, conditions %+v, container statuses %+v", last.Status.Phase, last.Spec.NodeName, last.Status.Conditions, last.Status.ContainerStatuses)
	}
	if events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}); err == nil {
		for _, e := range events.Items {
			msg += fmt.Sprintf("\nevent %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	t.Fatal(msg)
}

func readFiles(t *testing.T, paths []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("reading %s: %v", p, err)
		}
		out[p] = strings.TrimSpace(string(data))
	}
	return out
}

func existing(paths []string) map[string]bool {
	out := map[string]bool{}
	for _, p := range paths {
		_, err := os.Stat(p)
		out[p] = err == nil
	}
	return out
}
