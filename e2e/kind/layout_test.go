//go:build e2e

package kind

import (
	"context"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// testDeviceLayouts (issue #27, 1): the GPU nodes are where each way of installing the driver
// puts them, made with mknod as root on the node, as nvidia-modprobe makes them, and nowhere
// else:
//   - Operator: the GPU operator's driver container. Its root is mounted at
//     /run/nvidia/driver, the nodes are only under /run/nvidia/driver/dev, the node's /dev has
//     none of them, and /dev/char/<major>:<minor> links point at them, as the operator's
//     validator makes them (NVIDIA/gpu-operator cmd/nvidia-validator, createDevCharSymlinks).
//   - Host: a driver installed on the host under a prefix with no dev/, the nodes in the node's
//     /dev.
//
// In each, the plugin publishes all eight GPUs, a pod gets exactly its GPU, and the claim's CDI
// spec names, as the node's host path, a device node that exists on the node.
func (e *env) testDeviceLayouts(ctx context.Context, t *testing.T) {
	if out := strings.TrimSpace(e.exec(ctx, "sh", "-c", "ls /dev | grep -E '^nvidia' ; true")); out != "" {
		t.Skipf("node %s has NVIDIA device nodes in /dev (%s): the layouts need a node without GPUs", e.node, strings.Join(strings.Fields(out), " "))
	}
	nodes := mockDevNodes(t, e.node)
	const version = "580.82.07"

	t.Run("Operator", func(t *testing.T) {
		root := e2eRoots + "/operator-root"
		e.installDriverRoot(ctx, t, root, "", version, nil)
		e.mknod(ctx, t, root+"/dev", nodes)
		unmount := "if mountpoint -q " + operatorRoot + "; then umount " + operatorRoot + "; fi"
		var links []string
		for _, n := range nodes {
			links = append(links, fmt.Sprintf("/dev/char/%d:%d", n.Major, n.Minor))
		}
		t.Cleanup(func() {
			_, _ = e.cmd(context.Background(), nil, "docker", "exec", e.node, "sh", "-c", unmount+"; rmdir "+operatorRoot+" /run/nvidia 2>/dev/null; rm -f "+strings.Join(links, " "))
		})
		e.exec(ctx, "sh", "-c", unmount+"; mkdir -p "+operatorRoot+" /dev/char && mount --bind "+root+" "+operatorRoot)
		for i, n := range nodes {
			e.exec(ctx, "ln", "-sfn", path.Join(operatorRoot, "dev", n.Name), links[i])
		}
		e.helmMock(ctx, t, true, "--set", "drivers.gpu.nvidiaDriverRoot="+operatorRoot)
		e.waitForGPUs(ctx, t, 8)
		e.checkGPUPod(ctx, t, "operator-gpu", 1, func(devs []allocatedDevice) {
			e.checkSpecHostPath(ctx, t, devs[0], operatorRoot+"/dev/")
		})
	})

	t.Run("Host", func(t *testing.T) {
		root := e2eRoots + "/host-prefix"
		e.installDriverRoot(ctx, t, root, "", version, nil)
		var made []string
		for _, n := range nodes {
			made = append(made, "/dev/"+n.Name)
		}
		t.Cleanup(func() {
			_, _ = e.cmd(context.Background(), nil, "docker", "exec", e.node, "sh", "-c", "rm -f "+strings.Join(made, " "))
		})
		e.mknod(ctx, t, "/dev", nodes)
		e.helmMock(ctx, t, true, "--set", "drivers.gpu.nvidiaDriverRoot="+root)
		e.waitForGPUs(ctx, t, 8)
		e.checkGPUPod(ctx, t, "host-gpu", 1, func(devs []allocatedDevice) {
			e.checkSpecHostPath(ctx, t, devs[0], "/dev/")
		})
		if p := e.pluginPodOrNil(ctx); p != nil {
			if logs := e.pluginLog(ctx, t, p.Name); strings.Contains(logs, "GPU device node in no dev root") {
				t.Errorf("the plugin built GPU nodes that are in the node's /dev:\n%s", lastLines(logs, 20))
			}
		}
	})
}

// mockDevNodes are the device nodes the default GPU mock profile's driver install makes
// (without the DRM nodes, which are the kernel's).
func mockDevNodes(t *testing.T, node string) []nvmlmock.DevNode {
	t.Helper()
	s, err := nvmlmock.NewServer(backend.DefaultMockProfile, node)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []nvmlmock.DevNode
	for _, n := range s.DevNodes() {
		if !strings.HasPrefix(n.Name, "dri/") {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// mknod makes nodes under dir on the node, as nvidia-modprobe does (mode 0666, the driver's
// default NVreg_DeviceFileMode), after checking that the node has no such file.
func (e *env) mknod(ctx context.Context, t *testing.T, dir string, nodes []nvmlmock.DevNode) {
	t.Helper()
	var script strings.Builder
	fmt.Fprintf(&script, "set -e; mkdir -p %s\n", dir)
	for _, n := range nodes {
		p := path.Join(dir, n.Name)
		fmt.Fprintf(&script, "test ! -e %[1]s; mknod -m 666 %[1]s c %[2]d %[3]d\n", p, n.Major, n.Minor)
	}
	e.exec(ctx, "sh", "-c", script.String())
}

// waitForGPUs waits until the node's GPU slices publish want devices.
func (e *env) waitForGPUs(ctx context.Context, t *testing.T, want int) {
	t.Helper()
	var got int
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got = e.publishedGPUs(ctx, t)
		return got == want, nil
	}); err != nil {
		t.Fatalf("the plugin publishes %d GPUs, want %d", got, want)
	}
}

// checkSpecHostPath checks that the CDI spec of the claim that holds d gives d's node with a
// host path under dir (none for the node's /dev, where the container's path is the host's) that
// is a character device on the node.
func (e *env) checkSpecHostPath(ctx context.Context, t *testing.T, d allocatedDevice, dir string) {
	t.Helper()
	node := "nvidia" + strings.TrimPrefix(d.name, "gpu-")
	hostPath := dir + node
	want := `{"path":"/dev/` + node + `","type":"c"`
	if dir != "/dev/" {
		want = `{"path":"/dev/` + node + `","hostPath":"` + hostPath + `","type":"c"`
	}
	if specs := e.exec(ctx, "sh", "-c", "cat "+cdiDir+"/accel-dra.io-* 2>/dev/null; true"); !strings.Contains(specs, want) {
		t.Errorf("the CDI specs do not give %s as %s:\n%s", d.name, want, specs)
	}
	if out, err := e.cmd(ctx, nil, "docker", "exec", e.node, "test", "-c", hostPath); err != nil {
		t.Errorf("%s is not a character device on the node: %v %s", hostPath, err, out)
	}
}

// publishedGPUs counts the devices of the GPU driver's slices.
func (e *env) publishedGPUs(ctx context.Context, t *testing.T) int {
	t.Helper()
	return e.publishedDevices(ctx, t, gpuClass)
}
