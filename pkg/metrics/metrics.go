// Package metrics holds the node plugin's Prometheus metrics, and the build information both
// binaries export. They live on a registry the caller owns rather than the global one, so tests
// can create as many plugins as they like. docs/observability.md lists every metric.
//
// Two plugin processes run on a node during a rolling update with surge, and both see the
// node's hardware events (an XID reaches every process that watches the GPU). Counters of such
// node-wide events are counted only by the process that holds the node's Reporter lock
// (reporter.go), so that a sum over both pods counts each event once. What one process does
// (a prepare, a MIG instance it creates, an MPS daemon it starts) is counted by that process
// alone anyway; gauges of node state are exported by both, identical, and a query takes their
// max per node.
package metrics

import (
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"

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
	// DeviceInfo is 1 per published device, with the labels other exporters (DCGM) key on;
	// SetDevices keeps it to the published set.
	DeviceInfo *prometheus.GaugeVec
	// PublishErrors counts failed ResourceSlice writes of the slice controller, by kind
	// (dropped_fields: the API server does not know a field; error: anything else).
	PublishErrors *prometheus.CounterVec
	// MIGOperations counts dynamic-MIG instance creations and destructions, by operation
	// (create, destroy) and result (success, error); counted by the process that made the call.
	MIGOperations *prometheus.CounterVec
	// MPSDaemonStarts counts MPS control daemons started, by result; by the process that
	// started them.
	MPSDaemonStarts *prometheus.CounterVec

	// Node-wide hardware events: counted by the node's reporter only (CountXID, CountECC,
	// CountDriverChange).
	XIDEvents     *prometheus.CounterVec
	ECCEvents     *prometheus.CounterVec
	DriverChanges prometheus.Counter
	// NodeReporter is 1 in the process that counts node-wide events, 0 in the other one of a
	// rolling update.
	NodeReporter prometheus.Gauge

	reporterMu sync.Mutex
	reporter   *Reporter
	devicesMu  sync.Mutex
	devices    map[string][]string // accel_dra_device_info's series, by key
}

// latencyBuckets spans 100µs..5s: a prepare normally takes about a millisecond; seconds mean
// the apiserver or the disk is struggling.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// NewPlugin registers the plugin's metrics, labelled with the driver name, on a new registry.
func NewPlugin(driver string) *Plugin {
	labels := prometheus.Labels{"driver": driver}
	counters := func(name, help string, by ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, ConstLabels: labels, Help: help}, by)
	}
	gauges := func(name, help string, by ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, ConstLabels: labels, Help: help}, by)
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, ConstLabels: labels, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, ConstLabels: labels, Help: help})
	}
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
		PreparedClaims: gauge("prepared_claims",
			"ResourceClaims currently prepared on this node."),
		PublishedDevices: gauge("published_devices",
			"Devices published in this node's ResourceSlices."),
		RejectedDevices: gauges("rejected_devices",
			"Devices found on this node but left out of its ResourceSlices, by reason.", "reason"),
		OmittedAttributes: gauges("omitted_attributes",
			"Published devices on this node without an attribute whose value could not be represented, by attribute.", "attribute"),
		CheckpointErrors: counters("checkpoint_errors_total",
			"Checkpoint records found corrupt or unreadable and moved aside, or failed writes.", "kind"),
		DeviceHealth: gauges("device_health",
			"Health of each device on this node: 1 for its current state (Healthy, Unhealthy, Unknown), 0 for the others.", "device", "state"),
		DeviceInfo: gauges("device_info",
			"1 for each device published in this node's ResourceSlices, with its identity: join on uuid with other exporters (DCGM's UUID).", deviceInfoLabels...),
		PublishErrors: counters("resourceslice_publish_errors_total",
			"Failed attempts to write this node's ResourceSlices (retried), by kind (dropped_fields, error).", "kind"),
		MIGOperations: counters("mig_operations_total",
			"Dynamic-MIG instances created and destroyed by this process, by operation (create, destroy) and result (success, error).", "operation", "result"),
		MPSDaemonStarts: counters("mps_daemon_starts_total",
			"MPS control daemons started by this process, by result (success, error).", "result"),
		XIDEvents: counters("xid_events_total",
			"NVIDIA XID events by GPU (uuid of the physical GPU) and XID, ignored ones included; counted by the node's reporter only.", "uuid", "xid"),
		ECCEvents: counters("ecc_events_total",
			"Uncorrectable (double-bit) ECC error events by GPU (uuid of the physical GPU); counted by the node's reporter only.", "uuid"),
		DriverChanges: counter("driver_changes_total",
			"Changes of the accelerator driver's files (an upgrade) after which the CDI edits were recomputed; counted by the node's reporter only."),
		NodeReporter: gauge("node_reporter",
			"1 if this process counts the node's hardware events (it holds the node's reporter lock), 0 if another plugin process on the node does (rolling update) or this one is still starting."),
	}
	// Known label values start at zero, so that an alert on increase() sees the first error.
	for _, kind := range []string{PublishDroppedFields, PublishError} {
		m.PublishErrors.WithLabelValues(kind)
	}
	for _, op := range []string{MIGCreate, MIGDestroy} {
		for _, r := range []string{ResultSuccess, ResultError} {
			m.MIGOperations.WithLabelValues(op, r)
		}
	}
	for _, r := range []string{ResultSuccess, ResultError} {
		m.MPSDaemonStarts.WithLabelValues(r)
	}
	for _, kind := range CheckpointErrorKinds {
		m.CheckpointErrors.WithLabelValues(kind)
	}
	m.Registry.MustRegister(
		m.PrepareSeconds, m.UnprepareSeconds, m.PreparedClaims, m.PublishedDevices,
		m.RejectedDevices, m.OmittedAttributes, m.CheckpointErrors, m.DeviceHealth,
		m.DeviceInfo, m.PublishErrors, m.MIGOperations, m.MPSDaemonStarts,
		m.XIDEvents, m.ECCEvents, m.DriverChanges, m.NodeReporter,
		NewBuildInfo(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Label values of the counters.
const (
	ResultSuccess        = "success"
	ResultError          = "error"
	MIGCreate            = "create"
	MIGDestroy           = "destroy"
	PublishDroppedFields = "dropped_fields"
	PublishError         = "error"
)

// CheckpointErrorKinds are the kind label values of accel_dra_checkpoint_errors_total.
var CheckpointErrorKinds = []string{"corrupt", "identity", "write"}

// SetReporter makes node-wide events count only while r says this process is the node's
// reporter. Without one (a test, a single process), every event counts.
func (m *Plugin) SetReporter(r *Reporter) {
	m.reporterMu.Lock()
	defer m.reporterMu.Unlock()
	m.reporter = r
	m.reporting()
}

// reporting tells whether this process counts node-wide events now, and exports the answer.
func (m *Plugin) reporting() bool {
	if m.reporter == nil || m.reporter.Active() {
		m.NodeReporter.Set(1)
		return true
	}
	m.NodeReporter.Set(0)
	return false
}

// CountXID counts an XID event of the GPU uuid, if this process is the node's reporter.
func (m *Plugin) CountXID(uuid string, xid uint64) {
	m.onReporter(m.XIDEvents.WithLabelValues(uuid, strconv.FormatUint(xid, 10)))
}

// CountECC counts an uncorrectable ECC event of the GPU uuid, if this process is the node's
// reporter.
func (m *Plugin) CountECC(uuid string) { m.onReporter(m.ECCEvents.WithLabelValues(uuid)) }

// CountDriverChange counts a change of the driver, if this process is the node's reporter.
func (m *Plugin) CountDriverChange() { m.onReporter(m.DriverChanges) }

func (m *Plugin) onReporter(c prometheus.Counter) {
	m.reporterMu.Lock()
	defer m.reporterMu.Unlock()
	if m.reporting() {
		c.Inc()
	}
}

// RefreshReporter tries to become the node's reporter if this process is not yet, so that
// accel_dra_node_reporter turns 1 once the other process of a rolling update is gone even
// while no event arrives; the plugin calls it periodically.
func (m *Plugin) RefreshReporter() {
	m.reporterMu.Lock()
	defer m.reporterMu.Unlock()
	m.reporting()
}

// Handler serves the registry in the Prometheus text format.
func (m *Plugin) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Names returns the names of the metrics a collector (a registry) describes, sorted, whether
// or not they have a series yet (a vector without children gathers nothing), for tests that
// check that dashboards and alerts query only metrics that exist.
func Names(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	seen := map[string]bool{}
	for d := range ch {
		// Desc keeps its name unexported; its String is Desc{fqName: "<name>", ...}.
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			seen[m[1]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
