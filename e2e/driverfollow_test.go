//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// TestDriverReplacedUnderPlugin: the driver under a running plugin is replaced by another
// version and that version's kernel module loaded (a driver container's upgrade; a host upgrade
// and a module reload). The plugin holds no NVML (device health off): one that did would keep
// the module busy, and the upgrade would wait for it to go (docs/recipes.md). A process calls
// the first libnvidia-ml it loaded for as long as it lives (go-nvml, nvml.ErrLibraryBound), so
// the plugin follows the driver by starting again in a new process of its own (exec: the same
// PID, no restart): it publishes the 8 GPUs with the new driver's version, rewrites the running
// pod's claim's CDI spec with the new driver's files, and a new pod gets them.
func TestDriverReplacedUnderPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const before, after, afterSemver = "570.172.08", "580.82.07", "580.82.7"
	d := startOnDriverRoot(ctx, t, before, "--device-health=false")
	client, node, plugin, root, mockDir := d.client, d.node, d.plugin, d.root, d.mockDir
	const ns = "default"
	run := func(name string) {
		t.Helper()
		if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, claimTemplate(ns, name, gpuClass, 1, nil, "", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, podWithTemplate(ns, name, name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := framework.WaitForPodRunning(ctx, client, ns, name, podWait); err != nil {
			t.Fatal(err)
		}
	}
	// The driver's libcuda that every spec of the plugin mounts.
	specsMount := func(version string) (bool, error) {
		names, err := plugin.CDISpecs()
		if err != nil || len(names) == 0 {
			return false, err
		}
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(plugin.CDIDir, n))
			if err != nil {
				return false, err
			}
			if !strings.Contains(string(b), "libcuda.so."+version) {
				return false, nil
			}
		}
		return true, nil
	}
	run("before-upgrade")
	if ok, err := specsMount(before); !ok || err != nil {
		t.Fatalf("the running pod's CDI spec does not mount the driver's libcuda.so.%s: %v", before, err)
	}

	// The upgrade: the new module, then the new driver's files.
	if err := nvmlmock.LoadModule(mockDir, after); err != nil {
		t.Fatal(err)
	}
	if err := nvmlmock.WriteDriver(root, after); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name + ",spec.driver=" + gpuClass})
		if err != nil {
			return false, nil
		}
		n := 0
		for _, s := range slices.Items {
			n += len(s.Spec.Devices)
			for _, d := range s.Spec.Devices {
				if v := d.Attributes["driverVersion"].VersionValue; v == nil || *v != afterSemver {
					return false, nil
				}
			}
		}
		if n != 8 {
			return false, nil
		}
		return specsMount(after)
	})
	if err != nil {
		t.Fatalf("the plugin did not follow the driver to %s (ResourceSlices' driverVersion %s and the running pod's CDI spec mounting libcuda.so.%s): %v\n%s", after, afterSemver, after, err, plugin.Process().LogTail(30))
	}
	if plugin.Process().Exited() {
		t.Fatalf("the plugin exited instead of starting again in its process: %v\n%s", plugin.Process().ExitError(), plugin.Process().LogTail(30))
	}
	if log, err := os.ReadFile(plugin.Process().LogPath); err != nil || !strings.Contains(string(log), "starting the plugin again in a new process") {
		t.Errorf("the plugin's log does not say that it started again in a new process (%v)", err)
	}
	if err := plugin.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	run("after-upgrade")
	if ok, err := specsMount(after); !ok || err != nil {
		t.Errorf("CDI specs after the upgrade do not all mount libcuda.so.%s: %v", after, err)
	}
	for _, name := range []string{"before-upgrade", "after-upgrade"} {
		if err := framework.DeletePod(ctx, client, ns, name, podWait); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, plugin.Process().LogTail(30))
		}
	}
}

// onDriverRoot is a cluster with a GPU node whose plugin uses a mock driver installed on the
// host, as it finds it (--mock-driver-root=use), and checks it every second.
type onDriverRoot struct {
	client        kubernetes.Interface
	node          *cluster.Node
	plugin        *framework.Plugin
	root, mockDir string
}

// startOnDriverRoot installs the driver of version, starts the plugin with extraArgs too, and
// waits for its 8 GPUs.
func startOnDriverRoot(ctx context.Context, t *testing.T, version string, extraArgs ...string) onDriverRoot {
	t.Helper()
	c := cluster.StartForTest(t, cluster.Options{})
	client := c.Client()
	if err := framework.EnsureDeviceClasses(ctx, client); err != nil {
		t.Fatal(err)
	}
	node, err := c.AddNode(ctx, cluster.NodeOptions{Name: "gpu-node"})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "driver-root")
	if err := nvmlmock.WriteDriver(root, version); err != nil {
		t.Fatal(err)
	}
	plugin, err := framework.StartPlugin(ctx, c, node, framework.PluginOptions{
		ExtraArgs: append([]string{"--mock-driver-root=use", "--nvidia-driver-root=" + root, "--driver-check-interval=1s"}, extraArgs...),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForSlices(ctx, client, gpuClass, node.Name, 8); err != nil {
		t.Fatal(err)
	}
	return onDriverRoot{client: client, node: node, plugin: plugin, root: root, mockDir: filepath.Join(node.PluginDataDir(framework.GPUDriver), "mock")}
}
