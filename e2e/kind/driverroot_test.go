//go:build e2e

package kind

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// Driver roots the tests install on the node, as a host's package manager or the GPU
// operator's driver container does; the mock plugin uses them as a real one uses a driver root
// (--mock-driver-root=use, which the chart sets for a driver root other than /).
const (
	e2eRoots = "/opt/accel-dra-e2e"
	// operatorRoot is where the GPU operator's driver container mounts its root file system.
	operatorRoot = "/run/nvidia/driver"
)

// installDriverRoot makes nodeDir on the node a driver root: the Debian root in the tar base
// (none if "") with the mock driver of version installed into it (nvmlmock.WriteDriver, the
// tools of make build), as a driver's packages install into a host's root. links are symlinks
// to make in it, by path under the root. The test's cleanup removes it.
func (e *env) installDriverRoot(ctx context.Context, t *testing.T, nodeDir, base, version string, links map[string]string) {
	t.Helper()
	dir := t.TempDir()
	if base != "" {
		if out, err := exec.CommandContext(ctx, "tar", "-xf", base, "-C", dir).CombinedOutput(); err != nil {
			t.Fatalf("unpacking %s: %v\n%s", base, err, out)
		}
	}
	tools := filepath.Join(e.root, "bin", "linux_"+runtime.GOARCH, "accel-dra-mock-nvidia")
	if err := nvmlmock.WriteDriver(dir, version, nvmlmock.WithTools(tools)); err != nil {
		t.Fatal(err)
	}
	for link, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	e.exec(ctx, "sh", "-c", "rm -rf "+nodeDir+" && mkdir -p "+nodeDir)
	t.Cleanup(func() {
		_, _ = e.cmd(context.Background(), nil, "docker", "exec", e.node, "sh", "-c", "rm -rf "+nodeDir+"; rmdir "+e2eRoots+" 2>/dev/null; true")
	})
	copyIn := exec.CommandContext(ctx, "sh", "-c", `tar -C "$1" -c . | docker exec -i "$2" tar -x -C "$3"`, "sh", dir, e.node, nodeDir)
	if out, err := copyIn.CombinedOutput(); err != nil {
		t.Fatalf("copying the driver root into node %s: %v\n%s", e.node, err, out)
	}
}

// helmMock installs the release afresh, on mock GPUs only (values-mock.yaml), the GPU plugin
// privileged as TestKind installs it, with extra values. A release installed before is
// uninstalled first, so that no plugin pod of it serves beside the new one (a rolling update
// with surge keeps the old one until the new one is ready). ready waits for the plugin to be
// ready.
func (e *env) helmMock(ctx context.Context, t *testing.T, ready bool, extra ...string) {
	t.Helper()
	helm := filepath.Join(e.tools, "helm")
	kubeconfig := []string{"KUBECONFIG=" + e.kubeconfig}
	if out, err := e.cmd(ctx, kubeconfig, helm, "uninstall", release, "-n", releaseNS, "--ignore-not-found", "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	// The kubelet removes the ResourceSlices of a plugin that went a while after it went.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(e.gpuSlices(ctx, t)) == 0, nil
	}); err != nil {
		t.Fatalf("the GPU ResourceSlices of the uninstalled release are still there: %q", e.gpuSlices(ctx, t))
	}
	// The mock keeps its GPUs' state (MIG instances, compute modes) across installs, as GPUs
	// do; earlier tests may have left another machine's.
	e.exec(ctx, "rm", "-f", gpuData+"/mock/"+nvmlmock.StateFileName)
	chart := filepath.Join(e.root, "deployments/helm/accel-dra")
	args := append([]string{"upgrade", "--install", release, chart, "-n", releaseNS, "-f", filepath.Join(chart, "values-mock.yaml"),
		"--set", "drivers.npu.enabled=false"}, e.imageArgs()...)
	args = append(args, extra...)
	if ready {
		args = append(args, "--wait", "--timeout", "5m")
	}
	if out, err := e.cmd(ctx, kubeconfig, helm, args...); err != nil {
		t.Fatalf("helm upgrade --install %s: %v\n%s", strings.Join(extra, " "), err, out)
	}
	t.Cleanup(func() {
		_, _ = e.cmd(context.Background(), kubeconfig, helm, "uninstall", release, "-n", releaseNS, "--ignore-not-found", "--wait", "--timeout", "3m")
	})
}

// driverRootScript prints what a container got of the driver: its ld cache, the versioned
// libraries and where on the node they were mounted from (the root field of mountinfo), the
// driver version nvidia-smi reports and the GPUs it lists.
const driverRootScript = `echo '== ldconfig'; ldconfig -p | grep -E 'libcuda\.so\.1 |libnvidia-ml\.so\.1 ' | sed 's/ (.*//'
echo '== libs'; ls /usr/lib64 | grep -E '^lib(cuda|nvidia-ml)\.so\.[0-9]+\.'
echo '== sources'; awk '{print $4}' /proc/self/mountinfo | grep -E '/lib(cuda|nvidia-ml)\.so\.[0-9]+\.'
echo '== version'; nvidia-smi --query-gpu=driver_version --format=csv,noheader
echo '== smi'; nvidia-smi -L
echo '== end'; exec sleep 3600`

// checkDriverFiles checks a driverRootScript pod's output: the libraries of version, mounted
// from root on the node, and nothing of another version; nvidia-smi of that version, listing
// exactly the claim's GPU.
func (e *env) checkDriverFiles(ctx context.Context, t *testing.T, pod, root, version string) {
	t.Helper()
	out := e.podOutput(ctx, ns, pod, 3*time.Minute)
	t.Logf("container output of %s:\n%s", pod, out)
	sec := sections(out)
	if got := sec["ldconfig"]; !slices.Contains(got, "libcuda.so.1") || !slices.Contains(got, "libnvidia-ml.so.1") {
		t.Errorf("%s: ldconfig -p lists %q, want libcuda.so.1 and libnvidia-ml.so.1", pod, got)
	}
	if want := []string{"libcuda.so." + version, "libnvidia-ml.so." + version}; !slices.Equal(sorted(sec["libs"]), want) {
		t.Errorf("%s: the container's versioned driver libraries are %q, want exactly %q", pod, sec["libs"], want)
	}
	for _, want := range []string{root + "/usr/lib64/libcuda.so." + version, root + "/usr/lib64/libnvidia-ml.so." + version} {
		if !slices.Contains(sec["sources"], want) {
			t.Errorf("%s: the driver's libraries were mounted from %q, want %s among them", pod, sec["sources"], want)
		}
	}
	for _, s := range sec["sources"] {
		if !strings.HasPrefix(s, root+"/") {
			t.Errorf("%s: a driver library was mounted from %s, outside the driver root %s", pod, s, root)
		}
	}
	if got := sec["version"]; len(got) != 1 || got[0] != version {
		t.Errorf("%s: nvidia-smi reports driver version %q, want %s", pod, got, version)
	}
	devs := e.allocated(ctx, t, pod)
	if len(devs) != 1 || len(sec["smi"]) != 1 || !strings.Contains(sec["smi"][0], "(UUID: "+devs[0].uuid+")") {
		t.Errorf("%s: nvidia-smi -L lists %q, want exactly the claim's GPU %+v", pod, sec["smi"], devs)
	}
}

// testForeignLibc (issue #23, 4c): a driver root whose C library is not the plugin image's, as
// a host's is (here Debian trixie's glibc 2.41 under the image's bookworm 2.36), with the mock
// driver installed into it. The plugin starts and serves from it; a GPU container gets the
// root's driver libraries and nvidia-smi; a time-sliced claim runs the root's nvidia-smi (its
// record of the call), and an MPS claim's daemon runs chrooted into the root (its root's
// device and inode). The control shows that the root's C library really is another: the
// plugin's binary, run with the root's library directories in LD_LIBRARY_PATH, as the chart
// of 83431c1 ran it, fails at exec with
//
//	/usr/bin/accel-dra-kubelet-plugin: symbol lookup error: /driver-root/usr/lib/x86_64-linux-gnu/libc.so.6: undefined symbol: __tunable_is_initialized, version GLIBC_PRIVATE
//
// (exit 127): the image's loader with the root's libc.so.6.
func (e *env) testForeignLibc(ctx context.Context, t *testing.T) {
	const version = "575.57.08"
	root := e2eRoots + "/trixie-root"
	// The stand-in nvidia-smi records its calls beside itself, which the plugin's read-only
	// mount of the root refuses: the record is a link into the plugin's data directory.
	calls := gpuData + "/e2e-trixie-nvidia-smi.calls"
	e.exec(ctx, "rm", "-f", calls)
	t.Cleanup(func() { _, _ = e.cmd(context.Background(), nil, "docker", "exec", e.node, "rm", "-f", calls) })
	base := strings.TrimSpace(e.run(ctx, "hack/kind/debian-root.sh", "trixie", "libc6"))
	e.installDriverRoot(ctx, t, root, base, version, map[string]string{"usr/bin/nvidia-smi.calls": calls})

	t.Run("LDLibraryPathFails", func(t *testing.T) { e.checkForeignLibc(ctx, t, root) })

	e.helmMock(ctx, t, true, "--set", "drivers.gpu.nvidiaDriverRoot="+root)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		return e.pluginPodOrNil(ctx) != nil, nil
	}); err != nil {
		t.Fatalf("the GPU plugin with the driver root %s is not ready: %v", root, err)
	}

	e.runPod(ctx, t, "trixie-gpu", gpuClass, 1, driverRootScript)
	e.checkDriverFiles(ctx, t, "trixie-gpu", root, version)
	e.deletePod(ctx, t, "trixie-gpu")

	sliced := workload{name: "trixie-sliced", config: `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`}
	mps := workload{name: "trixie-mps", config: `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`}
	for _, w := range []workload{sliced, mps} {
		if err := e.startWorkload(ctx, w); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.stopWorkload(context.Background(), w.name) })
		if _, err := framework.WaitForPodRunning(ctx, e.client, ns, w.name, 3*time.Minute); err != nil {
			t.Fatalf("pod %s: %v\n%s", w.name, err, e.describe(ctx, ns, w.name))
		}
	}
	devs := e.allocated(ctx, t, sliced.name)
	want := fmt.Sprintf("%s %d", devs[0].uuid, configapi.TimeSliceLong.SMINumber())
	if got := lines(e.exec(ctx, "sh", "-c", "cat "+calls+" 2>/dev/null; true")); !slices.Contains(got, want) {
		t.Errorf("the driver root's nvidia-smi recorded the calls %q, want %q: the plugin did not run the root's nvidia-smi for the time-sliced claim", got, want)
	}
	rootID := strings.TrimSpace(e.exec(ctx, "stat", "-c", "dev=%d ino=%i", root))
	logs := e.exec(ctx, "sh", "-c", "cat "+gpuData+"/mps/*/log/control.log 2>/dev/null; true")
	if !strings.Contains(logs, "daemon root "+rootID+"\n") {
		t.Errorf("no MPS daemon ran chrooted into the driver root (%s); the daemons' logs:\n%s", rootID, logs)
	}
	for _, w := range []workload{sliced, mps} {
		if err := e.stopWorkload(ctx, w.name); err != nil {
			t.Error(err)
		}
	}
	e.expectNoLeftovers(ctx, t)
}

// checkForeignLibc runs the plugin's binary from its image with the driver root mounted at
// /driver-root, with and without the root's library directories in LD_LIBRARY_PATH (the list
// the chart of 83431c1 set): without, it runs (and prints its flags); with, the image's loader
// takes the root's libc.so.6, of another glibc, and the binary fails at exec.
func (e *env) checkForeignLibc(ctx context.Context, t *testing.T, root string) {
	const ldLibraryPath = "/driver-root/usr/lib64:/driver-root/usr/lib/x86_64-linux-gnu:/driver-root/usr/lib/aarch64-linux-gnu:/driver-root/lib64:/driver-root/lib/x86_64-linux-gnu:/driver-root/lib/aarch64-linux-gnu"
	for _, tc := range []struct {
		name     string
		env      []corev1.EnvVar
		wantCode int32
		want     []string
	}{
		{name: "libc-plain", wantCode: 2, want: []string{"--nvidia-driver-root"}},
		{name: "libc-ld-library-path", env: []corev1.EnvVar{{Name: "LD_LIBRARY_PATH", Value: ldLibraryPath}}, wantCode: 127, want: []string{"symbol lookup error", "GLIBC_PRIVATE"}},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{
					Name: "plugin", Image: e.plugin, ImagePullPolicy: corev1.PullNever,
					Command: []string{"/usr/bin/accel-dra-kubelet-plugin", "--help"}, Env: tc.env,
					VolumeMounts: []corev1.VolumeMount{{Name: "driver-root", MountPath: "/driver-root", ReadOnly: true}},
				}},
				Volumes: []corev1.Volume{{Name: "driver-root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: root}}}},
			},
		}
		if _, err := e.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var term *corev1.ContainerStateTerminated
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := e.client.CoreV1().Pods(ns).Get(ctx, tc.name, metav1.GetOptions{})
			if err == nil && len(p.Status.ContainerStatuses) == 1 {
				term = p.Status.ContainerStatuses[0].State.Terminated
			}
			return term != nil, nil
		}); err != nil {
			t.Fatalf("pod %s did not end: %v\n%s", tc.name, err, e.describe(ctx, ns, tc.name))
		}
		logs, _ := e.client.CoreV1().Pods(ns).GetLogs(tc.name, &corev1.PodLogOptions{}).DoRaw(ctx)
		t.Logf("%s: exit %d:\n%s", tc.name, term.ExitCode, lastLines(string(logs), 3))
		if term.ExitCode != tc.wantCode {
			t.Errorf("%s: exit code %d, want %d", tc.name, term.ExitCode, tc.wantCode)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(logs), w) {
				t.Errorf("%s: the output does not say %q", tc.name, w)
			}
		}
		if err := framework.DeletePod(ctx, e.client, ns, tc.name, 2*time.Minute); err != nil {
			t.Error(err)
		}
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// testLateDriverRoot (issue #23, 4d): the GPU operator's driver container mounts the driver's
// root at /run/nvidia/driver only once it has installed the driver, often after the plugin
// started, and its upgrade replaces that mount with the new version's. The plugin, installed
// while nothing is there, waits, saying so on /healthz and in its log, without restarting and
// without publishing devices; once a root of version A is mounted it serves, and a GPU pod gets
// A's files; once the mount is replaced by one of version B, a pod started after gets B's files
// and none of A's, and the pod started before keeps running.
func (e *env) testLateDriverRoot(ctx context.Context, t *testing.T) {
	const versionA, versionB = "570.172.08", "580.82.07"
	rootA, rootB := e2eRoots+"/driver-a", e2eRoots+"/driver-b"
	e.installDriverRoot(ctx, t, rootA, "", versionA, nil)
	e.installDriverRoot(ctx, t, rootB, "", versionB, nil)
	// Each driver container makes the GPUs' device nodes under its own root, as the GPU
	// operator's does (testDeviceLayouts); the node's /dev has none.
	nodes := mockDevNodes(t, e.node)
	e.mknod(ctx, t, rootA+"/dev", nodes)
	e.mknod(ctx, t, rootB+"/dev", nodes)
	unmount := "if mountpoint -q " + operatorRoot + "; then umount " + operatorRoot + "; fi"
	e.exec(ctx, "sh", "-c", unmount+"; rmdir "+operatorRoot+" 2>/dev/null; true")
	t.Cleanup(func() {
		_, _ = e.cmd(context.Background(), nil, "docker", "exec", e.node, "sh", "-c", unmount+"; rmdir "+operatorRoot+" /run/nvidia 2>/dev/null; true")
	})

	e.helmMock(ctx, t, false, "--set", "drivers.gpu.nvidiaDriverRoot="+operatorRoot,
		"--set-json", `plugin.extraArgs=["--driver-check-interval=2s"]`)
	var plugin *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := e.pluginPods(ctx)
		if len(pods) == 1 && len(pods[0].Status.ContainerStatuses) == 1 && pods[0].Status.ContainerStatuses[0].State.Running != nil && pods[0].Status.PodIP != "" {
			plugin = &pods[0]
		}
		return plugin != nil, nil
	}); err != nil {
		t.Fatalf("the GPU plugin's container did not start: %v", err)
	}
	healthz := "http://" + plugin.Status.PodIP + ":8080/healthz"
	var body string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := e.cmd(ctx, nil, "docker", "exec", e.node, "curl", "-s", healthz)
		body = out
		return err == nil && strings.Contains(out, "NVIDIA driver"), nil
	}); err != nil {
		t.Errorf("/healthz of the plugin while %s is empty: %q, want it to say that it waits for the NVIDIA driver there", operatorRoot, body)
	}
	t.Logf("/healthz while %s is empty: %s", operatorRoot, body)
	if !strings.Contains(body, "starting: waiting for the NVIDIA driver under") || !strings.Contains(body, operatorRoot) {
		t.Errorf("/healthz while %s is empty = %q, want starting: waiting for the NVIDIA driver under ... (%s on the host)", operatorRoot, body, operatorRoot)
	}
	// A minute and more: the kubelet's probes run (startup, then liveness), and a plugin that
	// failed for want of the driver would have restarted by then.
	for deadline := time.Now().Add(70 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Second) {
		p, err := e.client.CoreV1().Pods(releaseNS).Get(ctx, plugin.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := p.Status.ContainerStatuses[0].RestartCount; n != 0 {
			t.Fatalf("the plugin restarted %d times while waiting for the driver:\n%s", n, e.describe(ctx, releaseNS, plugin.Name))
		}
		if s := e.gpuSlices(ctx, t); len(s) > 0 {
			t.Fatalf("the plugin published ResourceSlices %q while %s was empty", s, operatorRoot)
		}
	}
	if logs := e.pluginLog(ctx, t, plugin.Name); !strings.Contains(logs, "Waiting for the NVIDIA driver under its root") {
		t.Errorf("the plugin's log does not say that it waits for the driver:\n%s", lastLines(logs, 20))
	}

	// The driver container is up: it loaded its kernel module, and its root is mounted on the
	// driver root.
	e.loadModule(ctx, versionA)
	e.exec(ctx, "sh", "-c", "mkdir -p "+operatorRoot+" && mount --bind "+rootA+" "+operatorRoot)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return e.pluginPodOrNil(ctx) != nil && len(e.gpuSlices(ctx, t)) > 0, nil
	}); err != nil {
		t.Fatalf("the plugin did not serve within 2 minutes of the driver's arrival: %v\n%s", err, lastLines(e.pluginLog(ctx, t, plugin.Name), 20))
	}
	e.runPod(ctx, t, "driver-a", gpuClass, 1, driverRootScript)
	t.Cleanup(func() { _ = e.stopWorkload(context.Background(), "driver-a") })
	e.checkDriverFiles(ctx, t, "driver-a", rootA, versionA)
	e.checkSpecHostPath(ctx, t, e.allocated(ctx, t, "driver-a")[0], operatorRoot+"/dev/")
	before, err := e.client.CoreV1().Pods(ns).Get(ctx, "driver-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The upgrade: the new driver container unloads the old module, loads its own (the mock's
	// NVML refuses libraries of another version than the loaded module's, nvmlmock module.go),
	// and its root replaces the old one's. The plugin's process calls the old library for as
	// long as it lives (nvml.ErrLibraryBound): it follows by starting again in a new process,
	// in its container (exec), which computes the new driver's edits.
	const execAgain = "starting the plugin again in a new process"
	e.loadModule(ctx, versionB)
	e.exec(ctx, "sh", "-c", "umount "+operatorRoot+" && mount --bind "+rootB+" "+operatorRoot)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		log := e.pluginLog(ctx, t, plugin.Name)
		i := strings.Index(log, execAgain)
		return i >= 0 && strings.Contains(log[i:], "Plugin running"), nil
	}); err != nil {
		t.Fatalf("the plugin did not start again in a new process for the replaced driver root within 2 minutes:\n%s", lastLines(e.pluginLog(ctx, t, plugin.Name), 20))
	}
	e.runPod(ctx, t, "driver-b", gpuClass, 1, driverRootScript)
	e.checkDriverFiles(ctx, t, "driver-b", rootB, versionB)
	e.deletePod(ctx, t, "driver-b")

	if p, err := e.client.CoreV1().Pods(ns).Get(ctx, "driver-a", metav1.GetOptions{}); err != nil || p.UID != before.UID || p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the pod started before the upgrade is not the same pod running: %v %+v", err, p.Status)
	}
	if p, err := e.client.CoreV1().Pods(releaseNS).Get(ctx, plugin.Name, metav1.GetOptions{}); err != nil || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the plugin restarted: %v %+v", err, p.Status.ContainerStatuses)
	}
	e.deletePod(ctx, t, "driver-a")
	e.expectNoLeftovers(ctx, t)
}

// gpuSlices are the names of the GPU driver's ResourceSlices.
func (e *env) gpuSlices(ctx context.Context, t *testing.T) []string {
	t.Helper()
	list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		if s.Spec.Driver == gpuClass {
			out = append(out, s.Name)
		}
	}
	return out
}

// pluginLog is the GPU plugin container's log.
func (e *env) pluginLog(ctx context.Context, t *testing.T, pod string) string {
	t.Helper()
	b, err := e.client.CoreV1().Pods(releaseNS).GetLogs(pod, &corev1.PodLogOptions{Container: "plugin"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("the plugin's log: %v", err)
	}
	return string(b)
}

// loadModule makes version the mock GPU machine's loaded kernel module on the node, in the state
// directory the plugin's mock keeps under its data directory (nvmlmock.LoadModule), as a driver
// container or a reboot after a driver upgrade does.
func (e *env) loadModule(ctx context.Context, version string) {
	dir := "/var/lib/kubelet/plugins/" + gpuClass + "/mock"
	e.exec(ctx, "sh", "-c", fmt.Sprintf("mkdir -p %s && printf '%%s' '%s' > %s/%s", dir, nvmlmock.ModuleVersionFile(version), dir, nvmlmock.ModuleFileName))
}
