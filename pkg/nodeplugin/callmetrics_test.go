package nodeplugin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
)

func TestAPIResource(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1", "resourceclaims"},
		{"/apis/resource.k8s.io/v1/resourceslices", "resourceslices"},
		{"/apis/resource.k8s.io/v1/resourceslices/node-a-gpu", "resourceslices"},
		{"/api/v1/namespaces/default/events", "events"},
		{"/api/v1/nodes/node-a", "nodes"},
		{"/api/v1/namespaces/kube-system", "namespaces"},
		{"/api/v1/namespaces/ns/pods/p/status", "pods"},
		{"/api/v1", "other"},
		{"/apis/resource.k8s.io/v1", "other"},
		{"/version", "other"},
		{"/", "other"},
	} {
		if got := apiResource(tc.path); got != tc.want {
			t.Errorf("apiResource(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestCallMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newCallMetrics("gpu.example.com", reg)

	// gRPC: every call is counted under its method, failed ones too, and the handler's answer
	// passes through unchanged.
	info := &grpc.UnaryServerInfo{FullMethod: "/v1.DRAPlugin/NodePrepareResources"}
	resp, err := m.interceptor(context.Background(), "req", info, func(context.Context, any) (any, error) { return "resp", nil })
	if resp != "resp" || err != nil {
		t.Errorf("interceptor returned %v, %v", resp, err)
	}
	boom := errors.New("boom")
	if _, err := m.interceptor(context.Background(), "req", info, func(context.Context, any) (any, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("interceptor returned error %v, want %v", err, boom)
	}
	if n := testutil.CollectAndCount(m.grpc); n != 1 {
		t.Errorf("%d gRPC series, want 1", n)
	}
	if got := histogramCount(t, reg, "accel_dra_grpc_request_duration_seconds", `method="NodePrepareResources"`); got != 2 {
		t.Errorf("NodePrepareResources counted %v times, want 2", got)
	}

	// API: requests by verb and resource; watches are long-running and not counted.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) }))
	defer srv.Close()
	client := &http.Client{Transport: m.wrapTransport(http.DefaultTransport)}
	for _, u := range []string{
		"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1",
		"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c2",
		"/apis/resource.k8s.io/v1/resourceslices?watch=true",
	} {
		resp, err := client.Get(srv.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	if got := histogramCount(t, reg, "accel_dra_api_request_duration_seconds", `verb="GET"`, `resource="resourceclaims"`); got != 2 {
		t.Errorf("claim GETs counted %v times, want 2", got)
	}
	if n := testutil.CollectAndCount(m.api); n != 1 {
		t.Errorf("%d API series, want 1 (the watch is not counted)", n)
	}
	// A request that fails is counted too: it is time the kubelet waited.
	if _, err := client.Get("http://127.0.0.1:1/api/v1/nodes/n"); err == nil {
		t.Fatal("request to a closed port succeeded")
	}
	if got := histogramCount(t, reg, "accel_dra_api_request_duration_seconds", `resource="nodes"`); got != 1 {
		t.Errorf("failed node GET counted %v times, want 1", got)
	}
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, metric := range f.GetMetric() {
			var pairs []string
			for _, l := range metric.GetLabel() {
				pairs = append(pairs, l.GetName()+`="`+l.GetValue()+`"`)
			}
			all := strings.Join(pairs, ",")
			for _, l := range labels {
				if !strings.Contains(all, l) {
					continue next
				}
			}
			return float64(metric.GetHistogram().GetSampleCount())
		}
	}
	return 0
}
