// Package cluster runs a real, throw-away Kubernetes control plane (etcd, kube-apiserver,
// kube-scheduler, kube-controller-manager) on loopback, plus real kubelets that talk to an
// in-process fake container runtime (package fakecri), for end-to-end tests of the DRA plugin and
// for the demo program.
//
// Binaries come from $KUBE_BIN_DIR, or else from hack/build-k8s.sh (built once, then cached).
// Everything lives in one work directory, removed by Stop unless $E2E_KEEP_DIR=1; component logs
// are in LogsDir(). Every process is started in its own process group with PR_SET_PDEATHSIG, and
// Stop ends each one by PID, so nothing outlives the test binary.
//
// Each kubelet runs in its own user and mount namespace with /proc/sys read-only (and a private
// /var/log), because a kubelet otherwise rewrites host kernel settings and leaves bind mounts and
// directories on the host.
package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Environment knobs.
const (
	// EnvBinDir names a directory with etcd, kube-apiserver, kube-scheduler,
	// kube-controller-manager and kubelet; without it hack/build-k8s.sh provides them.
	EnvBinDir = "KUBE_BIN_DIR"
	// EnvKeepDir set to 1 keeps the work directory (logs, kubelet root dirs, configs) after Stop.
	EnvKeepDir = "E2E_KEEP_DIR"
)

// Generous limits for a loaded 2-core CI machine; each failure reports the component's log tail.
const (
	etcdTimeout      = 1 * time.Minute
	apiserverTimeout = 3 * time.Minute
	componentTimeout = 3 * time.Minute
	nodeTimeout      = 3 * time.Minute
	logTailLines     = 40
	serviceCIDR      = "10.0.0.0/24"
	serviceIP        = "10.0.0.1"
)

// Options configure Start. The zero value is a working cluster.
type Options struct {
	// BinDir overrides $KUBE_BIN_DIR and hack/build-k8s.sh.
	BinDir string
	// Dir is the work directory (created if missing). Default: a new directory under
	// os.TempDir(). Keep it short: kubelet plugin sockets live below it and unix socket paths
	// are limited to 107 bytes. A Dir given here is never removed.
	Dir string
	// KeepDir keeps the work directory after Stop, as $E2E_KEEP_DIR=1 does.
	KeepDir bool
	// StopOnSignal makes SIGINT and SIGTERM stop the cluster and exit the program (status 130 or
	// 143). For programs such as the demo; StartForTest sets it too.
	StopOnSignal bool
	// Extra flags, appended after the harness's own (a repeated flag overrides).
	APIServerFlags, SchedulerFlags, ControllerManagerFlags []string
	// Logf receives progress messages (phases and how long they took). Default: discarded.
	Logf func(format string, args ...any)
}

// Cluster is a running control plane. Its methods are safe for concurrent use.
type Cluster struct {
	opts    Options
	dir     string
	logsDir string
	binDir  string
	pki     *pki
	logf    func(string, ...any)

	adminToken   string
	adminKubecfg string
	apiserverURL string
	schedulerURL string
	restConfig   *rest.Config
	client       kubernetes.Interface

	mu        sync.Mutex
	procs     []*Process
	nodes     []*Node
	stopFuncs []func() // in start order; Stop runs them in reverse
	stopOnce  sync.Once
	stopped   chan struct{}
}

// Start starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager on free loopback
// ports and returns when all are healthy and the default service account exists (so pods can be
// created). On error everything already started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Cluster, retErr error) {
	c := &Cluster{opts: opts, logf: opts.Logf, stopped: make(chan struct{})}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	if opts.StopOnSignal {
		c.stopOnSignal()
	}
	defer func() {
		if retErr != nil {
			c.Stop()
		}
	}()

	var err error
	if opts.Dir != "" {
		c.dir = opts.Dir
		err = os.MkdirAll(c.dir, 0o755)
	} else {
		c.dir, err = os.MkdirTemp("", "e2e-")
	}
	if err != nil {
		return nil, fmt.Errorf("creating work dir: %w", err)
	}
	c.logsDir = filepath.Join(c.dir, "logs")
	if err := os.MkdirAll(c.logsDir, 0o755); err != nil {
		return nil, err
	}
	c.logf("work dir %s", c.dir)

	c.binDir, err = findBinDir(ctx, opts, filepath.Join(c.logsDir, "build-k8s.log"), c.logf)
	if err != nil {
		return nil, err
	}

	begin := time.Now()
	if c.pki, err = newPKI(filepath.Join(c.dir, "pki")); err != nil {
		return nil, fmt.Errorf("generating certificates: %w", err)
	}
	c.adminToken = randomToken()
	tokenFile := filepath.Join(c.dir, "pki", "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(c.adminToken+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, err
	}

	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort, schedPort, kcmPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	etcdMetrics := ports[5]

	// etcd
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	etcd, err := c.startComponent("etcd", []string{
		filepath.Join(c.binDir, "etcd"),
		"--name=e2e",
		"--data-dir=" + filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=e2e=" + peerURL,
		"--listen-metrics-urls=http://127.0.0.1:" + strconv.Itoa(etcdMetrics),
		"--unsafe-no-fsync",
		"--log-level=warn",
	})
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, etcdTimeout, etcd, "etcd /health", httpCheck(nil, etcdURL+"/health", `"health":"true"`)); err != nil {
		return nil, err
	}
	c.logf("etcd ready after %s", time.Since(begin).Round(10*time.Millisecond))

	// kube-apiserver
	c.apiserverURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	apiserver, err := c.startComponent("kube-apiserver", append([]string{
		filepath.Join(c.binDir, "kube-apiserver"),
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		// 1.37 refuses a loopback advertise address with the default lease reconciler.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + c.pki.ServingCertFile,
		"--tls-private-key-file=" + c.pki.ServingKey,
		"--client-ca-file=" + c.pki.CAFile,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.pki.SAPubFile,
		"--service-account-signing-key-file=" + c.pki.SAKeyFile,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		"--cert-dir=" + filepath.Join(c.dir, "kube-apiserver"),
		"--v=1",
	}, opts.APIServerFlags...))
	if err != nil {
		return nil, err
	}
	c.restConfig = &rest.Config{
		Host:            c.apiserverURL,
		BearerToken:     c.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.pki.CAFile},
		QPS:             50,
		Burst:           100,
	}
	if c.client, err = kubernetes.NewForConfig(c.restConfig); err != nil {
		return nil, err
	}
	c.adminKubecfg = filepath.Join(c.dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.adminKubecfg, c.apiserverURL, c.pki.CAFile, &clientcmdapi.AuthInfo{Token: c.adminToken}); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, apiserverTimeout, apiserver, "kube-apiserver /readyz", func(ctx context.Context) error {
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").Timeout(10 * time.Second).DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, lastLines(string(body), 5))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	c.logf("kube-apiserver ready after %s", time.Since(begin).Round(10*time.Millisecond))

	// kube-scheduler and kube-controller-manager, both with the admin identity.
	common := []string{
		"--kubeconfig=" + c.adminKubecfg,
		"--authentication-kubeconfig=" + c.adminKubecfg,
		"--authorization-kubeconfig=" + c.adminKubecfg,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--v=2",
	}
	c.schedulerURL = "https://127.0.0.1:" + strconv.Itoa(schedPort)
	sched, err := c.startComponent("kube-scheduler", append(append([]string{
		filepath.Join(c.binDir, "kube-scheduler"),
		"--secure-port=" + strconv.Itoa(schedPort),
		"--cert-dir=" + filepath.Join(c.dir, "kube-scheduler"),
	}, common...), opts.SchedulerFlags...))
	if err != nil {
		return nil, err
	}
	kcm, err := c.startComponent("kube-controller-manager", append(append([]string{
		filepath.Join(c.binDir, "kube-controller-manager"),
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--cert-dir=" + filepath.Join(c.dir, "kube-controller-manager"),
		"--service-account-private-key-file=" + c.pki.SAKeyFile,
		"--root-ca-file=" + c.pki.CAFile,
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file=" + c.pki.CAFile,
		"--cluster-signing-key-file=" + c.pki.CAKeyFile,
		// Its default, /usr/libexec/kubernetes/..., would be created on the host.
		"--flex-volume-plugin-dir=" + filepath.Join(c.dir, "kube-controller-manager", "flexvolume"),
	}, common...), opts.ControllerManagerFlags...))
	if err != nil {
		return nil, err
	}
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // self-signed loopback component
	if err := waitFor(ctx, componentTimeout, sched, "kube-scheduler /healthz", httpCheck(insecure, "https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz", "ok")); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, componentTimeout, kcm, "kube-controller-manager /healthz", httpCheck(insecure, "https://127.0.0.1:"+strconv.Itoa(kcmPort)+"/healthz", "ok")); err != nil {
		return nil, err
	}
	// Pods are refused until their namespace's service account exists; its appearance also shows
	// that the controller-manager's controllers run.
	if err := waitFor(ctx, componentTimeout, kcm, "service account default/default", func(ctx context.Context) error {
		_, err := c.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	c.logf("control plane ready after %s", time.Since(begin).Round(10*time.Millisecond))
	return c, nil
}

// StartForTest starts a cluster for a test and stops it in t.Cleanup. When the test fails, the
// cleanup first logs the tail of every component's log. It fails the test if Start fails.
func StartForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	opts.StopOnSignal = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.DumpLogs(testLogWriter{t}, logTailLines)
		}
		c.Stop()
	})
	return c
}

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// RESTConfig returns a copy of the admin (system:masters) client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// SchedulerURL is the kube-scheduler's secure port (https, a self-signed certificate), where
// it serves /metrics and /debug/pprof to the admin token (RESTConfig's BearerToken).
func (c *Cluster) SchedulerURL() string { return c.schedulerURL }

// Client is an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// KubeconfigPath is an admin kubeconfig file, for kubectl or a plugin's --kubeconfig.
func (c *Cluster) KubeconfigPath() string { return c.adminKubecfg }

// Dir is the work directory.
func (c *Cluster) Dir() string { return c.dir }

// LogsDir holds one <name>.log per started process.
func (c *Cluster) LogsDir() string { return c.logsDir }

// BinDir holds the Kubernetes binaries in use (kubectl among them).
func (c *Cluster) BinDir() string { return c.binDir }

// CAFile is the cluster CA certificate (PEM).
func (c *Cluster) CAFile() string { return c.pki.CAFile }

// Processes returns every process started so far, in start order, including exited ones.
func (c *Cluster) Processes() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.procs...)
}

// Nodes returns the nodes added so far.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// StartProcess runs args[0] with args[1:] (e.g. the DRA plugin), its output appended to
// <LogsDir>/<name>.log. env entries (KEY=VALUE) are added to the harness's environment. The
// process is stopped by Stop if it is still running then. Run programs directly (or with `exec`
// in a shell): if the test binary dies without cleanup, PR_SET_PDEATHSIG kills the direct child
// only.
func (c *Cluster) StartProcess(name string, args []string, env []string) (*Process, error) {
	p, err := startProcess(name, args, env, filepath.Join(c.logsDir, name+".log"))
	if err != nil {
		return nil, err
	}
	c.register(p, func() { _ = p.Stop() })
	return p, nil
}

func (c *Cluster) startComponent(name string, args []string) (*Process, error) {
	p, err := c.StartProcess(name, args, nil)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (c *Cluster) register(p *Process, stop func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p != nil {
		c.procs = append(c.procs, p)
	}
	if stop != nil {
		c.stopFuncs = append(c.stopFuncs, stop)
	}
}

// DumpLogs writes the last lines of every process's log to w.
func (c *Cluster) DumpLogs(w io.Writer, lines int) {
	seen := map[string]bool{}
	procs := c.Processes()
	for i := len(procs) - 1; i >= 0; i-- { // a restarted program's latest run has the whole log
		p := procs[i]
		if seen[p.LogPath] {
			continue
		}
		seen[p.LogPath] = true
		state := "running"
		if p.Exited() {
			state = exitText(p.ExitError())
		}
		fmt.Fprintf(w, "----- %s (pid %d, %s), last %d lines of %s:\n%s\n", p.Name, p.Pid(), state, lines, p.LogPath, p.LogTail(lines))
	}
}

// Stop ends everything the cluster started, newest first (plugins, kubelets and fake runtimes,
// then the control plane), and removes the work directory unless asked to keep it. It is safe
// to call more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		funcs := c.stopFuncs
		c.mu.Unlock()
		for i := len(funcs) - 1; i >= 0; i-- {
			funcs[i]()
		}
		close(c.stopped)
		if c.dir == "" {
			return
		}
		if c.opts.KeepDir || os.Getenv(EnvKeepDir) == "1" {
			c.logf("keeping work dir %s", c.dir)
			return
		}
		if c.opts.Dir == "" {
			if err := os.RemoveAll(c.dir); err != nil {
				c.logf("removing work dir: %v", err)
			}
		}
	})
}

func (c *Cluster) stopOnSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		defer signal.Stop(ch)
		select {
		case sig := <-ch:
			fmt.Fprintf(os.Stderr, "cluster: received %v, stopping every process\n", sig)
			c.Stop()
			code := 130
			if sig == syscall.SIGTERM {
				code = 143
			}
			os.Exit(code)
		case <-c.stopped:
		}
	}()
}

// waitFor polls check until it succeeds, proc exits, timeout passes or ctx ends. Its errors name
// what was awaited and carry the last check error and the tail of proc's log.
func waitFor(ctx context.Context, timeout time.Duration, proc *Process, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-proc.Done():
			return fmt.Errorf("waiting for %s: %s exited (%s) after %s; last check: %v\n--- last %d lines of %s:\n%s",
				what, proc.Name, exitText(proc.ExitError()), time.Since(start).Round(time.Millisecond), last, logTailLines, proc.LogPath, proc.LogTail(logTailLines))
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: not ready after %s (%v); last check: %v\n--- last %d lines of %s:\n%s",
				what, time.Since(start).Round(time.Millisecond), ctx.Err(), last, logTailLines, proc.LogPath, proc.LogTail(logTailLines))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// httpCheck GETs url and expects 200 with want in the body.
func httpCheck(tlsConfig *tls.Config, url, want string) func(context.Context) error {
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 10 * time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, lastLines(string(body), 5))
		}
		return nil
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// freePorts picks n distinct free loopback ports by listening on all of them at once.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func writeKubeconfig(path, server, caFile string, auth *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["user"] = auth
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "user"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}

// isNotFound is apierrors.IsNotFound, kept here so that node.go reads plainly.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
