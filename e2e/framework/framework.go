// Package framework holds what accel-dra's end-to-end tests, benchmarks and demo share on top
// of the local cluster: the project's binaries, starting the node plugin on a node the way the
// DaemonSet does, the DeviceClasses, and waits on ResourceSlices and pods.
package framework

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/accel-dra/accel-dra/deployments/helm"
	"github.com/accel-dra/accel-dra/e2e/cluster"
)

// EnvBinDir names a directory holding the project's binaries (make sets it); without it they
// are built once per process into a temporary directory.
const EnvBinDir = "ACCEL_DRA_BIN_DIR"

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binary returns the path of one of the project's binaries, building them if needed.
func Binary(name string) (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w (run `make build`)", EnvBinDir, dir, err)
		}
		return p, nil
	}
	buildOnce.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		binDir, buildErr = os.MkdirTemp("", "accel-dra-bin-")
		if buildErr != nil {
			return
		}
		// The plugin installs the toolkit's hook that ships beside it (hack/build.sh builds it too).
		cmd := exec.Command("go", "build", "-trimpath", "-o", binDir+"/", "./cmd/...", "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook")
		cmd.Dir = root
		// The plugin needs cgo (go-nvml); see the Makefile.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building binaries: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		return "", buildErr
	}
	return filepath.Join(binDir, name), nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Driver names.
const (
	GPUDriver = "gpu.accel-dra.io"
	NPUDriver = "npu.accel-dra.io"
)

// PluginOptions say how to run the node plugin.
type PluginOptions struct {
	// Backend is mock or npu-mock (default mock).
	Backend string
	// Profile is the mock profile; empty means the backend's default.
	Profile string
	// Driver defaults to the backend's driver.
	Driver string
	// Kubeconfig defaults to the cluster's admin kubeconfig.
	Kubeconfig string
	// ExtraArgs are appended.
	ExtraArgs []string
	// PodUID is what the DaemonSet passes as $POD_UID (--pod-uid): it turns on the kubelet's
	// rolling update, under which two plugins for one driver may serve a node at once.
	PodUID string
	// NoWait returns as soon as the process started, without waiting for it to be ready: for a
	// plugin that the test expects to refuse to run (e2e/gates).
	NoWait bool
}

// Plugin is a node plugin process on a node.
type Plugin struct {
	Node     *cluster.Node
	Driver   string
	CDIDir   string
	HTTPAddr string
	Args     []string

	c      *cluster.Cluster
	name   string
	proc   *cluster.Process
	runs   int
	noWait bool
}

// StartPlugin runs accel-dra-kubelet-plugin for a node with the paths of that node's kubelet,
// as the DaemonSet does, and waits until its ResourceSlices are published.
func StartPlugin(ctx context.Context, c *cluster.Cluster, n *cluster.Node, o PluginOptions) (*Plugin, error) {
	bin, err := Binary("accel-dra-kubelet-plugin")
	if err != nil {
		return nil, err
	}
	if o.Backend == "" {
		o.Backend = "mock"
	}
	if o.Driver == "" {
		o.Driver = GPUDriver
		if strings.HasPrefix(o.Backend, "npu") {
			o.Driver = NPUDriver
		}
	}
	if o.Kubeconfig == "" {
		o.Kubeconfig = c.KubeconfigPath()
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	p := &Plugin{
		Node: n, Driver: o.Driver, CDIDir: n.CDIDirs[len(n.CDIDirs)-1], c: c,
		HTTPAddr: "127.0.0.1:" + strconv.Itoa(port),
		name:     "plugin-" + n.Name + "-" + strings.Split(o.Driver, ".")[0],
		noWait:   o.NoWait,
	}
	if o.PodUID != "" {
		p.name += "-" + o.PodUID
	}
	// The plugin runs with exactly the args the Helm chart gives its DaemonSet on a mock
	// cluster; only the host paths, which differ per harness node, and identity are replaced.
	kind := "gpu"
	if strings.HasPrefix(o.Backend, "npu") {
		kind = "npu"
	}
	values := map[string]any{
		// A host process, with a runtime that starts no containers: its MPS daemons are its
		// child processes, as docs/sharing.md says for a plugin run so.
		"plugin": map[string]any{"sharing": map[string]any{"mpsDaemons": "process"}},
		"mock":   map[string]any{"enabled": true, kind + "Profile": o.Profile},
		"drivers": map[string]any{
			"gpu": map[string]any{"enabled": kind == "gpu", "driverName": o.Driver},
			"npu": map[string]any{"enabled": kind == "npu", "driverName": o.Driver},
		},
	}
	args, err := helm.PluginArgs(values, o.Driver, map[string]string{
		"node-name":       n.Name,
		"kubeconfig":      o.Kubeconfig,
		"cdi-root":        p.CDIDir,
		"registrar-dir":   n.RegistrarDir(),
		"plugin-data-dir": n.PluginDataDir(o.Driver),
		"http-address":    p.HTTPAddr,
		// The node's /dev/char: the plugin links device nodes there (package devchar), never
		// in this machine's.
		"dev-char-dir": filepath.Join(n.Dir, "dev", "char"),
	})
	if o.PodUID != "" {
		args = helm.OverrideFlags(args, map[string]string{"pod-uid": o.PodUID})
	}
	if err != nil {
		return nil, fmt.Errorf("plugin args from the Helm chart: %w", err)
	}
	if got, _ := helm.FlagValue(args, "backend"); got != o.Backend {
		return nil, fmt.Errorf("the chart runs backend %q, the test asked for %q", got, o.Backend)
	}
	p.Args = append([]string{bin}, args...)
	p.Args = append(p.Args, o.ExtraArgs...)
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Plugin) start(ctx context.Context) error {
	p.runs++
	proc, err := p.c.StartProcess(fmt.Sprintf("%s-%d", p.name, p.runs), p.Args, nil)
	if err != nil {
		return err
	}
	p.proc = proc
	if p.noWait {
		return nil
	}
	return p.WaitReady(ctx)
}

// Process is the current plugin process.
func (p *Plugin) Process() *cluster.Process { return p.proc }

// WaitReady waits until the plugin reports that the kubelet registered it.
func (p *Plugin) WaitReady(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.proc.Done():
			return false, fmt.Errorf("plugin exited")
		default:
		}
		resp, err := http.Get("http://" + p.HTTPAddr + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("plugin %s on %s not registered with the kubelet: %w\n%s", p.Driver, p.Node.Name, err, p.proc.LogTail(40))
	}
	return nil
}

// Kill ends the plugin with SIGKILL, as a crash or OOM kill would.
func (p *Plugin) Kill() { p.proc.Kill() }

// Restart starts the plugin again with the same arguments (after Kill or Stop).
func (p *Plugin) Restart(ctx context.Context) error {
	p.proc.Kill()
	<-p.proc.Done()
	return p.start(ctx)
}

// Metric returns a metric of the plugin from its /metrics endpoint, summed over its series.
func (p *Plugin) Metric(name string, labels ...string) (float64, error) {
	return ScrapeMetric(p.HTTPAddr, name, labels...)
}

// ScrapeMetric reads the Prometheus text endpoint at addr and sums the samples of a metric whose
// labels contain all of the given `k="v"` pairs. A metric with no such sample is an error.
func ScrapeMetric(addr, name string, labels ...string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
next:
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("metric %s%v not found", name, labels)
	}
	return sum, nil
}

// CDISpecs lists the plugin's CDI spec files.
func (p *Plugin) CDISpecs() ([]string, error) {
	entries, err := os.ReadDir(p.CDIDir)
	if err != nil {
		return nil, err
	}
	prefix := "accel-dra.io-" + strings.Split(p.Driver, ".")[0] + "_"
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// DeviceClass is the class the chart installs for a driver with migDeviceClass off: every
// device of that driver. ChartDeviceClasses are those of the chart's defaults.
func DeviceClass(driver string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
		}}},
	}
}

// EnsureDeviceClasses creates the GPU and NPU classes.
func EnsureDeviceClasses(ctx context.Context, client kubernetes.Interface) error {
	for _, d := range []string{GPUDriver, NPUDriver} {
		_, err := client.ResourceV1().DeviceClasses().Create(ctx, DeviceClass(d), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// MIGClass is the chart's default name of the GPU driver's class of MIG devices.
const MIGClass = "mig.gpu.accel-dra.io"

// ChartDeviceClasses renders the DeviceClasses the chart installs with its default values and
// both drivers enabled: with migDeviceClass on (the default), the GPU driver's class selects
// whole GPUs (type gpu) and MIGClass its MIG devices; the NPU driver's selects every device.
// Rendered rather than written out here, so that a test on MIG nodes claims what a user's
// class would.
func ChartDeviceClasses() ([]*resourceapi.DeviceClass, error) {
	return ChartDeviceClassesWith(nil)
}

// ChartDeviceClassesWith is ChartDeviceClasses with gpuClass as the values of
// drivers.gpu.deviceClass (for example extendedResourceName).
func ChartDeviceClassesWith(gpuClass map[string]any) ([]*resourceapi.DeviceClass, error) {
	gpu := map[string]any{"enabled": true, "nvidiaDevicePluginDisabled": true}
	if gpuClass != nil {
		gpu["deviceClass"] = gpuClass
	}
	r, err := helm.Render(helm.Options{Values: map[string]any{
		// The nvml backend renders only once told that no NVIDIA device plugin runs beside it;
		// the DeviceClasses do not depend on that.
		"drivers": map[string]any{"gpu": gpu, "npu": map[string]any{"enabled": true}},
	}})
	if err != nil {
		return nil, fmt.Errorf("chart DeviceClasses: %w", err)
	}
	var out []*resourceapi.DeviceClass
	for _, u := range r.OfKind("DeviceClass") {
		dc := &resourceapi.DeviceClass{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dc); err != nil {
			return nil, fmt.Errorf("chart DeviceClass %s: %w", u.GetName(), err)
		}
		out = append(out, dc)
	}
	return out, nil
}

// EnsureChartDeviceClasses creates ChartDeviceClasses (instead of EnsureDeviceClasses).
func EnsureChartDeviceClasses(ctx context.Context, client kubernetes.Interface) error {
	classes, err := ChartDeviceClasses()
	if err != nil {
		return err
	}
	for _, dc := range classes {
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// WaitForSlices waits until the node's pool of a driver has the given number of devices and
// returns its slices.
func WaitForSlices(ctx context.Context, client kubernetes.Interface, driver, node string, devices int) ([]resourceapi.ResourceSlice, error) {
	var slices []resourceapi.ResourceSlice
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + driver})
		if err != nil {
			return false, nil
		}
		n := 0
		for _, s := range list.Items {
			n += len(s.Spec.Devices)
		}
		slices = list.Items
		return n == devices, nil
	})
	if err != nil {
		return slices, fmt.Errorf("ResourceSlices of %s on %s: want %d devices: %w", driver, node, devices, err)
	}
	return slices, nil
}

// DeletePod deletes a pod and waits until it is gone from the API server.
func DeletePod(ctx context.Context, client kubernetes.Interface, ns, name string, timeout time.Duration) error {
	if err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return fmt.Errorf("pod %s/%s not gone: %w", ns, name, err)
	}
	return nil
}

// WaitForPodRunning waits for a pod to run.
func WaitForPodRunning(ctx context.Context, client kubernetes.Interface, ns, name string, timeout time.Duration) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		return pod, fmt.Errorf("pod %s/%s not running: %w; %s", ns, name, err, DescribePod(ctx, client, ns, name))
	}
	return pod, nil
}

// WaitForPodEvent waits for an event on a pod whose message contains all of substrs.
func WaitForPodEvent(ctx context.Context, client kubernetes.Interface, ns, pod string, timeout time.Duration, substrs ...string) (*corev1.Event, error) {
	var found *corev1.Event
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, nil
		}
	next:
		for i := range evs.Items {
			for _, s := range substrs {
				if !strings.Contains(evs.Items[i].Message, s) {
					continue next
				}
			}
			found = &evs.Items[i]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no event on pod %s/%s containing %q: %w; %s", ns, pod, substrs, err, DescribePod(ctx, client, ns, pod))
	}
	return found, nil
}

// DescribePod summarises a pod's phase, conditions and events for failure messages.
func DescribePod(ctx context.Context, client kubernetes.Interface, ns, name string) string {
	var b strings.Builder
	if p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&b, "phase=%s node=%s", p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Message)
		}
	}
	if evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}); err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "\n  event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

// DeviceClaim is a claim of count devices of class in one request, each matching every CEL
// selector, with a matchAttribute constraint when matchAttribute is not empty.
func DeviceClaim(request, class string, count int64, selectors []string, matchAttribute string) resourceapi.DeviceClaim {
	req := resourceapi.DeviceRequest{Name: request, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	for _, s := range selectors {
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	claim := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}
	if matchAttribute != "" {
		claim.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{request}, MatchAttribute: new(resourceapi.FullyQualifiedName(matchAttribute))}}
	}
	return claim
}
