package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/accel-dra/accel-dra/pkg/buildinfo"
)

// NewBuildInfo returns the collector of accel_dra_build_info, constant 1 with the binary's
// version, revision and Go version as labels (as Kubernetes components export
// kubernetes_build_info), so that a query can tell which version runs where.
func NewBuildInfo() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "A metric with a constant '1' value labelled by the version, revision and Go version of the binary.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version, "revision": buildinfo.Revision, "goversion": runtime.Version()},
	}, func() float64 { return 1 })
}
