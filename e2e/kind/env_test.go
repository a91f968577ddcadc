//go:build e2e

package kind

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// env is one kind cluster made by hack/kind/up.sh, as a user makes it, on an image-based
// node whose containerd really starts containers.
type env struct {
	t          *testing.T
	root       string
	name       string // the kind cluster; its one node is <name>-control-plane
	node       string
	kubeconfig string
	network    string // the Docker network kind put the node on, made for this test
	tools      string // hack/kind/tools.sh's directory: kind, helm
	kubeBin    string // hack/build-k8s.sh --for-kind's: kubectl
	client     kubernetes.Interface
	workload   string // the workload image (hack/kind/workload-image.sh)
	plugin     string // the plugin image the chart was installed with
	// sysctls are the machine's kernel settings before the cluster was made.
	sysctls map[string]string
}

// machineSysctls are the machine-wide kernel settings a kubelet (setupKernelTunables) or
// kube-proxy (conntrack) of a kind node would write if nothing stopped them.
var machineSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/netfilter/nf_conntrack_max",
}

func readSysctls() map[string]string {
	out := map[string]string{}
	for _, s := range machineSysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			out[s] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// requireDocker skips without a Docker engine, saying what to install, except in CI, where
// .ci/run installs and starts one and its absence is a failure.
func requireDocker(t *testing.T) {
	t.Helper()
	var missing []string
	if err := exec.Command("docker", "info").Run(); err != nil {
		missing = append(missing, "a Docker engine (docker info: "+err.Error()+")")
	}
	for _, tool := range []string{"mmdebstrap", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if _, err := os.Stat("/usr/include/seccomp.h"); err != nil {
		missing = append(missing, "libseccomp-dev")
	}
	if len(missing) == 0 {
		return
	}
	msg := "the kind tests need " + strings.Join(missing, ", ")
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: .ci/run installs docker.io, mmdebstrap and libseccomp-dev and starts the engine with hack/kind/docker.sh)", msg)
	}
	t.Skipf("SKIP kind tests: %s (Debian: apt-get install docker.io mmdebstrap libseccomp-dev, then as root hack/kind/docker.sh start)", msg)
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(string(bytes.TrimSpace(out)))
}

// newEnv makes the cluster with hack/kind/up.sh --images=local and installs the chart on mock
// devices; extra values go to helm. Cleanup deletes the cluster and its network and checks
// that nothing of it is left and that the machine's kernel settings did not move.
func newEnv(ctx context.Context, t *testing.T, helmArgs ...string) *env {
	return newEnvWorkers(ctx, t, 0, helmArgs...)
}

// newEnvWorkers is newEnv with worker nodes beside the control plane (<name>-worker,
// <name>-worker2, ...); e.node stays the control plane.
func newEnvWorkers(ctx context.Context, t *testing.T, workers int, helmArgs ...string) *env {
	requireDocker(t)
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	e := &env{t: t, root: moduleRoot(t), name: "accel-dra-e2e-" + hex.EncodeToString(suffix), sysctls: readSysctls()}
	e.node = e.name + "-control-plane"
	e.network = e.name
	e.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	e.tools = strings.TrimSpace(e.run(ctx, "hack/kind/tools.sh"))
	e.kubeBin = strings.TrimSpace(e.run(ctx, "hack/build-k8s.sh", "--for-kind"))
	e.workload = strings.TrimSpace(e.run(ctx, "hack/kind/workload-image.sh"))
	// ACCEL_DRA_E2E_IMAGE_TAG keeps the images of two checkouts tested at once on one docker apart.
	tag := cmp.Or(os.Getenv("ACCEL_DRA_E2E_IMAGE_TAG"), "e2e")
	e.plugin = "accel-dra-kubelet-plugin:" + tag
	t.Cleanup(e.cleanup)

	start := time.Now()
	e.runEnv(ctx, []string{
		"KIND_CLUSTER_NAME=" + e.name, "KIND_WORKERS=" + strconv.Itoa(workers), "KUBECONFIG=" + e.kubeconfig, "IMAGE_TAG=" + tag,
		// A network of the test's own, which it removes: kind never removes the one it makes.
		"KIND_EXPERIMENTAL_DOCKER_NETWORK=" + e.network,
		"HELM_EXTRA_ARGS=" + strings.Join(helmArgs, " "),
	}, "hack/kind/up.sh", "--images=local", "--no-sample")
	t.Logf("cluster %s up with the chart installed in %v", e.name, time.Since(start).Round(time.Second))
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if e.client, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) cleanup() {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if t.Failed() {
		e.dumpNode(ctx)
	}
	if out, err := e.cmd(ctx, nil, filepath.Join(e.tools, "kind"), "delete", "cluster", "--name", e.name); err != nil {
		t.Errorf("kind delete cluster: %v\n%s", err, out)
	}
	// Only what this test made: the network it named, by ID.
	if id, err := e.cmd(ctx, nil, "docker", "network", "inspect", "--format", "{{.Id}}", e.network); err == nil {
		if out, err := e.cmd(ctx, nil, "docker", "network", "rm", strings.TrimSpace(id)); err != nil {
			t.Errorf("removing network %s: %v\n%s", e.network, err, out)
		}
	}
	if out, _ := e.cmd(ctx, nil, "docker", "ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster="+e.name); strings.TrimSpace(out) != "" {
		t.Errorf("containers of cluster %s left: %s", e.name, out)
	}
	if after := readSysctls(); !equalMaps(after, e.sysctls) {
		t.Errorf("the machine's kernel settings changed: before %v, after %v", e.sysctls, after)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// dumpNode logs what a failure needs: the pods, the plugin's logs, the kubelet's last lines.
func (e *env) dumpNode(ctx context.Context) {
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"logs", "-n", "accel-dra", "-l", "app.kubernetes.io/component=gpu-plugin", "--tail=80", "--all-containers"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, _ := e.cmd(ctx, nil, filepath.Join(e.kubeBin, "kubectl"), append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
		e.t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
	out, _ := e.cmd(ctx, nil, "docker", "exec", e.node, "journalctl", "-u", "kubelet", "--no-pager", "-n", "60")
	e.t.Logf("kubelet:\n%s", out)
}

// run runs a repository script and returns its stdout; its stderr goes to the test log.
func (e *env) run(ctx context.Context, script string, args ...string) string {
	e.t.Helper()
	return e.runEnv(ctx, nil, script, args...)
}

func (e *env) runEnv(ctx context.Context, env []string, script string, args ...string) string {
	e.t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(e.root, script), args...)
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), env...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			e.t.Logf("%s: %s", filepath.Base(script), sc.Text())
		}
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		e.t.Fatalf("%s %s: %v\nstdout:\n%s", script, strings.Join(args, " "), err, stdout.String())
	}
	return stdout.String()
}

// cmd runs a command and returns its combined output.
func (e *env) cmd(ctx context.Context, env []string, name string, args ...string) (string, error) {
	c := exec.CommandContext(ctx, name, args...)
	c.Dir = e.root
	c.Env = append(os.Environ(), env...)
	out, err := c.CombinedOutput()
	return string(out), err
}

// exec runs a command in the kind node and returns its output; a failure fails the test.
func (e *env) exec(ctx context.Context, args ...string) string {
	e.t.Helper()
	return e.execOn(ctx, e.t, e.node, args...)
}

// execOn runs a command in one of the cluster's nodes and returns its output; a failure fails t.
func (e *env) execOn(ctx context.Context, t *testing.T, node string, args ...string) string {
	t.Helper()
	out, err := e.cmd(ctx, nil, "docker", append([]string{"exec", node}, args...)...)
	if err != nil {
		t.Fatalf("in node %s: %s: %v\n%s", node, strings.Join(args, " "), err, out)
	}
	return out
}

// imageArgs are the helm values that install the chart with the test's plugin image, privileged
// as TestKind installs it (MPS mounts need the propagation).
func (e *env) imageArgs() []string {
	repo, tag, _ := strings.Cut(e.plugin, ":")
	return []string{"--set", "plugin.image.repository=" + repo, "--set", "plugin.image.tag=" + tag, "--set", "plugin.image.pullPolicy=Never",
		"--set", "plugin.securityContext.privileged=true", "--set", "plugin.securityContext.allowPrivilegeEscalation=true"}
}

// podOutput waits until a pod's one container has printed the line "== end" and returns its
// log. The container then sleeps, so that its claim stays allocated while the test reads it: a
// claim made from a template goes with its pod. A pod that fails, or prints nothing within
// timeout, fails the test with its description.
func (e *env) podOutput(ctx context.Context, ns, name string, timeout time.Duration) string {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase != corev1.PodPending {
			logs, lerr := e.client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			switch {
			case lerr == nil && strings.Contains(string(logs), "== end\n"):
				return string(logs)
			case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
				e.t.Fatalf("pod %s/%s ended without finishing its script (%v):\n%s\n%s", ns, name, lerr, logs, e.describe(ctx, ns, name))
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pod %s/%s did not print its output within %v:\n%s", ns, name, timeout, e.describe(ctx, ns, name))
		}
		time.Sleep(time.Second)
	}
}

func (e *env) describe(ctx context.Context, ns, name string) string {
	out, _ := e.cmd(ctx, nil, filepath.Join(e.kubeBin, "kubectl"), "--kubeconfig", e.kubeconfig, "describe", "pod", "-n", ns, name)
	return out
}

// lines are the non-empty lines of s, sorted.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}
