package nodeplugin

import (
	"context"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// callMetrics time what the kubelet waits for when it calls the plugin, in two parts the
// driver's own histograms do not see: the whole gRPC call as the plugin's server handles it
// (for NodePrepareResources that includes the kubelet plugin helper's GET of each claim), and
// each request of the plugin's API client. Together with accel_dra_prepare_duration_seconds
// they tell an operator whether a slow prepare is the plugin, the apiserver, or neither
// (then it is between the kubelet and the plugin).
type callMetrics struct {
	grpc *prometheus.HistogramVec
	api  *prometheus.HistogramVec
}

// callBuckets span 100µs..5s.
var callBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0015, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

func newCallMetrics(driver string, reg prometheus.Registerer) *callMetrics {
	labels := prometheus.Labels{"driver": driver}
	m := &callMetrics{
		grpc: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "accel_dra", Name: "grpc_request_duration_seconds", ConstLabels: labels,
			Help:    "Time the plugin takes to answer a gRPC call of the kubelet, by method; NodePrepareResources includes the claim GETs from the API server.",
			Buckets: callBuckets,
		}, []string{"method"}),
		api: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "accel_dra", Name: "api_request_duration_seconds", ConstLabels: labels,
			Help:    "Round trip of the plugin's API server requests (sent to response headers), by HTTP verb and resource; watches are not counted.",
			Buckets: callBuckets,
		}, []string{"verb", "resource"}),
	}
	reg.MustRegister(m.grpc, m.api)
	return m
}

// interceptor is a unary gRPC server interceptor (kubeletplugin.GRPCInterceptor).
func (m *callMetrics) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.grpc.WithLabelValues(path.Base(info.FullMethod)).Observe(time.Since(start).Seconds())
	return resp, err
}

// wrapTransport is a rest.Config WrapTransport.
func (m *callMetrics) wrapTransport(rt http.RoundTripper) http.RoundTripper {
	return timedTransport{next: rt, m: m}
}

type timedTransport struct {
	next http.RoundTripper
	m    *callMetrics
}

func (t timedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") == "true" {
		return t.next.RoundTrip(req)
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	t.m.api.WithLabelValues(req.Method, apiResource(req.URL.Path)).Observe(time.Since(start).Seconds())
	return resp, err
}

// apiResource is the resource a request's path names (/api/v1/namespaces/ns/pods/x/status ->
// pods), so that the label has as few values as the plugin has resources.
func apiResource(p string) string {
	segs := strings.Split(strings.Trim(p, "/"), "/")
	var rest []string
	switch {
	case len(segs) >= 3 && segs[0] == "api":
		rest = segs[2:]
	case len(segs) >= 4 && segs[0] == "apis":
		rest = segs[3:]
	default:
		return "other"
	}
	if rest[0] == "namespaces" && len(rest) >= 3 {
		return rest[2]
	}
	return rest[0]
}
