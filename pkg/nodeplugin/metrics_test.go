package nodeplugin

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/metrics"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

type fakePartitioner struct {
	device.Partitioner
	err error
}

func (p fakePartitioner) CreateGI(context.Context, string, int, device.MIGPlacement) (int, error) {
	return 1, p.err
}
func (p fakePartitioner) DestroyMIG(context.Context, string, int) error { return p.err }

type fakeDaemons struct {
	sharing.Daemons
	err error
}

func (d fakeDaemons) Start(context.Context, sharing.DaemonSpec) error { return d.err }

func TestOperationsAreCounted(t *testing.T) {
	m := metrics.NewPlugin(GPUDriverName)
	ctx := t.Context()
	for _, err := range []error{nil, errors.New("insufficient resources")} {
		p := countedPartitioner{Partitioner: fakePartitioner{err: err}, m: m}
		_, _ = p.CreateGI(ctx, "GPU-1", 19, device.MIGPlacement{})
		_ = p.DestroyMIG(ctx, "GPU-1", 1)
		_ = countedDaemons{Daemons: fakeDaemons{err: err}, m: m}.Start(ctx, sharing.DaemonSpec{Key: "k"})
	}
	for _, op := range []string{metrics.MIGCreate, metrics.MIGDestroy} {
		for _, r := range []string{metrics.ResultSuccess, metrics.ResultError} {
			if got := testutil.ToFloat64(m.MIGOperations.WithLabelValues(op, r)); got != 1 {
				t.Errorf("mig_operations_total{operation=%s,result=%s} = %v, want 1", op, r, got)
			}
		}
	}
	for _, r := range []string{metrics.ResultSuccess, metrics.ResultError} {
		if got := testutil.ToFloat64(m.MPSDaemonStarts.WithLabelValues(r)); got != 1 {
			t.Errorf("mps_daemon_starts_total{result=%s} = %v, want 1", r, got)
		}
	}
	// An XID and an ECC error as the health source reports them.
	obs := observeHardware(m)
	obs(health.HardwareEvent{UUID: "GPU-1", Cause: health.CauseXID, XID: 79})
	obs(health.HardwareEvent{UUID: "GPU-1", Cause: health.CauseECC})
	if x, e := testutil.ToFloat64(m.XIDEvents.WithLabelValues("GPU-1", "79")), testutil.ToFloat64(m.ECCEvents.WithLabelValues("GPU-1")); x != 1 || e != 1 {
		t.Errorf("xid_events_total %v, ecc_events_total %v, want 1 and 1", x, e)
	}
}

// The plugin serves the call timings beside the driver's metrics.
func TestMetricNames(t *testing.T) {
	names := MetricNames()
	for _, n := range []string{"accel_dra_grpc_request_duration_seconds", "accel_dra_api_request_duration_seconds", "accel_dra_device_info", "accel_dra_build_info"} {
		if !slices.Contains(names, n) {
			t.Errorf("MetricNames lacks %s", n)
		}
	}
}
