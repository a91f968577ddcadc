package driver

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// chanSource is a health source fed by the test.
type chanSource chan health.Event

func (c chanSource) Run(ctx context.Context, emit func(health.Event)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-c:
			emit(ev)
		}
	}
}

type syncEvents struct {
	mu   sync.Mutex
	msgs []string
}

func (s *syncEvents) Warning(reason, msg string) { s.add("Warning " + reason + ": " + msg) }
func (s *syncEvents) Normal(reason, msg string)  { s.add("Normal " + reason + ": " + msg) }
func (s *syncEvents) add(m string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, m)
}
func (s *syncEvents) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.msgs, "\n")
}

var start = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func enableHealth(t *testing.T, e *env, clk *clocktesting.FakeClock, effects health.Effects) chanSource {
	t.Helper()
	src := make(chanSource)
	if err := e.drv.EnableHealth(HealthOptions{Source: src, StatePath: filepath.Join(e.dir, "health.json"), BootID: e.boot,
		Effects: effects, Timeout: 30 * time.Second, Clock: clk}); err != nil {
		t.Fatal(err)
	}
	return src
}

func TestWatchHealthStatusReports(t *testing.T) {
	e := newEnv(t, inventory(4))
	clk := clocktesting.NewFakeClock(start)
	src := enableHealth(t, e, clk, health.DefaultEffects())
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	go e.drv.RunHealth(ctx, func(context.Context) error { return nil })
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error)
	go func() { done <- e.drv.WatchHealthStatus(ctx, reports) }()

	next := func(what string) kubeletplugin.DeviceHealthReport {
		t.Helper()
		select {
		case r := <-reports:
			if len(r.Devices) != 4 {
				t.Fatalf("%s: report of %d devices, want all 4", what, len(r.Devices))
			}
			for _, d := range r.Devices {
				if d.PoolName != nodeName || d.HealthCheckTimeout != 30*time.Second {
					t.Fatalf("%s: %+v", what, d)
				}
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no report", what)
		}
		return kubeletplugin.DeviceHealthReport{}
	}
	// The first report waits for the source's first pass.
	select {
	case r := <-reports:
		t.Fatalf("report before the source synced: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	src <- health.Event{Type: health.Synced}
	r := next("initial")
	if r.Devices[3].Health != kubeletplugin.HealthStatusUnknown {
		t.Errorf("initial: %+v, want Unknown before the source watches", r.Devices[3])
	}
	src <- health.Event{Type: health.Watching, Device: "gpu-3"}
	if r := next("watching"); r.Devices[3].Health != kubeletplugin.HealthStatusHealthy {
		t.Errorf("watching: %+v", r.Devices[3])
	}

	// Re-sent before the kubelet's timeout, with nothing changed.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	}); err != nil {
		t.Fatal(err)
	}
	clk.Step(9 * time.Second)
	select {
	case r := <-reports:
		t.Fatalf("report before the re-send interval: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(time.Second)
	if r := next("re-send"); r.Devices[3].Health != kubeletplugin.HealthStatusHealthy {
		t.Errorf("re-send: %+v", r.Devices[3])
	}
	clk.Step(10 * time.Second)
	next("second re-send")

	xid, _ := health.NewClassifier(nil).Classify("gpu-3", 48)
	src <- xid
	r = next("fault")
	if d := r.Devices[3]; d.Health != kubeletplugin.HealthStatusUnhealthy || !strings.Contains(d.Message, "XID 48") {
		t.Errorf("fault: %+v", d)
	}
	// The metric follows the transition, which the report may overtake.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(e.metrics.DeviceHealth.WithLabelValues("gpu-3", "Unhealthy")) == 1 &&
			testutil.ToFloat64(e.metrics.DeviceHealth.WithLabelValues("gpu-3", "Healthy")) == 0, nil
	}); err != nil {
		t.Errorf("accel_dra_device_health{gpu-3}: Unhealthy %v, Healthy %v", testutil.ToFloat64(e.metrics.DeviceHealth.WithLabelValues("gpu-3", "Unhealthy")),
			testutil.ToFloat64(e.metrics.DeviceHealth.WithLabelValues("gpu-3", "Healthy")))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestHealthDisabled(t *testing.T) {
	e := newEnv(t, inventory(2))
	if err := e.drv.WatchHealthStatus(e.ctx, make(chan kubeletplugin.DeviceHealthReport)); err != kubeletplugin.ErrHealthNotSupported {
		t.Fatalf("WatchHealthStatus without health = %v", err)
	}
	for _, s := range e.drv.Resources().Pools[nodeName].Slices {
		for _, d := range s.Devices {
			if len(d.Taints) > 0 {
				t.Errorf("%s tainted without health", d.Name)
			}
		}
	}
}

func taintsOf(e *env, dev string) []resourceapi.DeviceTaint {
	for _, s := range e.drv.Resources().Pools[nodeName].Slices {
		for _, d := range s.Devices {
			if d.Name == dev {
				return d.Taints
			}
		}
	}
	return nil
}

func TestHealthTaints(t *testing.T) {
	e := newEnv(t, inventory(4))
	events := &syncEvents{}
	e.drv.opts.Events = events
	clk := clocktesting.NewFakeClock(start)
	effects, err := health.ParseEffects(map[string]string{"lost": "NoExecute"})
	if err != nil {
		t.Fatal(err)
	}
	src := enableHealth(t, e, clk, effects)
	ctx, cancel := context.WithCancel(e.ctx)
	var mu sync.Mutex
	publishes := 0
	publish := func(context.Context) error { mu.Lock(); publishes++; mu.Unlock(); return nil }
	done := make(chan struct{})
	go func() { e.drv.RunHealth(ctx, publish); close(done) }()
	waitTaints := func(what, dev string, want int) []resourceapi.DeviceTaint {
		t.Helper()
		var got []resourceapi.DeviceTaint
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got = taintsOf(e, dev)
			return len(got) == want, nil
		}); err != nil {
			t.Fatalf("%s: %s has taints %v, want %d", what, dev, got, want)
		}
		return got
	}
	for i := range 4 {
		src <- health.Event{Type: health.Watching, Device: device.NameFor(device.KindGPU, i)}
	}
	xid, _ := health.NewClassifier(nil).Classify("gpu-3", 48)
	src <- xid
	got := waitTaints("xid", "gpu-3", 1)[0]
	if got.Key != "gpu.accel-dra.io/xid" || got.Value != "48" || got.Effect != resourceapi.DeviceTaintEffectNoSchedule || !got.TimeAdded.Time.Equal(start) {
		t.Errorf("xid taint = %+v", got)
	}
	clk.Step(time.Minute)
	src <- health.Event{Type: health.Fault, Device: "gpu-1", Cause: health.CauseLost, Message: "GPU is lost"}
	if got := waitTaints("lost", "gpu-1", 1)[0]; got.Key != "gpu.accel-dra.io/lost" || got.Effect != resourceapi.DeviceTaintEffectNoExecute || !got.TimeAdded.Time.Equal(start.Add(time.Minute)) {
		t.Errorf("lost taint = %+v", got)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return publishes >= 1, nil
	}); err != nil {
		t.Fatalf("not republished after the taints changed")
	}
	waitEvent(t, events, "Warning DeviceUnhealthy: gpu.accel-dra.io: device gpu-3 is unhealthy: XID 48: Double Bit ECC Error")
	cancel()
	<-done

	// A restart keeps the taints and their timeAdded, though the source has not said a word.
	clk.Step(time.Hour)
	e.start()
	e.drv.opts.Events = events
	src = enableHealth(t, e, clk, effects)
	if got := taintsOf(e, "gpu-3"); len(got) != 1 || !got[0].TimeAdded.Time.Equal(start) {
		t.Fatalf("after restart: gpu-3 taints %v, want the XID taint added at %v", got, start)
	}
	ctx, cancel = context.WithCancel(e.ctx)
	defer cancel()
	go e.drv.RunHealth(ctx, publish)
	src <- health.Event{Type: health.Watching, Device: "gpu-3"}
	src <- health.Event{Type: health.Recovered, Device: "gpu-3"}
	waitTaints("recovered", "gpu-3", 0)
	waitEvent(t, events, "Normal DeviceRecovered: gpu.accel-dra.io: device gpu-3 recovered")
	if got := taintsOf(e, "gpu-1"); len(got) != 1 {
		t.Errorf("gpu-1 taints after gpu-3 recovered: %v", got)
	}
}

func waitEvent(t *testing.T, events *syncEvents, want string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(events.all(), want), nil
	}); err != nil {
		t.Errorf("no event %q in:\n%s", want, events.all())
	}
}

func TestUnknownTaintOnlyWhenConfigured(t *testing.T) {
	for _, tc := range []struct {
		overrides map[string]string
		want      int
	}{{nil, 0}, {map[string]string{"unknown": "NoSchedule"}, 1}} {
		e := newEnv(t, inventory(2))
		effects, err := health.ParseEffects(tc.overrides)
		if err != nil {
			t.Fatal(err)
		}
		enableHealth(t, e, clocktesting.NewFakeClock(start), effects)
		if got := taintsOf(e, "gpu-0"); len(got) != tc.want {
			t.Errorf("effects %v: unknown device has taints %v, want %d", tc.overrides, got, tc.want)
		}
	}
}

func TestDeviceMetadata(t *testing.T) {
	e := newEnv(t, inventory(4))
	p := e.drv.WithDeviceMetadata()
	c := claim("uid-meta", []result{{Request: "gpu", Device: "gpu-2"}})
	res, err := p.PrepareResourceClaims(e.ctx, []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	r := res[c.UID]
	if r.Err != nil || len(r.Devices) != 1 || r.Devices[0].Metadata == nil {
		t.Fatalf("prepare result %+v", r)
	}
	attrs := r.Devices[0].Metadata.Attributes
	if got := attrs["uuid"].StringValue; got == nil || *got != e.inv.Devices[2].UUID {
		t.Errorf("uuid attribute %v, want %s", got, e.inv.Devices[2].UUID)
	}
	if got := attrs["resource.kubernetes.io/pciBusID"].StringValue; got == nil || *got != e.inv.Devices[2].PCIBusID {
		t.Errorf("pciBusID attribute %v, want %s", got, e.inv.Devices[2].PCIBusID)
	}
	if got := attrs["resource.kubernetes.io/numaNode"].IntValue; got == nil || *got != 0 {
		t.Errorf("numaNode attribute %v, want 0", got)
	}
}
