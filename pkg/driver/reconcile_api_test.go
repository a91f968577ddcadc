package driver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/metrics"
)

// TestReconcileWithSilentAPIServer: at start-up the API server accepts connections and never
// answers (an overloaded or half-partitioned control plane). Reconcile asks it whether the
// prepared claims still exist, and must give up after its budget, keep the claims it could not
// check, and say so, rather than hold the plugin's start forever.
func TestReconcileWithSilentAPIServer(t *testing.T) {
	e := newEnv(t, inventory(2))
	if r := e.prepare(claim("u1", []result{{Device: "gpu-0"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	e.drv.Close()

	silent := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-silent:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(silent)
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := New(ctx, Options{
		DriverName: driverName, NodeName: nodeName, Inventory: e.inv, CDI: cdi.New(e.cdiDir(), e.inv.Kind),
		State: store, Metrics: metrics.NewPlugin(driverName), Kube: kube,
		ReconcileAPITimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	type result struct {
		rep *ReconcileReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := drv.Reconcile(ctx)
		done <- result{rep, err}
	}()
	var got result
	select {
	case got = <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("Reconcile did not return within 45s: it waits on an API server that never answers")
	}
	if got.err != nil {
		t.Fatalf("Reconcile failed: %v; an API server that does not answer is no reason to refuse to start", got.err)
	}
	if strings.Join(got.rep.Restored, ",") != "u1" || strings.Join(got.rep.Unchecked, ",") != "u1" {
		t.Errorf("restored %v, unchecked %v; want the claim kept, and reported unchecked", got.rep.Restored, got.rep.Unchecked)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, want := range []string{"Waiting for the API server", "ns/claim-u1", "context deadline exceeded"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
}

// TestReconcileRetriesTransientAPIErrors: an API server that is briefly unavailable (503 twice)
// is asked again, and its answer counts: the claim it no longer has is dropped.
func TestReconcileRetriesTransientAPIErrors(t *testing.T) {
	e := newEnv(t, inventory(2))
	if r := e.prepare(claim("u1", []result{{Device: "gpu-0"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}`))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	defer srv.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	e.tweak = func(o *Options) { o.Kube = kube }
	rep := e.start()
	if strings.Join(rep.Dropped, ",") != "u1" || len(rep.Unchecked) != 0 || calls.Load() != 3 {
		t.Errorf("dropped %v, unchecked %v after %d calls; want u1 dropped after two 503s and a 404", rep.Dropped, rep.Unchecked, calls.Load())
	}
}
