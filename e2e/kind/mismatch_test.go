//go:build e2e

package kind

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// testDriverMismatch (#27 item 7): a host driver upgraded without a reboot under the running
// plugin of the chart. The new libraries replace the old ones in the driver root on the host,
// and the old kernel module stays loaded (the mock's NVML refuses libraries of another version
// than the loaded module's, nvmlmock module.go). The plugin's process calls the library it
// loaded first for as long as it lives (nvml.ErrLibraryBound), so it starts again in a new
// process in its container (exec, no container restart), where NVML refuses the driver: it
// serves the GPUs it last enumerated tainted <driver>/driver, and the pod prepared before the
// upgrade can still go. Once the module of the new version is loaded, the plugin exits and
// the kubelet starts it afresh, untainted, and a new pod gets the new driver's files.
func (e *env) testDriverMismatch(ctx context.Context, t *testing.T) {
	const versionA, versionB = "570.172.08", "580.82.07"
	root, next := e2eRoots+"/host-driver", e2eRoots+"/host-driver-next"
	e.installDriverRoot(ctx, t, root, "", versionA, nil)
	e.installDriverRoot(ctx, t, next, "", versionB, nil)
	nodes := mockDevNodes(t, e.node)
	e.mknod(ctx, t, root+"/dev", nodes)
	e.mknod(ctx, t, next+"/dev", nodes)
	e.loadModule(ctx, versionA)
	e.helmMock(ctx, t, true, "--set", "drivers.gpu.nvidiaDriverRoot="+root,
		"--set-json", `plugin.extraArgs=["--driver-check-interval=2s"]`)
	plugin := e.pluginPodOrNil(ctx)
	if plugin == nil {
		t.Fatal("no ready GPU plugin pod after the install")
	}
	e.runPod(ctx, t, "mismatch-a", gpuClass, 1, driverRootScript)
	e.checkDriverFiles(ctx, t, "mismatch-a", root, versionA)

	// The upgrade without a reboot: the new driver's files in place of the old one's.
	const execAgain = "starting the plugin again in a new process"
	e.exec(ctx, "sh", "-c", "rm -rf "+root+" && mv "+next+" "+root)
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := e.client.CoreV1().Pods(releaseNS).GetLogs(plugin.Name, &corev1.PodLogOptions{Container: "plugin"}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		log := string(b)
		i := strings.Index(log, execAgain)
		return i >= 0 && strings.Contains(log[i:], "driverVersionMismatch=true") && e.driverTaints(ctx, t) == 8, nil
	}); err != nil {
		t.Fatalf("the plugin did not start again mismatched with its 8 GPUs tainted %s/driver within 3 minutes (%d tainted):\n%s", gpuClass, e.driverTaints(ctx, t), lastLines(e.pluginLog(ctx, t, plugin.Name), 20))
	}
	if p, err := e.client.CoreV1().Pods(releaseNS).Get(ctx, plugin.Name, metav1.GetOptions{}); err != nil || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the plugin's container restarted (%v, %+v); want its process to start again in it", err, p.Status.ContainerStatuses)
	}
	e.deletePod(ctx, t, "mismatch-a")

	// The node rebooted, or the module reloaded: the plugin exits, and its container starts
	// afresh.
	e.loadModule(ctx, versionB)
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := e.pluginPodOrNil(ctx)
		return p != nil && p.Status.ContainerStatuses[0].RestartCount > 0 && len(e.gpuSlices(ctx, t)) > 0 && e.driverTaints(ctx, t) == 0, nil
	}); err != nil {
		t.Fatalf("the plugin did not start afresh untainted within 3 minutes of the module's reload (%d tainted):\n%s", e.driverTaints(ctx, t), lastLines(e.pluginLog(ctx, t, plugin.Name), 20))
	}
	e.runPod(ctx, t, "mismatch-b", gpuClass, 1, driverRootScript)
	e.checkDriverFiles(ctx, t, "mismatch-b", root, versionB)
	e.deletePod(ctx, t, "mismatch-b")
	e.expectNoLeftovers(ctx, t)
}

// driverTaints counts the GPU devices whose slices carry the driver cause's taint.
func (e *env) driverTaints(ctx context.Context, t *testing.T) int {
	t.Helper()
	list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range list.Items {
		if s.Spec.Driver != gpuClass {
			continue
		}
		for _, d := range s.Spec.Devices {
			for _, taint := range d.Taints {
				if taint.Key == gpuClass+"/driver" {
					n++
				}
			}
		}
	}
	return n
}
