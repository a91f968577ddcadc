package publisher

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/accel-dra/accel-dra/pkg/metrics"
)

const metricsNamespace = "accel_dra_template_publisher"

// Metrics are the publisher's Prometheus metrics. Run registers them on controller-runtime's
// registry (served with the controller's own metrics on --metrics-bind-address); tests use their
// own registry.
type Metrics struct {
	// Writes counts annotation patches sent, by result (success, error).
	Writes *prometheus.CounterVec
	// TemplateBytes is the size of each group's template annotations.
	TemplateBytes *prometheus.GaugeVec
	// Conflicts counts groups entering a problem state, by reason (nodes disagree, over
	// budget, copy-from failed, invalid slices).
	Conflicts *prometheus.CounterVec
	// GroupsWithProblems is the number of groups currently in each problem state.
	GroupsWithProblems *prometheus.GaugeVec
	// WorkloadReachable is 1 for each workload cluster the publisher can read, 0 for one it
	// cannot (management mode).
	WorkloadReachable *prometheus.GaugeVec
	// TemplateDivergences counts the times a group's first nodes differed from the template it
	// had (a seed or a copy), by group (divergence.go).
	TemplateDivergences *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg, with accel_dra_build_info.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "writes_total",
			Help: "Annotation writes (server-side apply patches) to MachineDeployments and MachineSets, by result.",
		}, []string{"result"}),
		TemplateBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "template_bytes",
			Help: "Size of a node group's template annotations (keys plus values, as stored).",
		}, []string{"kind", "namespace", "name"}),
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "conflicts_total",
			Help: "Times a node group entered a problem state (its template is kept), by reason.",
		}, []string{"reason"}),
		GroupsWithProblems: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "groups_with_problems",
			Help: "Node groups currently in a problem state, by reason.",
		}, []string{"reason"}),
		WorkloadReachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "workload_cluster_reachable",
			Help: "Whether a workload cluster's Nodes and ResourceSlices can be read (1) or not (0); management mode only.",
		}, []string{"namespace", "cluster"}),
	}
	m.TemplateDivergences = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "template_divergences_total",
		Help: "Times the nodes of a node group differed from the template it had (a seed or a copy from another group) when they replaced it.",
	}, []string{"kind", "namespace", "name"})
	reg.MustRegister(m.TemplateDivergences)
	for _, r := range []string{"success", "error"} {
		m.Writes.WithLabelValues(r)
	}
	for _, r := range Reasons {
		m.Conflicts.WithLabelValues(r)
		m.GroupsWithProblems.WithLabelValues(r)
	}
	reg.MustRegister(m.Writes, m.TemplateBytes, m.Conflicts, m.GroupsWithProblems, m.WorkloadReachable, metrics.NewBuildInfo())
	return m
}

// MetricNames are the names of the metrics the publisher registers (controller-runtime's own
// metrics aside), for the chart's test that its dashboard and alerts query only metrics that
// exist.
func MetricNames() []string {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	return metrics.Names(reg)
}
