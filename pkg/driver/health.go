package driver

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// DefaultHealthCheckTimeout is the HealthCheckTimeout each device's report carries: the kubelet's
// own default, so that a kubelet that ignores the field behaves the same.
const DefaultHealthCheckTimeout = 30 * time.Second

// HealthOptions configure device health (docs/health.md).
type HealthOptions struct {
	// Source watches the backend's devices.
	Source health.Source
	// StatePath is where the devices' conditions are kept across restarts; BootID ties them to
	// this boot.
	StatePath string
	BootID    string
	// Effects says which causes taint a device, and how.
	Effects health.Effects
	// Timeout is the HealthCheckTimeout of the reports (default DefaultHealthCheckTimeout);
	// every device is re-sent every Timeout/3, so that one late re-send still arrives in time.
	Timeout time.Duration
	// Clock is for tests; default the real clock.
	Clock clock.WithTicker
}

// NormalEventSink is an EventSink that can also report normal events (a device's recovery).
type NormalEventSink interface {
	EventSink
	Normal(reason, message string)
}

// healthState is device health (docs/health.md): the tracker of the devices' conditions, the
// taints they put in the slices and the reports the kubelet watches. The sharing step asks it
// whether a GPU is lost.
type healthState struct {
	n       *node
	opts    HealthOptions
	tracker *health.Tracker
}

// EnableHealth turns device health on: WatchHealthStatus serves it, and Resources taints
// unhealthy devices. It loads the persisted conditions, so call it before the slices are first
// published; RunHealth then starts watching.
func (d *Driver) EnableHealth(opts HealthOptions) error {
	if opts.Source == nil {
		return errors.New("device health: a source is required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultHealthCheckTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	devs := map[string]string{}
	for name := range d.node.publishable {
		devs[name] = d.node.devices[name].UUID
	}
	tr, err := health.NewTracker(health.TrackerOptions{Devices: devs, Path: opts.StatePath, BootID: opts.BootID, Clock: opts.Clock})
	if err != nil {
		return err
	}
	d.health = &healthState{n: d.node, opts: opts, tracker: tr}
	d.sharing.health = d.health
	return nil
}

// HealthSnapshot returns the devices' health; nil if health is not enabled.
func (d *Driver) HealthSnapshot() []health.DeviceHealth {
	if d.health == nil {
		return nil
	}
	return d.health.tracker.Snapshot()
}

// RunHealth watches the devices until ctx is done: it feeds the source's events to the tracker,
// reports state changes as events, logs and metrics, and calls publish whenever the taints
// change (with Resources, which carries them). A failed publish is retried.
func (d *Driver) RunHealth(ctx context.Context, publish func(context.Context) error) {
	if d.health != nil {
		d.health.run(ctx, publish)
	}
}

func (h *healthState) run(ctx context.Context, publish func(context.Context) error) {
	logger := klog.FromContext(ctx)
	h.updateMetrics()
	srcDone := make(chan struct{})
	go func() {
		defer close(srcDone)
		// Transient faults (health.Event.Hold) clear by time, not by an event of the source.
		expired := make(chan struct{})
		go func() {
			defer close(expired)
			h.tracker.RunExpiry(ctx, func(tr *health.Transition, err error) {
				if err != nil {
					logger.Error(err, "Device health expiry")
				}
				if tr != nil {
					h.reportTransition(ctx, tr)
				}
			})
		}()
		defer func() { <-expired }()
		err := h.opts.Source.Run(ctx, func(ev health.Event) {
			tr, _, err := h.tracker.Apply(ev)
			if err != nil {
				logger.Error(err, "Device health event")
			}
			if tr != nil {
				h.reportTransition(ctx, tr)
			}
		})
		if err != nil {
			// Devices keep their last state; those never watched stay Unknown.
			logger.Error(err, "Device health source stopped")
		}
	}()

	published := h.taints()
	retry := h.opts.Clock.NewTimer(time.Hour)
	retry.Stop()
	for {
		changes := h.tracker.Changes()
		if taints := h.taints(); !reflect.DeepEqual(taints, published) {
			if err := publish(ctx); err != nil {
				logger.Error(err, "Republishing ResourceSlices with device taints, retrying")
				retry.Reset(5 * time.Second)
			} else {
				published = taints
				logger.V(2).Info("Republished ResourceSlices after a device taint changed", "taintedDevices", len(taints))
			}
		}
		select {
		case <-ctx.Done():
			<-srcDone
			return
		case <-changes:
		case <-retry.C():
		}
	}
}

func (h *healthState) reportTransition(ctx context.Context, tr *health.Transition) {
	logger := klog.FromContext(ctx)
	h.updateMetrics()
	switch tr.To {
	case health.Unhealthy:
		logger.Info("Device is unhealthy", "device", tr.Device, "from", tr.From, "message", tr.Message)
		h.n.warn("DeviceUnhealthy", fmt.Sprintf("%s: device %s is unhealthy: %s", h.n.opts.DriverName, tr.Device, tr.Message))
	case health.Healthy:
		logger.Info("Device is healthy", "device", tr.Device, "from", tr.From)
		if tr.From == health.Unhealthy {
			if n, ok := h.n.opts.Events.(NormalEventSink); ok {
				n.Normal("DeviceRecovered", fmt.Sprintf("%s: device %s recovered", h.n.opts.DriverName, tr.Device))
			}
		}
	default:
		logger.Info("Device health is unknown", "device", tr.Device, "from", tr.From)
	}
}

func (h *healthState) updateMetrics() {
	for _, dh := range h.tracker.Snapshot() {
		for _, s := range health.States {
			v := 0.0
			if s == dh.State {
				v = 1
			}
			h.n.opts.Metrics.DeviceHealth.WithLabelValues(dh.Device, string(s)).Set(v)
		}
	}
}

// TaintKey is the key of the taint a cause puts on a device of a driver: <driver>/<cause>, or
// <driver>/<names[cause]> where names has the cause.
func TaintKey(driverName string, c health.Cause, names map[health.Cause]string) string {
	if n, ok := names[c]; ok {
		return driverName + "/" + n
	}
	return driverName + "/" + string(c)
}

// taints are the taints of the devices' current conditions, by device name. timeAdded is
// when the condition was first observed, kept by the tracker across restarts, so republishing
// never moves it.
func (h *healthState) taints() map[string][]resourceapi.DeviceTaint {
	if h == nil {
		return nil
	}
	effects := h.opts.Effects
	out := map[string][]resourceapi.DeviceTaint{}
	for _, dh := range h.tracker.Snapshot() {
		var taints []resourceapi.DeviceTaint
		for _, c := range dh.Conditions {
			eff := effects[c.Cause]
			if eff == "" {
				continue
			}
			taints = append(taints, resourceapi.DeviceTaint{
				Key: TaintKey(h.n.opts.DriverName, c.Cause, h.n.opts.TaintKeys), Value: c.Code, Effect: eff,
				TimeAdded: &metav1.Time{Time: c.Since},
			})
		}
		if eff := effects[health.CauseUnknown]; dh.State == health.Unknown && eff != "" {
			taints = append(taints, resourceapi.DeviceTaint{
				Key: TaintKey(h.n.opts.DriverName, health.CauseUnknown, h.n.opts.TaintKeys), Effect: eff,
				TimeAdded: &metav1.Time{Time: dh.UnknownSince},
			})
		}
		if len(taints) > 0 {
			out[dh.Device] = taints
		}
	}
	return out
}

// sliceOptions are the options of Resources' slices.Build: the health taints.
func (h *healthState) sliceOptions() []slices.Option {
	if h == nil {
		return nil
	}
	return []slices.Option{slices.WithTaints(h.taints())}
}

// watch implements WatchHealthStatus: a full report at once, another on every change, and
// the same again every Timeout/3 so that the kubelet never lets a device go stale.
func (h *healthState) watch(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if h == nil {
		return kubeletplugin.ErrHealthNotSupported
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Kubelet watches device health")
	// The first report waits for the source's first pass (bounded, for a source that never
	// finishes one): reported too early, watched devices would read Unknown, and after a plugin
	// restart the kubelet would flip running pods' health to Unknown and back.
	select {
	case <-ctx.Done():
		return nil
	case <-h.tracker.Synced():
	case <-h.opts.Clock.After(h.opts.Timeout / 3):
		logger.Info("Device health source has not finished its first pass, reporting what is known")
	}
	ticker := h.opts.Clock.NewTicker(h.opts.Timeout / 3)
	defer ticker.Stop()
	for {
		changes := h.tracker.Changes()
		select {
		case <-ctx.Done():
			return nil
		case reports <- h.report():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-ticker.C():
		}
	}
}

func (h *healthState) report() kubeletplugin.DeviceHealthReport {
	snap := h.tracker.Snapshot()
	r := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(snap))}
	for _, dh := range snap {
		r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{
			PoolName: h.n.opts.NodeName, DeviceName: dh.Device,
			Health:             kubeletplugin.HealthStatus(dh.State),
			LastUpdated:        dh.Updated,
			HealthCheckTimeout: h.opts.Timeout,
			Message:            dh.Message(),
		})
	}
	return r
}
