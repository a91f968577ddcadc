package nvml

import (
	"context"
	"encoding/binary"
	"fmt"
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
// how often devices are asked whether they are lost and whether a faulted device's recovery
// action is back to none. It needs NVML initialised for as
// long as it runs: the caller must not Close the backend before the source's Run returns.
//
// What it reports:
//   - a critical XID event is a fault of health.CauseXID (CauseLost for XID 79) unless the
//     classifier ignores it;
//   - a double-bit ECC event is a fault of health.CauseECC;
//   - a device whose queries answer GPU_IS_LOST is a fault of health.CauseLost, and recovers
//     when it answers again (after a reset);
//   - an XID or ECC fault recovers when NVML's GPU recovery action
//     (FI_DEV_GET_GPU_RECOVERY_ACTION) is back to none after it was seen asking for an action
//     (reset, reboot, drain). A driver that never asks for one leaves the fault in place until
//     the node reboots: time passing is never a recovery.
func (b *Backend) HealthSource(devs []device.Device, cfg health.SourceConfig) health.Source {
	if cfg.Classifier == nil {
		cfg.Classifier = health.NewClassifier(nil)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 5 * time.Second
	}
	return &healthSource{b: b, devs: devs, cfg: cfg}
}

type healthSource struct {
	b    *Backend
	devs []device.Device
	cfg  health.SourceConfig
}

type watched struct {
	name   string
	handle nvml.Device
	lost   bool
	// faulted is set by an XID or ECC fault; actionSeen once the recovery action asked for a
	// reset or more since then.
	faulted, actionSeen bool
}

// waitTimeout bounds one EventSetWait so that ctx and the poll are looked at regularly.
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
	for _, d := range s.devs {
		h, ret := lib.DeviceGetHandleByUUID(d.UUID)
		if ret != nvml.SUCCESS {
			// The device stays Unknown: without a handle nothing about it can be observed.
			logger.Error(fmt.Errorf("nvml DeviceGetHandleByUUID(%s): %w", d.UUID, ret), "Cannot watch GPU health", "device", d.Name)
			continue
		}
		w := &watched{name: d.Name, handle: h}
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
			emit(lostEvent(d.Name))
		default:
			// Lost GPUs are still found by polling; only XID and ECC events are missed.
			logger.Info("GPU does not deliver health events, watching it by polling only", "device", d.Name, "err", ret.Error())
		}
		if !w.lost {
			// A device that answers now is not lost, whatever a state from before a
			// restart says.
			emit(health.Event{Type: health.Recovered, Device: d.Name, Cause: health.CauseLost})
		}
		emit(health.Event{Type: health.Watching, Device: d.Name})
	}
	emit(health.Event{Type: health.Synced})

	lastPoll := time.Time{}
	for ctx.Err() == nil {
		data, ret := set.Wait(uint32(waitTimeout / time.Millisecond))
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
		ev, fault := s.cfg.Classifier.Classify(w.name, data.EventData)
		if !fault {
			logger.Info("Ignoring application XID", "device", w.name, "xid", data.EventData)
			return
		}
		logger.Info("GPU reported a critical XID", "device", w.name, "xid", data.EventData, "message", ev.Message)
		if ev.Cause == health.CauseLost {
			w.lost = true
		} else {
			w.fault()
		}
		emit(ev)
	case data.EventType&nvml.EventTypeDoubleBitEccError != 0:
		logger.Info("GPU reported a double-bit ECC error", "device", w.name)
		w.fault()
		emit(health.Event{Type: health.Fault, Device: w.name, Cause: health.CauseECC, Message: "double-bit (uncorrectable) ECC error"})
	}
}

// fault records an XID or ECC fault. The recovery action is read at once: the driver sets it
// with the error, and a reset that follows quickly must not be missed by waiting for the poll.
func (w *watched) fault() {
	w.faulted = true
	action, ok := recoveryAction(w.handle)
	w.actionSeen = ok && action != nvml.GPU_RECOVERY_ACTION_NONE
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
				logger.Info("GPU is lost", "device", w.name)
				w.lost = true
				emit(lostEvent(w.name))
			}
			continue
		case ret == nvml.SUCCESS && w.lost:
			logger.Info("Lost GPU answers again", "device", w.name)
			w.lost = false
			emit(health.Event{Type: health.Recovered, Device: w.name, Cause: health.CauseLost})
		}
		action, ok := recoveryAction(w.handle)
		if !ok {
			continue
		}
		if action != nvml.GPU_RECOVERY_ACTION_NONE {
			w.actionSeen = true
			if !w.faulted {
				// A persisted fault from before a restart: NVML does not repeat the XID, but
				// the recovery action shows the device still needs one.
				w.faulted = true
			}
			continue
		}
		if w.faulted && w.actionSeen {
			logger.Info("GPU recovery action is none again, GPU recovered", "device", w.name)
			w.faulted, w.actionSeen = false, false
			emit(health.Event{Type: health.Recovered, Device: w.name, Cause: health.CauseXID})
			emit(health.Event{Type: health.Recovered, Device: w.name, Cause: health.CauseECC})
		}
	}
}

// recoveryAction reads FI_DEV_GET_GPU_RECOVERY_ACTION; false if the driver does not offer it.
func recoveryAction(h nvml.Device) (nvml.DeviceGpuRecoveryAction, bool) {
	fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	if ret := h.GetFieldValues(fv); ret != nvml.SUCCESS || nvml.Return(fv[0].NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	return nvml.DeviceGpuRecoveryAction(binary.LittleEndian.Uint32(fv[0].Value[:4])), true
}
