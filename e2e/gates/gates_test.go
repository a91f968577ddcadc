//go:build e2e

// Package gates runs the plugin against a kube-apiserver with DRA feature gates off: the server
// drops the fields of those features from the plugin's ResourceSlices without an error, and
// the plugin must refuse to run, naming the gate, instead of serving slices that say less than
// it published (docs/versions.md). A control cluster with the gates on starts the same plugins.
// Run with:
//
//	KUBE_BIN_DIR=$(hack/build-k8s.sh) ACCEL_DRA_BIN_DIR=$PWD/bin go test -tags e2e -count=1 -v ./e2e/gates/
package gates

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
)

// gatesOff turns off, in 1.37, the three gates whose fields the plugin publishes, and with them
// the gates that depend on two of them (pkg/features/kube_features.go: DRADeviceTaintRules on
// DRADeviceTaints, DRAFractionalCapacityRange on DRAConsumableCapacity).
const gatesOff = "--feature-gates=DRAPartitionableDevices=false,DRAConsumableCapacity=false," +
	"DRADeviceTaints=false,DRADeviceTaintRules=false,DRAFractionalCapacityRange=false"

// noTaints turns every device taint off: the plugin then publishes none of the fields of
// DRADeviceTaints, which gatesOff turns off too.
const noTaints = "--device-taint-effects=ecc=None,fault=None,lost=None,xid=None"

// The chart's rbac.nodeEventsNamespace, which framework.StartPlugin passes as the chart does.
const eventsNamespace = metav1.NamespaceDefault

func TestGatesOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{APIServerFlags: []string{gatesOff}})
	client := c.Client()

	for _, tc := range []struct {
		name, node, profile string
		args                []string
		gate                string
	}{
		{"DynamicMIG", "mig-node", "mig-mixed", []string{"--dynamic-mig"}, "DRAPartitionableDevices"},
		{"ConsumableMemory", "shared-node", "h100-8x-2numa", []string{"--consumable-memory"}, "DRAConsumableCapacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, err := c.AddNode(ctx, cluster.NodeOptions{Name: tc.node})
			if err != nil {
				t.Fatal(err)
			}
			p, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{Profile: tc.profile, ExtraArgs: tc.args, NoWait: true})
			if err != nil {
				t.Fatal(err)
			}
			expectRefusal(ctx, t, client, p, tc.gate, true)
		})
	}

	// Device health publishes taints only when a device fails: the plugin asks the server at
	// start, with a dry run, and refuses then rather than when the first GPU fails.
	t.Run("HealthTaints", func(t *testing.T) {
		node, err := c.AddNode(ctx, cluster.NodeOptions{Name: "health-node"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{Profile: "h100-8x-2numa", NoWait: true})
		if err != nil {
			t.Fatal(err)
		}
		expectRefusal(ctx, t, client, p, "DRADeviceTaints", true)
	})

	// With every taint effect None the plugin publishes none of those fields: it serves with
	// the gates off, and a failing GPU changes nothing about that.
	t.Run("NoTaints", func(t *testing.T) {
		node, err := c.AddNode(ctx, cluster.NodeOptions{Name: "plain-node"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{Profile: "h100-8x-2numa",
			ExtraArgs: []string{noTaints}})
		if err != nil {
			t.Fatalf("a plugin using no gated field refused: %v", err)
		}
		if _, err := framework.WaitForSlices(ctx, client, framework.GPUDriver, node.Name, 8); err != nil {
			t.Fatal(err)
		}
		faults := filepath.Join(node.PluginDataDir(framework.GPUDriver), "mock", health.FaultDir)
		if err := os.MkdirAll(faults, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(faults, "gpu-2"), []byte("xid 48\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if p.Process().Exited() {
			t.Fatalf("plugin without taints exited:\n%s", p.Process().LogTail(30))
		}
	})

	// A rolling update with surge to a configuration the server cannot hold: the new instance
	// refuses before it publishes anything, and the old one's slices stay as they were.
	t.Run("RollingUpdate", func(t *testing.T) {
		node, err := c.AddNode(ctx, cluster.NodeOptions{Name: "surge-node"})
		if err != nil {
			t.Fatal(err)
		}
		old, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{Profile: "h100-8x-2numa", PodUID: "old",
			ExtraArgs: []string{noTaints}})
		if err != nil {
			t.Fatal(err)
		}
		before, err := framework.WaitForSlices(ctx, client, framework.GPUDriver, node.Name, 8)
		if err != nil {
			t.Fatal(err)
		}
		p, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{Profile: "h100-8x-2numa", PodUID: "new", NoWait: true,
			ExtraArgs: []string{noTaints, "--consumable-memory"}})
		if err != nil {
			t.Fatal(err)
		}
		expectRefusal(ctx, t, client, p, "DRAConsumableCapacity", false)
		after, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Items) != len(before) || after.Items[0].UID != before[0].UID || after.Items[0].ResourceVersion != before[0].ResourceVersion {
			t.Errorf("the old instance's slices changed: %d before, %d after", len(before), len(after.Items))
		}
		if old.Process().Exited() {
			t.Fatalf("the old instance exited:\n%s", old.Process().LogTail(30))
		}
	})

	// --dropped-fields=warn: the same gate off is a Warning event, and the plugin serves.
	t.Run("Warn", func(t *testing.T) {
		node, err := c.AddNode(ctx, cluster.NodeOptions{Name: "warn-node"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{Profile: "h100-8x-2numa",
			ExtraArgs: []string{"--consumable-memory", "--dropped-fields=warn"}})
		if err != nil {
			t.Fatalf("warn mode did not serve: %v", err)
		}
		if _, err := waitForEvent(ctx, client, node.Name, "DRAConsumableCapacity"); err != nil {
			t.Fatal(err)
		}
		if p.Process().Exited() {
			t.Fatalf("plugin exited in warn mode:\n%s", p.Process().LogTail(20))
		}
	})
}

// TestGatesOn is the control: the plugins refused above start against a default 1.37 server,
// and their slices keep the fields.
func TestGatesOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{})
	client := c.Client()
	for _, tc := range []struct {
		name, node, profile string
		args                []string
		kept                func(d resourceapi.Device) bool
	}{
		{"DynamicMIG", "mig-node", "mig-mixed", []string{"--dynamic-mig"},
			func(d resourceapi.Device) bool { return len(d.ConsumesCounters) > 0 }},
		{"ConsumableMemory", "shared-node", "h100-8x-2numa", []string{"--consumable-memory"},
			func(d resourceapi.Device) bool { return d.AllowMultipleAllocations != nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, err := c.AddNode(ctx, cluster.NodeOptions{Name: tc.node})
			if err != nil {
				t.Fatal(err)
			}
			p, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{Profile: tc.profile, ExtraArgs: tc.args})
			if err != nil {
				t.Fatal(err)
			}
			list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, s := range list.Items {
				for _, d := range s.Spec.Devices {
					found = found || tc.kept(d)
				}
			}
			if !found {
				t.Errorf("no device of %d slices kept the field", len(list.Items))
			}
			// Still serving a moment later: the slice controller reported nothing dropped.
			time.Sleep(3 * time.Second)
			if p.Process().Exited() {
				t.Fatalf("plugin exited with the gates on:\n%s", p.Process().LogTail(30))
			}
		})
	}
}

// expectRefusal waits for the plugin to exit with status 1 and checks that it said why, naming
// gate, in its log and in a Warning event on its Node, and, with checkNoSlices, that the node
// has no ResourceSlices.
func expectRefusal(ctx context.Context, t *testing.T, client kubernetes.Interface, p *framework.Plugin, gate string, checkNoSlices bool) {
	t.Helper()
	select {
	case <-p.Process().Done():
	case <-time.After(2 * time.Minute):
		t.Fatalf("plugin still running 2m after a refusal was due:\n%s", p.Process().LogTail(30))
	}
	var exit *exec.ExitError
	if err := p.Process().ExitError(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("plugin exit: %v, want status 1", err)
	}
	log := p.Process().LogTail(30)
	if !strings.Contains(log, "Refusing to run") || !strings.Contains(log, "feature gate "+gate+" is off") {
		t.Errorf("plugin log does not name %s:\n%s", gate, log)
	}
	ev, err := waitForEvent(ctx, client, p.Node.Name, gate)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("event %s/%s: %s", ev.Namespace, ev.Name, ev.Message)
	if !checkNoSlices {
		return
	}
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + p.Node.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d ResourceSlices left on %s after the refusal", len(list.Items), p.Node.Name)
	}
}

// waitForEvent waits for the plugin's Warning event on node naming gate.
func waitForEvent(ctx context.Context, client kubernetes.Interface, node, gate string) (*corev1.Event, error) {
	var found *corev1.Event
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Events(eventsNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == node && ev.Type == corev1.EventTypeWarning &&
				ev.Reason == nodeplugin.ReasonFieldsDropped && strings.Contains(ev.Message, "feature gate "+gate+" is off") {
				found = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, errors.New("no Warning event " + nodeplugin.ReasonFieldsDropped + " on node " + node + " naming " + gate)
	}
	return found, nil
}
