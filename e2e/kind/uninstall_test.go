//go:build e2e

package kind

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hookName is the uninstall clean-up's objects' name (templates/cleanup-hooks.yaml).
const hookName = release + "-cleanup"

// testUninstallRefused: while a GPU pod holds a claim, helm uninstall fails in its pre-delete
// hook with the claim and its pod named, and leaves the release as it was: the plugin still
// serves and the GPUs are still published. Once the pod is gone, Uninstall goes through.
func (e *env) testUninstallRefused(ctx context.Context, t *testing.T) {
	uids := e.startRunning(ctx, t, []workload{{name: "held"}})
	defer func() {
		if err := e.stopWorkload(ctx, "held"); err != nil {
			t.Error(err)
		}
	}()
	out, err := e.cmd(ctx, []string{"KUBECONFIG=" + e.kubeconfig}, filepath.Join(e.tools, "helm"), "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "3m")
	if err == nil {
		t.Fatalf("helm uninstall went through while pod held (%s) has a GPU claim:\n%s", uids["held"], out)
	}
	if !strings.Contains(out, "Job/"+releaseNS+"/"+hookName+"-check") {
		t.Errorf("helm uninstall failed, but not in the pre-delete check:\n%s", out)
	}
	// The Job's log says which claims; helm says only that the hook failed.
	logs, _ := e.cmd(ctx, nil, filepath.Join(e.kubeBin, "kubectl"), "--kubeconfig", e.kubeconfig, "logs", "-n", releaseNS, "job/"+hookName+"-check")
	if !strings.Contains(logs, "default/held-") || !strings.Contains(logs, "pods/held") {
		t.Errorf("the check's log does not name the claim of pod held:\n%s", logs)
	}
	// Helm marks the release "uninstalling" before its pre-delete hooks run; nothing of it is
	// deleted, and the next helm uninstall starts over.
	if _, err := e.client.AppsV1().DaemonSets(releaseNS).Get(ctx, release+"-gpu-plugin", metav1.GetOptions{}); err != nil {
		t.Errorf("the refused uninstall deleted the plugin's DaemonSet: %v", err)
	}
	if e.pluginPodOrNil(ctx) == nil {
		t.Error("no ready GPU plugin pod after the refused uninstall")
	}
	if len(e.gpuSlices(ctx, t)) == 0 {
		t.Error("no GPU ResourceSlices after the refused uninstall")
	}
}

// uninstallLeftovers is what testUninstall checks beyond nodeLeftovers: the plugins' data
// directories (the checkpoint's lock and instances, the nvidia-cdi-hook, the mock's machine),
// which the post-delete clean-up removes, and the clean-up's own hook objects.
func (e *env) uninstallLeftovers(ctx context.Context, t *testing.T) []string {
	t.Helper()
	var left []string
	if out := strings.TrimSpace(e.exec(ctx, "sh", "-c", "ls -d /var/lib/kubelet/plugins/*.accel-dra.io 2>/dev/null; true")); out != "" {
		left = append(left, "plugin data directories: "+out)
	}
	gone := func(kind string, err error) {
		if !apierrors.IsNotFound(err) {
			left = append(left, kind+" "+hookName+" (or an error getting it: "+errString(err)+")")
		}
	}
	_, err := e.client.CoreV1().ServiceAccounts(releaseNS).Get(ctx, hookName, metav1.GetOptions{})
	gone("ServiceAccount", err)
	_, err = e.client.BatchV1().Jobs(releaseNS).Get(ctx, hookName+"-wait", metav1.GetOptions{})
	gone("Job", err)
	_, err = e.client.RbacV1().ClusterRoles().Get(ctx, hookName, metav1.GetOptions{})
	gone("ClusterRole", err)
	if list, err := e.client.AppsV1().DaemonSets(releaseNS).List(ctx, metav1.ListOptions{}); err != nil {
		left = append(left, "DaemonSets: "+err.Error())
	} else {
		for _, ds := range list.Items {
			left = append(left, "DaemonSet "+ds.Name)
		}
	}
	return left
}

func errString(err error) string {
	if err == nil {
		return "none: it exists"
	}
	return err.Error()
}
