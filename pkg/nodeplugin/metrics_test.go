package nodeplugin

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/metrics"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

// TestNodeEventsNamespace: the plugin's events about its Node are stored in the namespace it is
// given (the chart's release namespace, where its Role allows it to write), not in "default",
// and still name the Node, which has no namespace.
func TestNodeEventsNamespace(t *testing.T) {
	kube := fake.NewClientset()
	sink, stop := nodeEvents(kube, "node-a", GPUDriverName, "accel-dra")
	defer stop()
	sink.Warning("InvalidDevice", "gpu.accel-dra.io: device gpu-1 left out")
	var got []corev1.Event
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = list.Items
		return len(got) > 0, nil
	})
	if err != nil {
		t.Fatalf("no event recorded: %v", err)
	}
	for _, e := range got {
		if e.Namespace != "accel-dra" {
			t.Errorf("event %s stored in namespace %q, want accel-dra", e.Name, e.Namespace)
		}
		if o := e.InvolvedObject; o.Kind != "Node" || o.Name != "node-a" || o.Namespace != "" {
			t.Errorf("event about %+v, want Node node-a without a namespace", o)
		}
	}
}

func TestEventsNamespaceOption(t *testing.T) {
	for env, want := range map[string]string{"": "default", "accel-dra": "accel-dra"} {
		t.Setenv("POD_NAMESPACE", env)
		o := NewOptions()
		o.NodeName = "node-a"
		if err := o.Complete(); err != nil {
			t.Fatal(err)
		}
		if o.EventsNamespace != want {
			t.Errorf("$POD_NAMESPACE=%q: events namespace %q, want %q", env, o.EventsNamespace, want)
		}
	}
}

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
