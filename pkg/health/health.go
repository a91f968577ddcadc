// Package health is the device health model of the node plugin: what a backend's health source
// reports (Event), how those reports become a device's state (Tracker, which persists it so that
// a restart neither forgets a broken device nor moves its taint's timeAdded), which NVIDIA XIDs
// count (Classifier), and which taint effect each cause gets (Effects).
//
// The Tracker owns a device's health: sources only report what they observe, and the driver only
// reads the Tracker's snapshots to answer the kubelet and to taint slices.
package health

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// State is a device's health as the kubelet's DRAResourceHealth API knows it.
type State string

const (
	Healthy   State = "Healthy"
	Unhealthy State = "Unhealthy"
	// Unknown is a device no source watches: the node offers no health source for it (an
	// Ascend node without DCMI), or the source could not register it.
	Unknown State = "Unknown"
)

// States are all states, in the order the metric lists them.
var States = []State{Healthy, Unhealthy, Unknown}

// Cause is why a device is unhealthy. Each cause is one taint key, <driver>/<cause>, so that a
// claim can tolerate one cause (an XID it knows to be harmless) but not another.
type Cause string

const (
	// CauseXID is a critical NVIDIA XID error that is not on the ignore list.
	CauseXID Cause = "xid"
	// CauseECC is an uncorrectable (double-bit) memory error.
	CauseECC Cause = "ecc"
	// CauseLost is a device that stopped answering: NVML's GPU_IS_LOST ("fallen off the bus",
	// XID 79), or an NPU whose node vanished.
	CauseLost Cause = "lost"
	// CauseFault is an NPU fault the Ascend driver reports with an error code.
	CauseFault Cause = "fault"
	// CauseDriver is a driver the node cannot use: the NVIDIA driver's libraries upgraded
	// without a reboot, which NVML refuses while the old kernel module is loaded. Every device
	// of the node has it, until the versions agree again.
	CauseDriver Cause = "driver"
	// CauseFabric is an NVLink fabric the GPU cannot use at full strength: the fabric's health
	// mask (nvmlGpuFabricInfo_v3_t.healthMask, GB200 NVL72 and later multi-node NVLink) reports
	// degraded bandwidth, an unhealthy route, a route or access-timeout recovery in progress, or
	// an incorrect configuration. It lasts while the mask says so.
	CauseFabric Cause = "fabric"
	// CauseUnknown is not a fault: it names the taint a device in state Unknown gets when
	// Effects configures one (none by default).
	CauseUnknown Cause = "unknown"
)

// Causes are the causes Effects accepts, sorted.
var Causes = []Cause{CauseDriver, CauseECC, CauseFabric, CauseFault, CauseLost, CauseUnknown, CauseXID}

// EventType says what a source observed.
type EventType string

const (
	// Watching: the source now watches the device; without a fault it is Healthy.
	Watching EventType = "Watching"
	// Fault: the device has a problem of Cause.
	Fault EventType = "Fault"
	// Recovered: the hardware says the problem of Cause (every cause if empty) is gone.
	Recovered EventType = "Recovered"
	// Synced (no device): the source has reported what it found at start, so a report sent
	// now does not call a watched device Unknown only because the source was not done yet.
	Synced EventType = "Synced"
)

// Event is one observation of a source about one device.
type Event struct {
	Type   EventType
	Device string
	Cause  Cause
	// Code is the cause's number where it has one (the XID, the NPU error code); it becomes the
	// taint's value.
	Code string
	// Message is for people: the kubelet puts it into the pod's allocatedResourcesStatus.
	Message string
	// Hold, on a Fault, makes it transient: the hardware says the device needs no recovery
	// action, and the fault clears Hold after it was last reported, unless a Fault of the same
	// cause without Hold (persistent) comes first. Zero: the fault lasts until a Recovered.
	Hold time.Duration
}

func (e Event) String() string {
	s := fmt.Sprintf("%s %s", e.Type, e.Device)
	if e.Cause != "" {
		s += " " + string(e.Cause)
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	return s
}

// Source watches the devices of one backend. Run reports through emit until ctx is done and
// returns nil then; an error means it cannot watch at all (its devices stay as they are, which
// for devices never watched is Unknown). emit may be called from one goroutine at a time only.
type Source interface {
	Run(ctx context.Context, emit func(Event)) error
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context, emit func(Event)) error

// Run implements Source.
func (f SourceFunc) Run(ctx context.Context, emit func(Event)) error { return f(ctx, emit) }

// Unmonitored is the source of a node that offers no health information: it reports nothing,
// so every device stays Unknown.
var Unmonitored Source = SourceFunc(func(ctx context.Context, emit func(Event)) error {
	emit(Event{Type: Synced})
	<-ctx.Done()
	return nil
})

// Effects maps causes to the effect of their taint; a cause that is absent, or mapped to "",
// gets no taint.
type Effects map[Cause]resourceapi.DeviceTaintEffect

// EffectNone in flags and chart values turns a cause's taint off.
const EffectNone = "None"

// DefaultEffects: every fault keeps new pods off the device (NoSchedule); running pods are left
// alone because only the workload knows whether it can live with, say, an XID, and Unknown is
// not tainted because a node without a health source would otherwise have no usable devices.
func DefaultEffects() Effects {
	return Effects{
		CauseXID:   resourceapi.DeviceTaintEffectNoSchedule,
		CauseECC:   resourceapi.DeviceTaintEffectNoSchedule,
		CauseLost:  resourceapi.DeviceTaintEffectNoSchedule,
		CauseFault: resourceapi.DeviceTaintEffectNoSchedule,
		// NoSchedule, not NoExecute: running containers keep the libraries they loaded and
		// work on; only new ones would fail.
		CauseDriver: resourceapi.DeviceTaintEffectNoSchedule,
		// A fabric with degraded bandwidth still works, slower: running jobs are left to
		// decide, new ones go elsewhere.
		CauseFabric: resourceapi.DeviceTaintEffectNoSchedule,
	}
}

// ParseEffects applies overrides of the form cause=effect (NoSchedule, NoExecute or None) to
// the defaults. An unknown cause or effect is an error naming the valid ones.
func ParseEffects(overrides map[string]string) (Effects, error) {
	e := DefaultEffects()
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := Cause(strings.TrimSpace(k))
		if !validCause(c) {
			return nil, fmt.Errorf("device taint effect for %q: unknown cause, valid causes are %s", k, causeList())
		}
		switch v := strings.TrimSpace(overrides[k]); v {
		case string(resourceapi.DeviceTaintEffectNoSchedule), string(resourceapi.DeviceTaintEffectNoExecute):
			e[c] = resourceapi.DeviceTaintEffect(v)
		case EffectNone, "":
			delete(e, c)
		default:
			return nil, fmt.Errorf("device taint effect for %q: %q is not one of NoSchedule, NoExecute, None", k, v)
		}
	}
	// Every hardware fault's taint off is how a cluster without device taints (DRADeviceTaints
	// off) runs the plugin (docs/troubleshooting.md): the driver and fabric causes, newer than
	// that advice, follow it unless named, or the plugin would refuse to run there.
	if e[CauseXID] == "" && e[CauseECC] == "" && e[CauseLost] == "" && e[CauseFault] == "" {
		for _, c := range []Cause{CauseDriver, CauseFabric} {
			if _, named := overrides[string(c)]; !named {
				delete(e, c)
			}
		}
	}
	return e, nil
}

func validCause(c Cause) bool {
	for _, x := range Causes {
		if c == x {
			return true
		}
	}
	return false
}

func causeList() string {
	s := make([]string, len(Causes))
	for i, c := range Causes {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// Condition is one cause a device is unhealthy for.
type Condition struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	// Since is when the cause was first observed; it is the taint's timeAdded and does not
	// move when the same cause is observed again.
	Since time.Time `json:"since"`
	// Until is when a transient fault (Event.Hold) clears; zero for a fault that lasts until the
	// hardware reports its recovery.
	Until time.Time `json:"until,omitzero"`
}

// DeviceHealth is a device's health in a snapshot.
type DeviceHealth struct {
	Device string
	State  State
	// Conditions are the causes of an Unhealthy device, sorted by cause.
	Conditions []CauseCondition
	// UnknownSince is when an Unknown device was first seen unknown (for its taint, if any).
	UnknownSince time.Time
	// Updated is when the state last changed, or when the source last watched the device.
	Updated time.Time
}

// CauseCondition is a Condition with its cause.
type CauseCondition struct {
	Cause Cause
	Condition
}

// Message sums the device's health up for the kubelet and events: every condition's message,
// or the reason the state is unknown.
func (d DeviceHealth) Message() string {
	switch d.State {
	case Unhealthy:
		msgs := make([]string, len(d.Conditions))
		for i, c := range d.Conditions {
			msgs[i] = c.Message
		}
		return strings.Join(msgs, "; ")
	case Unknown:
		return "no health source watches this device"
	}
	return ""
}

// SourceConfig configures a backend's health source.
type SourceConfig struct {
	// Classifier decides which XIDs count; nil uses DefaultIgnoredXIDs.
	Classifier *Classifier
	// PollInterval is how often a source polls what it cannot be told (a lost GPU, a recovery,
	// a mock's fault files); zero means the source's default.
	PollInterval time.Duration
	// TransientHold is how long a fault the hardware needs no recovery action for stays
	// reported (Event.Hold); zero means DefaultTransientHold.
	TransientHold time.Duration
	// Observed, if set, is called once for each hardware error event the source receives (not
	// once per device on the GPU, as Events are), whether or not it makes a device unhealthy:
	// for the metrics of XIDs and ECC errors. It is called from the source's goroutine.
	Observed func(HardwareEvent)
}

// HardwareEvent is an error event of one physical device, for metrics.
type HardwareEvent struct {
	// UUID is the physical GPU's.
	UUID string
	// Cause is CauseXID (with XID) or CauseECC (an uncorrectable ECC error).
	Cause Cause
	XID   uint64
}

// DefaultTransientHold keeps a transient fault visible long enough for the kubelet to show it in
// the pod's status, for an event to be recorded, and for a recovery action the driver sets just
// after the XID to be seen by a poll, while a benign XID does not keep the device from new work
// for longer than a minute.
const DefaultTransientHold = time.Minute

// Watcher is a backend that can watch its devices' health.
type Watcher interface {
	HealthSource(devs []device.Device, cfg SourceConfig) Source
}
