// Package metrics holds the node plugin's Prometheus metrics. They live on a registry the caller
// owns rather than the global one, so tests can create as many plugins as they like.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "accel_dra"

// Plugin are the metrics of one node plugin.
type Plugin struct {
	Registry *prometheus.Registry

	PrepareSeconds   *prometheus.HistogramVec
	UnprepareSeconds *prometheus.HistogramVec
	PreparedClaims   prometheus.Gauge
	PublishedDevices prometheus.Gauge
	RejectedDevices  *prometheus.GaugeVec
	// OmittedAttributes counts published devices that lack an attribute whose value could not
	// be represented (a driver version that cannot be made semver).
	OmittedAttributes *prometheus.GaugeVec
	CheckpointErrors  *prometheus.CounterVec
	// DeviceHealth is 1 for a device's current health state (Healthy, Unhealthy, Unknown) and
	// 0 for the others, so that a query can both sum and alert on it.
	DeviceHealth *prometheus.GaugeVec
}

// latencyBuckets spans 100µs..5s: a prepare normally takes about a millisecond; seconds mean
// the apiserver or the disk is struggling.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// NewPlugin registers the plugin's metrics, labelled with the driver name, on a new registry.
func NewPlugin(driver string) *Plugin {
	labels := prometheus.Labels{"driver": driver}
	m := &Plugin{
		Registry: prometheus.NewRegistry(),
		PrepareSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "prepare_duration_seconds", ConstLabels: labels,
			Help:    "Time to prepare one ResourceClaim, by result (success, error).",
			Buckets: latencyBuckets,
		}, []string{"result"}),
		UnprepareSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "unprepare_duration_seconds", ConstLabels: labels,
			Help:    "Time to unprepare one ResourceClaim, by result (success, error).",
			Buckets: latencyBuckets,
		}, []string{"result"}),
		PreparedClaims: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "prepared_claims", ConstLabels: labels,
			Help: "ResourceClaims currently prepared on this node.",
		}),
		PublishedDevices: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "published_devices", ConstLabels: labels,
			Help: "Devices published in this node's ResourceSlices.",
		}),
		RejectedDevices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "rejected_devices", ConstLabels: labels,
			Help: "Devices found on this node but left out of its ResourceSlices, by reason.",
		}, []string{"reason"}),
		OmittedAttributes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "omitted_attributes", ConstLabels: labels,
			Help: "Published devices on this node without an attribute whose value could not be represented, by attribute.",
		}, []string{"attribute"}),
		CheckpointErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "checkpoint_errors_total", ConstLabels: labels,
			Help: "Checkpoint records found corrupt or unreadable and moved aside, or failed writes.",
		}, []string{"kind"}),
		DeviceHealth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "device_health", ConstLabels: labels,
			Help: "Health of each device on this node: 1 for its current state (Healthy, Unhealthy, Unknown), 0 for the others.",
		}, []string{"device", "state"}),
	}
	m.Registry.MustRegister(
		m.PrepareSeconds, m.UnprepareSeconds, m.PreparedClaims, m.PublishedDevices,
		m.RejectedDevices, m.OmittedAttributes, m.CheckpointErrors, m.DeviceHealth,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Plugin) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
