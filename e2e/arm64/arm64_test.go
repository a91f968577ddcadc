//go:build e2e

// Package arm64 runs the linux/arm64 kubelet plugin that `make build` cross compiles, under
// qemu-user emulation on an amd64 machine (natively on an arm64 one), against the harness's real
// control plane: it must publish the ResourceSlices of an arm64 GPU node (mock profile gh200-1x).
//
//	make build && KUBE_BIN_DIR=$(hack/build-k8s.sh) ACCEL_DRA_BIN_DIR=$PWD/bin go test -tags e2e -v ./e2e/arm64/
//
// It skips, saying why, when the arm64 binary or the emulator is missing, except in CI (CI=true),
// where that is a failure: CI installs qemu-user and libc6-arm64-cross (.ci/run).
package arm64

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
)

const (
	driver  = "gpu.accel-dra.io"
	profile = "gh200-1x"
	sysroot = "/usr/aarch64-linux-gnu"
)

// unavailable ends the test when something it needs is missing: a skip on a developer's machine,
// a failure in CI.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: the arm64 plugin must be tested; .ci/run installs qemu-user and libc6-arm64-cross, make build builds bin/linux_arm64)", msg)
	}
	t.Skipf("SKIP arm64 plugin test: %s (install qemu-user, libc6-arm64-cross and gcc-aarch64-linux-gnu, then make build)", msg)
}

// pluginCommand returns the argv prefix that runs the arm64 plugin on this machine.
func pluginCommand(t *testing.T) []string {
	t.Helper()
	dir := os.Getenv(framework.EnvBinDir)
	if dir == "" {
		unavailable(t, "%s is not set; it names the directory that make build fills (bin/linux_arm64 holds the arm64 binaries)", framework.EnvBinDir)
	}
	bin := filepath.Join(dir, "linux_arm64", "accel-dra-kubelet-plugin")
	if _, err := os.Stat(bin); err != nil {
		unavailable(t, "no arm64 plugin binary: %v", err)
	}
	if runtime.GOARCH == "arm64" {
		return []string{bin}
	}
	qemu, err := exec.LookPath("qemu-aarch64")
	if err != nil {
		unavailable(t, "qemu-aarch64 (Debian qemu-user) is not installed")
	}
	if _, err := os.Stat(filepath.Join(sysroot, "lib", "ld-linux-aarch64.so.1")); err != nil {
		unavailable(t, "the arm64 C library (Debian libc6-arm64-cross) is not installed: %v", err)
	}
	return []string{qemu, "-L", sysroot, bin}
}

func TestArm64PluginPublishes(t *testing.T) {
	argv := pluginCommand(t)
	if out, err := exec.Command("file", "-b", argv[len(argv)-1]).Output(); err == nil && !strings.Contains(string(out), "aarch64") {
		t.Fatalf("%s is not an arm64 binary: %s", argv[len(argv)-1], out)
	}

	c := cluster.StartForTest(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := c.Client()

	// A Grace Hopper node as its kubelet registers it; no kubelet runs here, the plugin only needs
	// the Node object (its slices are owned by it).
	nodeName := "gh200-a"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{
		corev1.LabelHostname: nodeName, corev1.LabelArchStable: "arm64", corev1.LabelOSStable: "linux",
	}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir, err := os.MkdirTemp("", "arm64-") // short: the plugin's socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := "127.0.0.1:" + strconv.Itoa(port)
	args := append(argv,
		"--node-name="+nodeName,
		"--kubeconfig="+c.KubeconfigPath(),
		"--backend=mock", "--mock-profile="+profile,
		"--plugin-data-dir="+filepath.Join(dir, "plugin"),
		"--registrar-dir="+filepath.Join(dir, "registry"),
		"--cdi-root="+filepath.Join(dir, "cdi"),
		"--http-address="+httpAddr,
	)
	for _, d := range []string{"registry", "cdi"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("running %s", strings.Join(args, " "))
	proc, err := c.StartProcess("plugin-arm64", args, nil)
	if err != nil {
		t.Fatal(err)
	}

	slices, err := framework.WaitForSlices(ctx, client, driver, nodeName, 1)
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.LogTail(40))
	}
	if len(slices) != 1 || len(slices[0].Spec.Devices) != 1 {
		t.Fatalf("got %d slices, want one with one device: %+v", len(slices), slices)
	}
	s := slices[0]
	if s.Spec.NodeName == nil || *s.Spec.NodeName != nodeName || s.Spec.Pool.Name != nodeName {
		t.Errorf("slice %s: nodeName %v, pool %q; want %s", s.Name, s.Spec.NodeName, s.Spec.Pool.Name, nodeName)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].Name != nodeName {
		t.Errorf("slice %s owners %+v, want the Node %s", s.Name, s.OwnerReferences, nodeName)
	}
	d := s.Spec.Devices[0]
	str := func(name resourceapi.QualifiedName) string {
		if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
			return *a.StringValue
		}
		return ""
	}
	if got := str("productName"); got != "NVIDIA GH200 480GB" {
		t.Errorf("productName %q, want NVIDIA GH200 480GB", got)
	}
	if got := str("resource.kubernetes.io/pciBusID"); got != "0009:01:00.0" {
		t.Errorf("pciBusID %q, want 0009:01:00.0", got)
	}
	if a := d.Attributes["resource.kubernetes.io/numaNode"]; a.IntValue == nil || *a.IntValue != 0 {
		t.Errorf("numaNode %+v, want 0 (the Grace's node, not the GPU memory's CPU-less node 1)", a)
	}
	if got := d.Attributes["cudaComputeCapability"]; got.VersionValue == nil || *got.VersionValue != "9.0.0" {
		t.Errorf("cudaComputeCapability %+v, want 9.0.0", got)
	}
	if q, ok := d.Capacity["memory"]; !ok || q.Value.String() != "97871Mi" {
		t.Errorf("memory capacity %+v, want 97871Mi", d.Capacity["memory"])
	}

	// The emulated plugin serves its endpoints too (/healthz: /readyz waits for a kubelet's
	// registration, and no kubelet runs here).
	for _, path := range []string{"/healthz", "/metrics"} {
		if err := getOK(ctx, "http://"+httpAddr+path); err != nil {
			t.Errorf("%s: %v\n%s", path, err, proc.LogTail(40))
		}
	}
	if proc.Exited() {
		t.Fatalf("the arm64 plugin exited: %v\n%s", proc.ExitError(), proc.LogTail(40))
	}
}

func getOK(ctx context.Context, url string) error {
	deadline := time.Now().Add(time.Minute)
	var last error
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		time.Sleep(500 * time.Millisecond)
	}
	return last
}
