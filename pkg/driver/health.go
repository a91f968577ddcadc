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

type healthState struct {
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
	for name := range d.publishable {
		devs[name] = d.devices[name].UUID
	}
	tr, err := health.NewTracker(health.TrackerOptions{Devices: devs, Path: opts.StatePath, BootID: opts.BootID, Clock: opts.Clock})
	if err != nil {
		return err
	}
	d.health = &healthState{opts: opts, tracker: tr}
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
	h := d.health
	if h == nil {
		return
	}
	logger := klog.FromContext(ctx)
	d.updateHealthMetrics()
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
					d.reportTransition(ctx, tr)
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
				d.reportTransition(ctx, tr)
			}
		})
		if err != nil {
			// Devices keep their last state; those never watched stay Unknown.
			logger.Error(err, "Device health source stopped")
		}
	}()

	published := d.deviceTaints()
	retry := h.opts.Clock.NewTimer(time.Hour)
	retry.Stop()
	for {
		changes := h.tracker.Changes()
		if taints := d.deviceTaints(); !reflect.DeepEqual(taints, published) {
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

func (d *Driver) reportTransition(ctx context.Context, tr *health.Transition) {
	logger := klog.FromContext(ctx)
	d.updateHealthMetrics()
	switch tr.To {
	case health.Unhealthy:
		logger.Info("Device is unhealthy", "device", tr.Device, "from", tr.From, "message", tr.Message)
		if d.opts.Events != nil {
			d.opts.Events.Warning("DeviceUnhealthy", fmt.Sprintf("%s: device %s is unhealthy: %s", d.opts.DriverName, tr.Device, tr.Message))
		}
	case health.Healthy:
		logger.Info("Device is healthy", "device", tr.Device, "from", tr.From)
		if tr.From == health.Unhealthy {
			if n, ok := d.opts.Events.(NormalEventSink); ok {
				n.Normal("DeviceRecovered", fmt.Sprintf("%s: device %s recovered", d.opts.DriverName, tr.Device))
			}
		}
	default:
		logger.Info("Device health is unknown", "device", tr.Device, "from", tr.From)
	}
}

func (d *Driver) updateHealthMetrics() {
	for _, h := range d.health.tracker.Snapshot() {
		for _, s := range health.States {
			v := 0.0
			if s == h.State {
				v = 1
			}
			d.opts.Metrics.DeviceHealth.WithLabelValues(h.Device, string(s)).Set(v)
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

// deviceTaints are the taints of the devices' current conditions, by device name. timeAdded is
// when the condition was first observed, kept by the tracker across restarts, so republishing
// never moves it.
func (d *Driver) deviceTaints() map[string][]resourceapi.DeviceTaint {
	if d.health == nil {
		return nil
	}
	effects := d.health.opts.Effects
	out := map[string][]resourceapi.DeviceTaint{}
	for _, h := range d.health.tracker.Snapshot() {
		var taints []resourceapi.DeviceTaint
		for _, c := range h.Conditions {
			eff := effects[c.Cause]
			if eff == "" {
				continue
			}
			taints = append(taints, resourceapi.DeviceTaint{
				Key: TaintKey(d.opts.DriverName, c.Cause, d.opts.TaintKeys), Value: c.Code, Effect: eff,
				TimeAdded: &metav1.Time{Time: c.Since},
			})
		}
		if eff := effects[health.CauseUnknown]; h.State == health.Unknown && eff != "" {
			taints = append(taints, resourceapi.DeviceTaint{
				Key: TaintKey(d.opts.DriverName, health.CauseUnknown, d.opts.TaintKeys), Effect: eff,
				TimeAdded: &metav1.Time{Time: h.UnknownSince},
			})
		}
		if len(taints) > 0 {
			out[h.Device] = taints
		}
	}
	return out
}

// sliceOptions are the options of Resources' slices.Build: the health taints.
func (d *Driver) sliceOptions() []slices.Option {
	if d.health == nil {
		return nil
	}
	return []slices.Option{slices.WithTaints(d.deviceTaints())}
}

// watchHealth implements WatchHealthStatus: a full report at once, another on every change, and
// the same again every Timeout/3 so that the kubelet never lets a device go stale.
func (d *Driver) watchHealth(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	h := d.health
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
		case reports <- d.healthReport():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-ticker.C():
		}
	}
}

func (d *Driver) healthReport() kubeletplugin.DeviceHealthReport {
	snap := d.health.tracker.Snapshot()
	r := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(snap))}
	for _, h := range snap {
		r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{
			PoolName: d.opts.NodeName, DeviceName: h.Device,
			Health:             kubeletplugin.HealthStatus(h.State),
			LastUpdated:        h.Updated,
			HealthCheckTimeout: d.health.opts.Timeout,
			Message:            h.Message(),
		})
	}
	return r
}
