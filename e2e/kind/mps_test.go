//go:build e2e

package kind

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// mpsNonRootScript is a CUDA process of a non-root container as the GPU mock's MPS stand-in
// plays it: the daemon starts a server as the container's user, which must reach the pipe
// directory as that user (docs/sharing.md).
const mpsNonRootScript = `id -u; nvidia-cuda-mps-control alloc 64; echo "== alloc $?"; echo '== end'; exec sleep 3600`

// testMPSNode (#27 items 3 and 4): an MPS claim's workload that runs as user 1000 under
// runAsNonRoot, as Pod Security "restricted" makes every pod, gets its MPS server; its daemon
// pod runs on the host's network (no pod address of its own), with the chart's pull secrets,
// no liveness probe, and a controller owner, so that `kubectl drain --ignore-daemonsets` of
// the node works without --force and waits for the daemon until its workload is gone.
//
// The driver root is laid out as a host root is where the kubelet made its directories:
// var/lib/kubelet and its plugins directory of mode 0750 (a driver installed on the host has
// the driver root /, whose /var/lib/kubelet is the kubelet's). The workload is a Job's pod, as
// drain evicts only pods that a controller would recreate.
func (e *env) testMPSNode(ctx context.Context, t *testing.T) {
	root := nvmlmock.GeneratedDriverRoot(filepath.Join(gpuData, "mock"))
	e.exec(ctx, "sh", "-c", "mkdir -p "+root+"/var/lib/kubelet/plugins && chmod 0750 "+root+"/var/lib/kubelet "+root+"/var/lib/kubelet/plugins")

	const name = "mps-nonroot"
	tmpl := claimTemplate(name, "", `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`)
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), RunAsNonRoot: ptr.To(true)},
				ResourceClaims:                []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: &tmpl.Name}},
				Containers: []corev1.Container{{
					Name: "ctr", Image: e.workload, ImagePullPolicy: corev1.PullNever,
					Command:   []string{"sh", "-c", mpsNonRootScript},
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}},
				}},
			}},
		},
	}
	if _, err := e.client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := func(ctx context.Context) {
		_ = e.client.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + name})
			return err == nil && len(pods.Items) == 0, nil
		})
		_ = e.client.ResourceV1().ResourceClaimTemplates(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, _ = e.cmd(ctx, nil, filepath.Join(e.kubeBin, "kubectl"), "--kubeconfig", e.kubeconfig, "uncordon", e.node)
		stop(ctx)
	})
	var pod string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + name})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		pod = pods.Items[0].Name
		return true, nil
	}); err != nil {
		t.Fatalf("job %s made no pod: %v", name, err)
	}
	out := e.podOutput(ctx, ns, pod, 3*time.Minute)
	logs := e.exec(ctx, "sh", "-c", "cat "+gpuData+"/mps/*/log/control.log 2>/dev/null; true")
	if !strings.Contains(out, "== alloc 0\n") {
		t.Errorf("the MPS client of user 1000 failed:\n%s\nthe daemons' logs:\n%s", out, logs)
	} else if !strings.Contains(logs, "server started uid=1000") {
		t.Errorf("no MPS server of user 1000 started; the daemons' logs:\n%s", logs)
	}

	daemons, err := e.client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=mps-control-daemon"})
	if err != nil || len(daemons.Items) != 1 {
		t.Fatalf("MPS daemon pods: %v, %d; want 1", err, len(daemons.Items))
	}
	daemon := daemons.Items[0]
	e.checkMPSDaemonPod(ctx, t, &daemon)

	// kubectl drain as an administrator runs it, with a deadline so that a refusal or a hang
	// fails the test; it evicts the Job's pod and the daemon's, which serves until the
	// workload is gone and the plugin stops it.
	start := time.Now()
	drain, err := e.cmd(ctx, nil, filepath.Join(e.kubeBin, "kubectl"), "--kubeconfig", e.kubeconfig, "drain", e.node, "--ignore-daemonsets", "--timeout=4m")
	t.Logf("kubectl drain --ignore-daemonsets %s (%v):\n%s", e.node, time.Since(start).Round(time.Second), drain)
	if err != nil {
		t.Errorf("kubectl drain --ignore-daemonsets: %v", err)
	}
	if err == nil {
		if _, err := e.client.CoreV1().Pods(releaseNS).Get(ctx, daemon.Name, metav1.GetOptions{}); err == nil {
			t.Errorf("MPS daemon pod %s still there after the drain", daemon.Name)
		}
	}
	e.kubectl(ctx, t, "uncordon", e.node)
	stop(ctx)
	e.expectNoLeftovers(ctx, t)
}

// checkMPSDaemonPod checks what a cluster needs of a daemon pod: the node's address (host
// network, no CNI address), the chart's pull secrets, no liveness probe that could restart a
// serving daemon, and a controller owner (drain refuses pods without one unless --force).
func (e *env) checkMPSDaemonPod(ctx context.Context, t *testing.T, daemon *corev1.Pod) {
	t.Helper()
	node, err := e.client.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodeIPs []string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIPs = append(nodeIPs, a.Address)
		}
	}
	if !daemon.Spec.HostNetwork || !slices.Contains(nodeIPs, daemon.Status.PodIP) {
		t.Errorf("MPS daemon pod %s: hostNetwork %v, pod IP %q; want the host's network and one of the node's addresses %v", daemon.Name, daemon.Spec.HostNetwork, daemon.Status.PodIP, nodeIPs)
	}
	for _, c := range daemon.Spec.Containers {
		if c.LivenessProbe != nil {
			t.Errorf("MPS daemon pod %s: container %s has a liveness probe, which restarts a serving daemon and ends its clients", daemon.Name, c.Name)
		}
	}
	if ref := metav1.GetControllerOf(daemon); ref == nil {
		t.Errorf("MPS daemon pod %s has no controller owner", daemon.Name)
	} else {
		t.Logf("MPS daemon pod %s: controller %s %s", daemon.Name, ref.Kind, ref.Name)
	}
	ds, err := e.client.AppsV1().DaemonSets(releaseNS).Get(ctx, release+"-gpu-plugin", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(daemon.Spec.ImagePullSecrets), fmt.Sprint(ds.Spec.Template.Spec.ImagePullSecrets); got != want {
		t.Errorf("MPS daemon pod %s: imagePullSecrets %s, want the GPU plugin's %s", daemon.Name, got, want)
	}
}
