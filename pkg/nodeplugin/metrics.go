package nodeplugin

import (
	"context"
	"path/filepath"
	"time"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/metrics"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

// newMetrics returns the metrics the plugin serves: the driver's and the call timings.
func newMetrics(driver string) (*metrics.Plugin, *callMetrics) {
	m := metrics.NewPlugin(driver)
	return m, newCallMetrics(driver, m.Registry)
}

// MetricNames are the names of the metrics the plugin serves on /metrics, for the chart's test
// that its dashboard and alerts query only metrics that exist.
func MetricNames() []string {
	m, _ := newMetrics(GPUDriverName)
	return metrics.Names(m.Registry)
}

// reporterRefresh is how often a plugin that does not count the node's hardware events tries to
// take over (the other process of a rolling update may have gone); events try too.
const reporterRefresh = 15 * time.Second

// electReporter makes m count node-wide events only while this process holds the node's
// reporter lock (metrics.Reporter), shared by the plugin processes of this driver through the
// plugin data directory. The returned function gives the lock up.
func electReporter(ctx context.Context, o *Options, m *metrics.Plugin) func() {
	r := metrics.NewReporter(filepath.Join(o.PluginDataDir, metrics.ReporterFile))
	m.SetReporter(r)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(reporterRefresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-t.C:
				m.RefreshReporter()
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		r.Close()
	}
}

// observeHardware counts a health source's hardware events.
func observeHardware(m *metrics.Plugin) func(health.HardwareEvent) {
	return func(ev health.HardwareEvent) {
		switch ev.Cause {
		case health.CauseXID:
			m.CountXID(ev.UUID, ev.XID)
		case health.CauseECC:
			m.CountECC(ev.UUID)
		}
	}
}

func result(err error) string {
	if err != nil {
		return metrics.ResultError
	}
	return metrics.ResultSuccess
}

// countedPartitioner counts the MIG instances the plugin creates and destroys.
type countedPartitioner struct {
	device.Partitioner
	m *metrics.Plugin
}

func (p countedPartitioner) CreateGI(ctx context.Context, parentUUID string, profileID int, placement device.MIGPlacement) (int, error) {
	gi, err := p.Partitioner.CreateGI(ctx, parentUUID, profileID, placement)
	p.m.MIGOperations.WithLabelValues(metrics.MIGCreate, result(err)).Inc()
	return gi, err
}

func (p countedPartitioner) DestroyMIG(ctx context.Context, parentUUID string, gi int) error {
	err := p.Partitioner.DestroyMIG(ctx, parentUUID, gi)
	p.m.MIGOperations.WithLabelValues(metrics.MIGDestroy, result(err)).Inc()
	return err
}

// countedDaemons counts the MPS control daemons the plugin starts.
type countedDaemons struct {
	sharing.Daemons
	m *metrics.Plugin
}

func (d countedDaemons) Start(ctx context.Context, s sharing.DaemonSpec) error {
	err := d.Daemons.Start(ctx, s)
	d.m.MPSDaemonStarts.WithLabelValues(result(err)).Inc()
	return err
}
