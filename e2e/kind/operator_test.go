//go:build e2e

package kind

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// draDriverDeployLabel is the GPU operator's label for its DRA driver on a node, which its
// driver manager sets to paused-for-driver-upgrade (NVIDIA/k8s-driver-manager,
// cmd/driver-manager: evictKubeletPlugin, maybeSetPaused) after the pods holding GPU claims are
// gone and before it unloads the driver, and back to true after the new driver is in.
const draDriverDeployLabel = "nvidia.com/gpu.deploy.dra-driver"

// testDriverUpgradePause (issue #27, 6) does to the node what the GPU operator's driver manager
// does for a driver upgrade, with the chart's default drivers.gpu.pauseLabel: the claim's pod
// goes first, then the label is paused, and the plugin (which holds NVML and would keep the
// kernel module busy) must leave the node, its process gone; with the label back to true it
// returns, ready, and a GPU pod runs again.
func (e *env) testDriverUpgradePause(ctx context.Context, t *testing.T) {
	setLabel := func(value string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{draDriverDeployLabel: value}}})
		if _, err := e.client.CoreV1().Nodes().Patch(ctx, e.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"labels":{"` + draDriverDeployLabel + `":null}}}`)
		_, _ = e.client.CoreV1().Nodes().Patch(context.Background(), e.node, types.MergePatchType, patch, metav1.PatchOptions{})
	})
	setLabel("true")
	e.checkGPUPod(ctx, t, "before-upgrade", 1, nil)
	before := e.pluginPodOrNil(ctx)
	if before == nil {
		t.Fatal("no ready GPU plugin before the upgrade")
	}

	setLabel("paused-for-driver-upgrade")
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods(releaseNS).Get(ctx, before.Name, metav1.GetOptions{})
		return err != nil && len(e.pluginPods(ctx)) == 0, nil
	}); err != nil {
		t.Fatalf("the GPU plugin stayed on the node after %s=paused-for-driver-upgrade: %v", draDriverDeployLabel, err)
	}
	// No plugin process is left on the node to hold the driver (the brackets keep the pattern
	// from matching the shell that runs pgrep).
	if out := strings.TrimSpace(e.exec(ctx, "sh", "-c", "pgrep -f '[a]ccel-dra-kubelet-plugin.*--driver-name=gpu[.]accel-dra[.]io' ; true")); out != "" {
		t.Errorf("plugin processes %q still run on the node while the driver is to be unloaded", out)
	}

	setLabel("true")
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		return e.pluginPodOrNil(ctx) != nil, nil
	}); err != nil {
		t.Fatalf("the GPU plugin did not come back after %s=true: %v", draDriverDeployLabel, err)
	}
	e.checkGPUPod(ctx, t, "after-upgrade", 1, nil)
}
