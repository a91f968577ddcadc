package nodeplugin

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// TestHealthzDuringSlowStart runs the plugin against an API server that accepts connections
// and never answers, with a prepared claim in the checkpoint, so that its start-up waits on the
// API server (Reconcile asks whether the claim still exists). While it waits, /healthz answers
// at once, saying that the plugin is starting and what it waits for, /readyz says not ready,
// and /metrics is served; the plugin stops when told to.
func TestHealthzDuringSlowStart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := socketTempDir(t)
	o := slowAPIServerOptions(t, dir)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, o) }()

	get := func(path string) (int, string, error) { return httpGet(o.HTTPAddress, path) }
	code, body := healthzSaying(ctx, t, o.HTTPAddress, done, "API server")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "starting:") {
		t.Errorf("/healthz during start-up = %d %q, want 503 starting: ...", code, body)
	}
	if code, body, err := get("/readyz"); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("/readyz during start-up = %d %q, %v; want 503", code, body, err)
	}
	if code, _, err := get("/metrics"); err != nil || code != http.StatusOK {
		t.Errorf("/metrics during start-up = %d, %v", code, err)
	}
	stop()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its context ending")
	}
}

// healthzSaying polls the plugin's /healthz at addr until its answer says want, and returns
// it; the plugin ending first (done) or 10s passing fails the test.
func healthzSaying(ctx context.Context, t *testing.T, addr string, done <-chan error, want string) (int, string) {
	t.Helper()
	var code int
	var body string
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			t.Fatalf("the plugin exited while /healthz was to say %q: %v", want, err)
		default:
		}
		code, body, lastErr = httpGet(addr, "/healthz")
		return lastErr == nil && strings.Contains(body, want), nil
	}); err != nil {
		t.Fatalf("/healthz: %d %q, %v; want an answer saying %q", code, body, lastErr, want)
	}
	return code, body
}

// slowAPIServerOptions are the options of a mock GPU plugin, with its directories under dir,
// whose start-up waits on an API server that accepts connections and never answers: its
// checkpoint holds a prepared claim, which Reconcile asks the API server about.
func slowAPIServerOptions(t *testing.T, dir string) *Options {
	t.Helper()
	silent := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-silent:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(api.Close)
	t.Cleanup(func() { close(silent) })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, api.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	const boot = "11111111-1111-1111-1111-111111111111"
	bootFile := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootFile, []byte(boot+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.NodeName, o.Backend, o.Kube.Kubeconfig, o.BootIDFile = "node-a", backend.Mock, kubeconfig, bootFile
	o.PluginDataDir, o.RegistrarDir, o.CDIRoot = filepath.Join(dir, "p"), filepath.Join(dir, "r"), filepath.Join(dir, "cdi")
	o.DriverCheckInterval, o.DeviceHealth = 0, false
	o.HTTPAddress, o.NVIDIACDIHookSource = freeAddress(t), fakeHook(t)
	store, err := checkpoint.Open(filepath.Join(o.PluginDataDir, "checkpoint"), boot)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(checkpoint.Claim{UID: "u1", Namespace: "ns", Name: "claim-u1", State: checkpoint.StatePrepareCompleted,
		Devices: []checkpoint.PreparedDevice{{Request: "gpu", Pool: "node-a", Device: "gpu-0", CDIDeviceIDs: []string{"accel-dra.io/gpu=u1-gpu-0"}}}}); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	return o
}

// httpGet returns the status and body of GET http://<addr><path>.
func httpGet(addr, path string) (int, string, error) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// socketTempDir is a temporary directory short enough for Unix socket paths under it (108
// bytes at most; t.TempDir() can be longer).
func socketTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "plugin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// freeAddress returns a loopback address with a port nothing listens on now.
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestStartupEndpoints: /healthz and /readyz say what the start-up waits for until the plugin
// serves, and then hand over to the health checker and the registration.
func TestStartupEndpoints(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	s := newStartup()
	get := func(h http.HandlerFunc) (int, string) {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}
	s.waitFor(ctx, "the checkpoint")
	for name, h := range map[string]http.HandlerFunc{"/healthz": s.serveHealthz, "/readyz": s.serveReadyz} {
		if code, body := get(h); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "starting: waiting for the checkpoint (for ") {
			t.Errorf("%s while starting = %d %q", name, code, body)
		}
	}
	// A wait a restart would not end is no failure of liveness, and no readiness.
	s.waitAlive(ctx, "the driver")
	if code, body := get(s.serveHealthz); code != http.StatusOK || !strings.HasPrefix(body, "starting: waiting for the driver (for ") {
		t.Errorf("/healthz while waiting for the driver = %d %q, want 200 starting: ...", code, body)
	}
	if code, body := get(s.serveReadyz); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "starting: waiting for the driver (for ") {
		t.Errorf("/readyz while waiting for the driver = %d %q, want 503 starting: ...", code, body)
	}
	s.waitFor(ctx, "the checkpoint")
	if code, _ := get(s.serveHealthz); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz at the next step = %d, want 503", code)
	}
	registered := false
	s.serving(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }), func() error {
		if !registered {
			return fmt.Errorf("not registered with the kubelet yet")
		}
		return nil
	})
	if code, body := get(s.serveHealthz); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz serving = %d %q", code, body)
	}
	if code, body := get(s.serveReadyz); code != http.StatusServiceUnavailable || body != "not registered with the kubelet yet" {
		t.Errorf("/readyz serving, not registered = %d %q", code, body)
	}
	registered = true
	if code, body := get(s.serveReadyz); code != http.StatusOK || body != "ok" {
		t.Errorf("/readyz registered = %d %q", code, body)
	}
}
