//go:build e2e

package kind

import (
	"context"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
)

// TestRuntimeWithoutCDI (issue #27, 5): on a node whose containerd 1.7 ignores CDI (the node
// image variant hack/kind/node-image-containerd1.sh, enable_cdi = false as 1.7 defaults), the
// plugins' CDI canary raises the Warning RuntimeIgnoresCDI on the Node and, by the chart's
// default onRuntimeIgnoringCDI=refuse, the node publishes no device. With warn, it publishes
// them, and a pod that gets a GPU runs without it and without an error: what refuse prevents,
// and the proof that the variant really drops CDI devices.
func TestRuntimeWithoutCDI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t.Setenv("ACCEL_DRA_NODE_RUNTIME", "containerd1")
	e := newEnv(ctx, t, "--set", "plugin.securityContext.privileged=true", "--set", "plugin.securityContext.allowPrivilegeEscalation=true")
	node, err := e.client.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://1.7.") {
		t.Fatalf("the node runs %s, want containerd 1.7 (hack/kind/node-image-containerd1.sh)", v)
	}

	for _, driver := range []string{gpuClass, npuClass} {
		msg := e.waitRuntimeEvent(ctx, t, driver, 2*time.Minute)
		if msg == "" {
			t.Errorf("no Warning %s from %s on node %s: its devices are published on a runtime that starts claims' containers without them", nodeplugin.ReasonRuntimeIgnoresCDI, driver, e.node)
			continue
		}
		t.Logf("%s: %s", driver, msg)
		if !strings.Contains(msg, "--runtime-cdi-check=refuse") || !strings.Contains(msg, "enable_cdi = true") {
			t.Errorf("the event of %s does not say what the plugin did and the fix: %q", driver, msg)
		}
	}
	// The plugins are ready (helm --wait), so they published what they publish.
	if n := e.publishedDevices(ctx, t, gpuClass) + e.publishedDevices(ctx, t, npuClass); n != 0 {
		t.Errorf("the node publishes %d devices on a runtime that ignores CDI, want none (onRuntimeIgnoringCDI=refuse)", n)
	}

	t.Run("Warn", func(t *testing.T) {
		e.helmMock(ctx, t, true, "--set", "plugin.onRuntimeIgnoringCDI=warn")
		e.waitForGPUs(ctx, t, 8)
		e.runPod(ctx, t, "no-cdi", gpuClass, 1, gpuScript)
		out := e.podOutput(ctx, ns, "no-cdi", 3*time.Minute)
		t.Logf("container output:\n%s", out)
		sec := sections(out)
		if len(sec["dev"]) != 0 || len(sec["ldconfig"]) != 0 {
			t.Errorf("the container got GPU nodes %q and libraries %q: this containerd applies CDI, the variant shows nothing", sec["dev"], sec["ldconfig"])
		}
		e.deletePod(ctx, t, "no-cdi")
	})
}

// testRuntimeAppliesCDI: on the standard node (containerd 2.x, CDI always on) the canary passes,
// and the plugin says so, with no Warning on the Node.
func (e *env) testRuntimeAppliesCDI(ctx context.Context, t *testing.T) {
	pod := e.pluginPodOrNil(ctx)
	if pod == nil {
		t.Fatal("no ready GPU plugin")
	}
	if log := e.pluginLog(ctx, t, pod.Name); !strings.Contains(log, "The container runtime applies CDI devices") {
		t.Errorf("the GPU plugin's log does not say that the CDI canary passed:\n%s", log)
	}
	if msg := e.waitRuntimeEvent(ctx, t, gpuClass, 0); msg != "" {
		t.Errorf("Warning %s on a node whose containerd applies CDI: %s", nodeplugin.ReasonRuntimeIgnoresCDI, msg)
	}
}

// waitRuntimeEvent waits up to timeout (0: looks once) for the Warning RuntimeIgnoresCDI that
// driver's plugin reports about the node, and returns its note; "" if there is none.
func (e *env) waitRuntimeEvent(ctx context.Context, t *testing.T, driver string, timeout time.Duration) string {
	t.Helper()
	var note string
	find := func(ctx context.Context) (bool, error) {
		list, err := e.client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if isRuntimeEvent(ev, e.node, driver) {
				note = ev.Note
				return true, nil
			}
		}
		return false, nil
	}
	if timeout == 0 {
		_, _ = find(ctx)
		return note
	}
	_ = wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, find)
	return note
}

func isRuntimeEvent(ev eventsv1.Event, node, driver string) bool {
	return ev.Reason == nodeplugin.ReasonRuntimeIgnoresCDI && ev.Type == "Warning" &&
		ev.Regarding.Kind == "Node" && ev.Regarding.Name == node && ev.ReportingController == driver
}

// publishedDevices counts the devices of driver's slices.
func (e *env) publishedDevices(ctx context.Context, t *testing.T, driver string) int {
	t.Helper()
	list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range list.Items {
		if s.Spec.Driver == driver {
			n += len(s.Spec.Devices)
		}
	}
	return n
}
