package nvml

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// healthEvents are the NVML events that make a GPU unhealthy.
const healthEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError

var _ health.Watcher = (*Backend)(nil)

// HealthSource returns the health source of the GPUs in devs; cfg.PollInterval (default 5s) is
// how often devices are asked whether they are lost and what recovery action a faulted device
// needs. It needs NVML initialised for as long as it runs: the caller must not Close the backend
// before the source's Run returns.
//
// What it reports (docs/health.md, "How long a fault lasts"):
//   - a critical XID event is a fault of health.CauseXID (CauseLost for XID 79) unless the
//     classifier ignores it; a double-bit ECC event is a fault of health.CauseECC;
//   - how long an XID or ECC fault lasts follows NVML's GPU recovery action
//     (FI_DEV_GET_GPU_RECOVERY_ACTION) when the event arrives: an action (reset, reboot, drain)
//     keeps the fault until the action is back to none; none makes the fault transient
//     (health.Event.Hold = cfg.TransientHold), unless a poll within the hold finds an action
//     after all. A driver without the field gets NVIDIA's XID catalogue instead
//     (health.XIDNeedsReset): an XID that needs a reset, and an ECC error, last until the node
//     reboots, since nothing then says that the reset happened; the others are transient;
//   - at start, a GPU whose recovery action is none has no XID or ECC fault any more: one
//     restored from before a restart was transient or has been recovered since;
//   - a device whose queries answer GPU_IS_LOST is a fault of health.CauseLost, and recovers
//     when it answers again (after a reset);
//   - a GPU whose NVLink fabric health mask (nvmlGpuFabricInfo_v3_t, GB200 and later) reports a
//     condition (fabricFields) is a fault of health.CauseFabric, polled, with the conditions as
//     its code; it recovers when the mask reports none. A GPU without a health mask (Hopper
//     HGX, GPUs before Hopper) is never polled for it.
func (b *Backend) HealthSource(devs []device.Device, cfg health.SourceConfig) health.Source {
	if cfg.Classifier == nil {
		cfg.Classifier = health.NewClassifier(nil)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 5 * time.Second
	}
	if cfg.TransientHold <= 0 {
		cfg.TransientHold = health.DefaultTransientHold
	}
	return &healthSource{b: b, devs: devs, cfg: cfg}
}

type healthSource struct {
	b    *Backend
	devs []device.Device
	cfg  health.SourceConfig
}

// watched is one physical GPU and the published devices that live on it: the GPU itself, or
// its MIG devices (static MIG), or its partitions and the whole-GPU device (dynamic MIG).
// Events come from the physical GPU, and a fault is reported for every device on it: a MIG
// device whose GPU reports an XID is not trusted to be healthy either (NVIDIA scopes some XIDs
// to one GPU instance; treating them GPU-wide errs on the side of not scheduling there).
type watched struct {
	uuid   string
	names  []string
	handle nvml.Device
	lost   bool
	// faulted is set by an XID or ECC fault; actionSeen once the recovery action asked for a
	// reset or more since then.
	faulted, actionSeen bool
	// transient is the last fault while it is reported transient (its GPU asked for no
	// action), until its hold ends: a poll that finds an action meanwhile reports it again as
	// lasting.
	transient      *health.Event
	transientUntil time.Time
	// noFabric is a GPU without a fabric health mask; fabric is the code of the fabric fault
	// last reported, "" for none, once fabricRead.
	noFabric, fabricRead bool
	fabric               string
}

// waitTimeout bounds one EventSetWait so that ctx and the poll are looked at regularly (the
// poll interval, if shorter).
const waitTimeout = 500 * time.Millisecond

func (s *healthSource) Run(ctx context.Context, emit func(health.Event)) error {
	logger := klog.FromContext(ctx)
	lib := s.b.lib
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml EventSetCreate: %w", ret)
	}
	defer set.Free()

	var all []*watched
	byHandle := map[nvml.Device]*watched{}
	for _, g := range physicalGPUs(s.devs) {
		h, ret := lib.DeviceGetHandleByUUID(g.uuid)
		if ret != nvml.SUCCESS {
			// The devices stay Unknown: without a handle nothing about them can be observed.
			logger.Error(fmt.Errorf("nvml DeviceGetHandleByUUID(%s): %w", g.uuid, ret), "Cannot watch GPU health", "devices", g.names)
			continue
		}
		w := &watched{uuid: g.uuid, names: g.names, handle: h}
		all = append(all, w)
		byHandle[h] = w
		supported, ret := h.GetSupportedEventTypes()
		if ret == nvml.SUCCESS {
			ret = h.RegisterEvents(supported&healthEvents, set)
		}
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_GPU_IS_LOST:
			w.lost = true
			w.emit(emit, lostEvent(""))
		default:
			// Lost GPUs are still found by polling; only XID and ECC events are missed.
			logger.Info("GPU does not deliver health events, watching it by polling only", "devices", w.names, "err", ret.Error())
		}
		if !w.lost {
			// A device that answers now is not lost, whatever a state from before a
			// restart says.
			w.emit(emit, health.Event{Type: health.Recovered, Cause: health.CauseLost})
			s.checkFabric(ctx, w, emit)
			// Nor does it have an XID or ECC fault if it asks for no recovery action: a
			// fault restored from before the restart was transient, or the GPU has been
			// reset since. One that still asks keeps its fault until the action is done.
			switch action, ok := recoveryAction(w.handle); {
			case !ok:
			case action == nvml.GPU_RECOVERY_ACTION_NONE:
				w.emit(emit, health.Event{Type: health.Recovered, Cause: health.CauseXID})
				w.emit(emit, health.Event{Type: health.Recovered, Cause: health.CauseECC})
			default:
				w.faulted, w.actionSeen = true, true
			}
		}
		w.emit(emit, health.Event{Type: health.Watching})
	}
	emit(health.Event{Type: health.Synced})

	wait := min(waitTimeout, s.cfg.PollInterval)
	lastPoll := time.Time{}
	for ctx.Err() == nil {
		data, ret := set.Wait(uint32(wait / time.Millisecond))
		switch ret {
		case nvml.SUCCESS:
			s.handleEvent(ctx, byHandle, data, emit)
		case nvml.ERROR_TIMEOUT:
		default:
			// GPU_IS_LOST here means some GPU fell off; the poll finds which. Anything else is
			// logged and waited out, so a flapping library does not spin.
			logger.V(2).Info("nvml EventSetWait", "ret", ret.Error())
			select {
			case <-ctx.Done():
			case <-time.After(waitTimeout):
			}
			lastPoll = time.Time{}
		}
		if time.Since(lastPoll) >= s.cfg.PollInterval {
			s.poll(ctx, all, emit)
			lastPoll = time.Now()
		}
	}
	return nil
}

// gpu is a physical GPU and the names of the published devices on it, sorted.
type gpu struct {
	uuid  string
	names []string
}

// physicalGPUs groups devs by the physical GPU they live on, in the order of first appearance.
func physicalGPUs(devs []device.Device) []gpu {
	var out []gpu
	at := map[string]int{}
	for _, d := range devs {
		uuid := d.UUID
		if d.MIG != nil {
			uuid = d.MIG.ParentUUID
		}
		i, ok := at[uuid]
		if !ok {
			i = len(out)
			at[uuid] = i
			out = append(out, gpu{uuid: uuid})
		}
		out[i].names = append(out[i].names, d.Name)
	}
	for i := range out {
		sort.Strings(out[i].names)
	}
	return out
}

// emit reports ev for every device on the GPU.
func (w *watched) emit(emit func(health.Event), ev health.Event) {
	for _, name := range w.names {
		ev.Device = name
		emit(ev)
	}
}

func lostEvent(name string) health.Event {
	return health.Event{Type: health.Fault, Device: name, Cause: health.CauseLost,
		Message: "GPU is lost: it has fallen off the bus or stopped answering (NVML GPU_IS_LOST)"}
}

func (s *healthSource) handleEvent(ctx context.Context, byHandle map[nvml.Device]*watched, data nvml.EventData, emit func(health.Event)) {
	logger := klog.FromContext(ctx)
	w, ok := byHandle[data.Device]
	if !ok {
		logger.V(2).Info("NVML event for a device that is not watched", "type", data.EventType)
		return
	}
	switch {
	case data.EventType&nvml.EventTypeXidCriticalError != 0:
		s.observed(health.HardwareEvent{UUID: w.uuid, Cause: health.CauseXID, XID: data.EventData})
		ev, fault := s.cfg.Classifier.Classify(w.names[0], data.EventData)
		if !fault {
			logger.Info("Ignoring application XID", "devices", w.names, "xid", data.EventData)
			return
		}
		if ev.Cause == health.CauseLost {
			logger.Info("GPU reported a critical XID", "devices", w.names, "xid", data.EventData, "message", ev.Message)
			w.lost = true
			w.emit(emit, ev)
			return
		}
		s.fault(ctx, w, ev, health.XIDNeedsReset(data.EventData), emit)
	case data.EventType&nvml.EventTypeDoubleBitEccError != 0:
		s.observed(health.HardwareEvent{UUID: w.uuid, Cause: health.CauseECC})
		ev := health.Event{Type: health.Fault, Cause: health.CauseECC, Message: "double-bit (uncorrectable) ECC error"}
		s.fault(ctx, w, ev, true, emit)
	}
}

func (s *healthSource) observed(ev health.HardwareEvent) {
	if s.cfg.Observed != nil {
		s.cfg.Observed(ev)
	}
}

// fault reports an XID or ECC fault, lasting or transient by the GPU's recovery action (or, on
// a driver without it, by catalogueReset). The action is read at once: the driver sets it with
// the error, and a reset that follows quickly must not be missed by waiting for the poll.
func (s *healthSource) fault(ctx context.Context, w *watched, ev health.Event, catalogueReset bool, emit func(health.Event)) {
	logger := klog.FromContext(ctx)
	action, known := recoveryAction(w.handle)
	w.faulted, w.transient = true, nil
	w.actionSeen = known && action != nvml.GPU_RECOVERY_ACTION_NONE
	transient := known && !w.actionSeen || !known && !catalogueReset
	if transient {
		ev.Hold = s.cfg.TransientHold
		lasting := ev
		lasting.Hold = 0
		w.transient, w.transientUntil = &lasting, time.Now().Add(s.cfg.TransientHold)
	}
	how := "until the GPU's recovery action is done"
	switch {
	case transient && known:
		how = "transient: the GPU asks for no recovery action"
	case transient:
		how = "transient: NVIDIA's XID catalogue asks for no reset (the driver reports no recovery action)"
	case !known:
		how = "until the node reboots: the driver reports no recovery action, and NVIDIA's XID catalogue asks for a reset"
	}
	logger.Info("GPU reported a fault", "devices", w.names, "cause", ev.Cause, "code", ev.Code, "message", ev.Message, "lasts", how, "recoveryAction", actionName(action, known))
	w.emit(emit, ev)
}

func actionName(a nvml.DeviceGpuRecoveryAction, known bool) string {
	if !known {
		return "unsupported"
	}
	switch a {
	case nvml.GPU_RECOVERY_ACTION_NONE:
		return "none"
	case nvml.GPU_RECOVERY_ACTION_GPU_RESET:
		return "GPU reset"
	case nvml.GPU_RECOVERY_ACTION_NODE_REBOOT:
		return "node reboot"
	case nvml.GPU_RECOVERY_ACTION_DRAIN_P2P:
		return "drain P2P"
	case nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET:
		return "drain P2P and reset"
	}
	return fmt.Sprintf("action %d", a)
}

// poll asks every device whether it still answers and, for faulted ones, whether NVML still
// asks for a recovery action.
func (s *healthSource) poll(ctx context.Context, all []*watched, emit func(health.Event)) {
	logger := klog.FromContext(ctx)
	for _, w := range all {
		_, ret := w.handle.GetUUID()
		switch {
		case ret == nvml.ERROR_GPU_IS_LOST:
			// Reported once: an XID 79 that came first keeps its message.
			if !w.lost {
				logger.Info("GPU is lost", "devices", w.names)
				w.lost = true
				w.emit(emit, lostEvent(""))
			}
			continue
		case ret == nvml.SUCCESS && w.lost:
			logger.Info("Lost GPU answers again", "devices", w.names)
			w.lost = false
			w.emit(emit, health.Event{Type: health.Recovered, Cause: health.CauseLost})
		}
		s.checkFabric(ctx, w, emit)
		if w.transient != nil && time.Now().After(w.transientUntil) {
			// The tracker has cleared it; an action asked for from now on belongs to
			// whatever comes next (the driver reports XID 154 when the action changes).
			w.transient, w.faulted = nil, false
		}
		action, ok := recoveryAction(w.handle)
		if !ok {
			continue
		}
		if action != nvml.GPU_RECOVERY_ACTION_NONE {
			if w.transient != nil {
				// The driver set the action after the event: the fault lasts after all.
				logger.Info("GPU now asks for a recovery action: its fault lasts until it is done", "devices", w.names, "recoveryAction", actionName(action, true))
				w.emit(emit, *w.transient)
				w.transient = nil
			}
			// Without a fault seen (one restored from before a restart), NVML does not repeat
			// the XID, but the action shows that the device still needs one.
			w.actionSeen, w.faulted = true, true
			continue
		}
		if w.faulted && w.actionSeen {
			logger.Info("GPU recovery action is none again, GPU recovered", "devices", w.names)
			w.faulted, w.actionSeen, w.transient = false, false, nil
			w.emit(emit, health.Event{Type: health.Recovered, Cause: health.CauseXID})
			w.emit(emit, health.Event{Type: health.Recovered, Cause: health.CauseECC})
		}
	}
}

// checkFabric reports the GPU's fabric health when it changed, and on the first answer (a state
// restored from before a restart may say otherwise; a GPU lost at start answers later). A GPU
// without a health mask is not asked again; an error leaves what was reported.
func (s *healthSource) checkFabric(ctx context.Context, w *watched, emit func(health.Event)) {
	if w.noFabric {
		return
	}
	logger := klog.FromContext(ctx)
	conds, mask, supported, ret := s.b.fabricHealth(w.handle)
	switch {
	case ret != nvml.SUCCESS:
		logger.V(2).Info("Cannot read the GPU's fabric health", "devices", w.names, "ret", ret.Error())
		return
	case !supported:
		w.noFabric = true
		w.emit(emit, health.Event{Type: health.Recovered, Cause: health.CauseFabric})
		return
	}
	ev := fabricEvent(conds, mask)
	if w.fabricRead && ev.Code == w.fabric {
		return
	}
	if ev.Code != w.fabric {
		logger.Info("GPU fabric health changed", "devices", w.names, "conditions", conds, "healthMask", mask)
	}
	w.fabric, w.fabricRead = ev.Code, true
	w.emit(emit, ev)
}

// recoveryAction reads FI_DEV_GET_GPU_RECOVERY_ACTION; false if the driver does not offer it.
func recoveryAction(h nvml.Device) (nvml.DeviceGpuRecoveryAction, bool) {
	fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	if ret := h.GetFieldValues(fv); ret != nvml.SUCCESS || nvml.Return(fv[0].NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	return nvml.DeviceGpuRecoveryAction(binary.LittleEndian.Uint32(fv[0].Value[:4])), true
}
