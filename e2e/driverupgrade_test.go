//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// TestDriverUpgradeWithoutReboot: the NVIDIA driver is upgraded on the host while a pod runs
// with a GPU, and the node is not rebooted: the old kernel module stays loaded under the new
// libraries and NVML refuses to initialise (the mock refuses as NVML does, nvmlmock module.go).
// The plugin restarts then (a rolling update, an OOM kill). It must not crash-loop: it
// registers, publishes the GPUs it last enumerated tainted <driver>/driver, refuses new claims
// with the reason, unprepares the running pod's claim when the pod goes, and once the versions
// agree (the module reloaded) exits to start afresh, untainted.
func TestDriverUpgradeWithoutReboot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// A driver installed on the host, which the plugin uses as it finds it.
	const before, after = "570.172.08", "580.82.07"
	d := startOnDriverRoot(ctx, t, before)
	client, node, plugin, root, mockDir := d.client, d.node, d.plugin, d.root, d.mockDir
	const ns = "default"
	run := func(name string, tolerate bool) {
		t.Helper()
		tmpl := claimTemplate(ns, name, gpuClass, 1, nil, "", "")
		if tolerate {
			tmpl.Spec.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{Key: framework.GPUDriver + "/driver", Operator: resourceapi.DeviceTolerationOpExists}}
		}
		if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, podWithTemplate(ns, name, name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run("before-upgrade", false)
	if _, err := framework.WaitForPodRunning(ctx, client, ns, "before-upgrade", podWait); err != nil {
		t.Fatal(err)
	}

	// The upgrade: new libraries, the old module; then the plugin restarts.
	if v, err := nvmlmock.ModuleVersion(mockDir); err != nil || v != before {
		t.Fatalf("the mock machine's loaded module is %q (%v), want %s: the test's premise", v, err, before)
	}
	if err := nvmlmock.WriteDriver(root, after); err != nil {
		t.Fatal(err)
	}
	if err := plugin.Restart(ctx); err != nil {
		t.Fatalf("the plugin did not register after a driver upgrade without reboot: %v", err)
	}
	tainted := func(want bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			slices, err := framework.WaitForSlices(ctx, client, gpuClass, node.Name, 8)
			if err != nil {
				return false, err
			}
			n := 0
			for _, s := range slices {
				for _, d := range s.Spec.Devices {
					for _, tt := range d.Taints {
						if tt.Key == framework.GPUDriver+"/driver" && tt.Effect == resourceapi.DeviceTaintEffectNoSchedule {
							n++
						}
					}
				}
			}
			return (want && n == 8) || (!want && n == 0), nil
		})
		if err != nil {
			t.Fatalf("waiting for the 8 GPUs to be tainted %v: %v\n%s", want, err, plugin.Process().LogTail(30))
		}
	}
	tainted(true)
	events, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "NVIDIADriverVersionMismatch").String()})
	if err != nil || len(events.Items) == 0 || !strings.Contains(events.Items[0].Message, "reboot the node") {
		t.Errorf("Node event NVIDIADriverVersionMismatch: %v, %v; want one saying to reboot the node", events, err)
	}

	// A claim that tolerates the taint is allocated, and the plugin refuses to prepare it.
	run("during-mismatch", true)
	if _, err := framework.WaitForPodEvent(ctx, client, ns, "during-mismatch", podWait, "not preparing claim", "version mismatch"); err != nil {
		t.Errorf("a new claim during the mismatch: %v\n%s", err, framework.DescribePod(ctx, client, ns, "during-mismatch"))
	}
	// The running pod's claim is unprepared when it goes.
	if err := framework.DeletePod(ctx, client, ns, "before-upgrade", podWait); err != nil {
		t.Fatalf("the pod prepared before the upgrade cannot go: %v\n%s", err, plugin.Process().LogTail(30))
	}
	if specs, err := plugin.CDISpecs(); err != nil || len(specs) != 0 {
		t.Errorf("CDI specs after the running pod went: %v, %v; want none", specs, err)
	}
	if err := framework.DeletePod(ctx, client, ns, "during-mismatch", podWait); err != nil {
		t.Fatal(err)
	}

	// A reboot (or the module reloaded): the plugin exits by itself, and starts afresh.
	if err := nvmlmock.LoadModule(mockDir, after); err != nil {
		t.Fatal(err)
	}
	select {
	case <-plugin.Process().Done():
	case <-time.After(time.Minute):
		t.Fatalf("the plugin did not exit within a minute of the versions agreeing\n%s", plugin.Process().LogTail(30))
	}
	if err := plugin.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	tainted(false)
	run("after-reboot", false)
	if _, err := framework.WaitForPodRunning(ctx, client, ns, "after-reboot", podWait); err != nil {
		t.Fatal(err)
	}
	if err := framework.DeletePod(ctx, client, ns, "after-reboot", podWait); err != nil {
		t.Fatal(err)
	}
}
