package nodeplugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/otherdrivers"
)

// Reasons of the Node events of devices another driver publishes (otherdrivers).
const (
	ReasonDevicesServedByAnotherDriver = "DevicesServedByAnotherDriver"
	ReasonDevicesPublishedAgain        = "DevicesPublishedAgain"
)

// yielding is what the plugin publishes: the driver's slices less the devices another DRA
// driver's slices on this node name (pkg/otherdrivers), so that no device is handed out by two
// drivers. It sits between the driver and the kubelet plugin helper, which it is the only one
// to publish to: each publish takes the driver's slices and the other drivers' UUIDs as they
// are at that moment, one at a time, so that a health change and a change of the other
// drivers' slices never publish over each other with a stale view.
type yielding struct {
	driverName string
	resources  func() resourceslice.DriverResources
	events     driver.NormalEventSink

	mu       sync.Mutex
	claimed  otherdrivers.Claimed
	stale    bool                    // claimed changed since the last Resources
	withheld []otherdrivers.Withheld // as last reported
	publish  func(context.Context, resourceslice.DriverResources) error
}

// set takes what other drivers name now and, once the plugin publishes, publishes again.
func (y *yielding) set(ctx context.Context, c otherdrivers.Claimed) {
	y.mu.Lock()
	y.claimed, y.stale = c, true
	publish := y.publish != nil
	y.mu.Unlock()
	if publish {
		if err := y.Publish(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Publishing ResourceSlices after another driver's changed")
		}
	}
}

// start makes Publish publish through publish from now on, and says whether what other
// drivers name changed since the slices the plugin published first were made.
func (y *yielding) start(publish func(context.Context, resourceslice.DriverResources) error) (stale bool) {
	y.mu.Lock()
	defer y.mu.Unlock()
	y.publish = publish
	return y.stale
}

// Resources are the driver's slices less what other drivers serve; a change of what is left
// out is reported.
func (y *yielding) Resources(ctx context.Context) resourceslice.DriverResources {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.current(ctx)
}

func (y *yielding) current(ctx context.Context) resourceslice.DriverResources {
	y.stale = false
	res, withheld := otherdrivers.Withhold(y.resources(), y.claimed)
	if !slices.EqualFunc(withheld, y.withheld, func(a, b otherdrivers.Withheld) bool {
		return a.Device == b.Device && a.UUID == b.UUID && slices.Equal(a.Drivers, b.Drivers)
	}) {
		y.report(ctx, withheld)
		y.withheld = withheld
	}
	return res
}

// Publish publishes Resources.
func (y *yielding) Publish(ctx context.Context) error {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.publish == nil {
		return nil
	}
	return y.publish(ctx, y.current(ctx))
}

func (y *yielding) report(ctx context.Context, withheld []otherdrivers.Withheld) {
	logger := klog.FromContext(ctx)
	if len(withheld) == 0 {
		logger.Info("No other driver publishes this plugin's devices any more; publishing all of them", "devices", deviceNames(y.withheld))
		y.events.Normal(ReasonDevicesPublishedAgain, fmt.Sprintf("%s publishes %s again: no other DRA driver's ResourceSlices on this node name them any more", y.driverName, deviceNames(y.withheld)))
		return
	}
	logger.Info("Not publishing devices another DRA driver publishes on this node", "withheld", withheld)
	y.events.Warning(ReasonDevicesServedByAnotherDriver, WithheldMessage(y.driverName, withheld))
}

// WithheldMessage is the Node event's message for devices left out.
func WithheldMessage(driverName string, withheld []otherdrivers.Withheld) string {
	list := make([]string, len(withheld))
	for i, w := range withheld {
		list[i] = w.String()
	}
	return fmt.Sprintf("another DRA driver's ResourceSlices on this node name %s; %s does not publish them while it does, so that no claim gets a device the other driver gave away. Keep one driver per node: move the node over (drain it, keep the other driver's kubelet plugin off it, docs/migrate-from-nvidia.md), or keep this plugin off the node (drivers.gpu.nodeSelector)",
		strings.Join(list, ", "), driverName)
}

// normalEvents is the Node's event sink with its Normal events, which nodeEvents' has.
func normalEvents(s driver.EventSink) driver.NormalEventSink {
	if n, ok := s.(driver.NormalEventSink); ok {
		return n
	}
	return warningsOnly{s}
}

type warningsOnly struct{ driver.EventSink }

func (warningsOnly) Normal(string, string) {}

func deviceNames(w []otherdrivers.Withheld) string {
	names := make([]string, len(w))
	for i := range w {
		names[i] = w[i].Device
	}
	return strings.Join(names, ", ")
}
