package nvmlmock

import (
	"encoding/binary"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// WithFaultDir makes the mock machine read injected faults from dir (see health.FaultDir for
// the file format): an "xid N" or "ecc" line is delivered once through NVML's event set and
// sets the GPU's recovery action while the line stays: the line's own action, or else what
// NVIDIA's XID catalogue asks for (a reset after an ECC error or an XID that needs one, none
// after an application error); a "lost" line makes the GPU answer GPU_IS_LOST to everything but
// its minor number and PCI info, as a GPU that fell off the bus does. Removing the file is the
// reset that recovers the GPU.
func WithFaultDir(dir string) Option {
	return func(o *options) { o.faultDir = dir }
}

// WithoutRecoveryAction makes the mock machine's driver one from before the GPU recovery action
// field: FI_DEV_GET_GPU_RECOVERY_ACTION answers NOT_SUPPORTED, as older drivers do.
func WithoutRecoveryAction() Option {
	return func(o *options) { o.noRecoveryAction = true }
}

// recoveryActions are the fault file's actions as NVML reports them, by severity: a device with
// several faults reports the most severe one's.
var recoveryActions = []struct {
	name   string
	action nvml.DeviceGpuRecoveryAction
}{
	{"none", nvml.GPU_RECOVERY_ACTION_NONE},
	{"drain-p2p", nvml.GPU_RECOVERY_ACTION_DRAIN_P2P},
	{"reset", nvml.GPU_RECOVERY_ACTION_GPU_RESET},
	{"drain-and-reset", nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET},
	{"reboot", nvml.GPU_RECOVERY_ACTION_NODE_REBOOT},
}

// faultReadInterval is how often Wait reads the fault files again.
const faultReadInterval = 100 * time.Millisecond

// faults is the fault injection of one mock machine.
type faults struct {
	dir    string
	byName map[string]*mock.Device

	mu      sync.Mutex
	current map[string][]health.InjectedFault
	read    time.Time
	// delivered are the xid/ecc lines already sent as events (InjectedFault.Event), per device,
	// so each is sent once; a line removed and written again is a new fault, a line whose
	// action changes is not.
	delivered map[string]map[health.InjectedFault]bool
}

// injectFaults wires the fault files into the machine's NVML functions. Without the recovery
// action field (noRecoveryAction), the driver answers NOT_SUPPORTED for it.
func (s *Server) injectFaults(dir string, noRecoveryAction bool) {
	f := &faults{dir: dir, byName: map[string]*mock.Device{}, delivered: map[string]map[health.InjectedFault]bool{}}
	s.faults = f
	for i, d := range s.Devices {
		name := device.NameFor(device.KindGPU, s.profile.minor(i))
		f.byName[name] = d
		uuid := d.GetUUIDFunc
		d.GetUUIDFunc = func() (string, nvml.Return) {
			if f.has(name, health.FaultLost) {
				return "", nvml.ERROR_GPU_IS_LOST
			}
			return uuid()
		}
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			if f.has(name, health.FaultLost) {
				return 0, nvml.ERROR_GPU_IS_LOST
			}
			return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
		}
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return {
			if f.has(name, health.FaultLost) {
				return nvml.ERROR_GPU_IS_LOST
			}
			return nvml.SUCCESS
		}
		d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
			if f.has(name, health.FaultLost) {
				return nvml.ERROR_GPU_IS_LOST
			}
			for i := range values {
				v := &values[i]
				if v.FieldId != nvml.FI_DEV_GET_GPU_RECOVERY_ACTION {
					v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				if noRecoveryAction {
					v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				action := f.recoveryAction(name)
				v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
				v.NvmlReturn = uint32(nvml.SUCCESS)
				binary.LittleEndian.PutUint32(v.Value[:4], uint32(action))
			}
			return nvml.SUCCESS
		}
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: f.wait,
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
}

// refreshLocked reads the fault files if the last read is older than faultReadInterval. A file
// that cannot be parsed keeps the device's previous faults.
func (f *faults) refreshLocked() {
	if time.Since(f.read) < faultReadInterval {
		return
	}
	f.read = time.Now()
	got, bad := health.ReadFaults(f.dir)
	for name := range bad {
		if prev, ok := f.current[name]; ok {
			got[name] = prev
		}
	}
	f.current = got
	for name, sent := range f.delivered {
		for fault := range sent {
			if !slices.ContainsFunc(got[name], func(x health.InjectedFault) bool { return x.Event() == fault }) {
				delete(sent, fault)
			}
		}
	}
}

func (f *faults) has(name, kind string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshLocked()
	for _, x := range f.current[name] {
		// XID 79 is the driver's report of a GPU that fell off the bus: it answers nothing
		// afterwards either.
		if x.Kind == kind || kind == health.FaultLost && x.Kind == health.FaultXID && x.Code == "79" {
			return true
		}
	}
	return false
}

// fabricConditions are the fabric conditions injected for the GPU (FabricInfoV3).
func (f *faults) fabricConditions(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshLocked()
	var out []string
	for _, x := range f.current[name] {
		if x.Kind == health.FaultFabric {
			out = append(out, x.Code)
		}
	}
	return out
}

// recoveryAction is the GPU's recovery action while its faults stay: the most severe of their
// actions. A line that names none gets what NVIDIA's XID catalogue asks for (a GPU reset after
// an ECC error or an XID that needs one, none after an application error), which is the
// hardware's answer and not the plugin's configuration: an XID the plugin is told to ignore
// still asks for a reset if the catalogue says so.
func (f *faults) recoveryAction(name string) nvml.DeviceGpuRecoveryAction {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshLocked()
	worst := 0
	for _, x := range f.current[name] {
		action := x.Action
		switch {
		case action != "":
		case x.Kind == health.FaultECC:
			action = "reset"
		case x.Kind == health.FaultXID:
			n, _ := strconv.ParseUint(x.Code, 10, 64)
			if health.XIDNeedsReset(n) {
				action = "reset"
			}
		}
		for i, a := range recoveryActions {
			if a.name == action && i > worst {
				worst = i
			}
		}
	}
	return recoveryActions[worst].action
}

// wait is EventSet.Wait: the next undelivered xid or ecc line of any device, in device name
// order, or ERROR_TIMEOUT after timeoutMs.
func (f *faults) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	for {
		if ev, ok := f.next(); ok {
			return ev, nvml.SUCCESS
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		time.Sleep(min(left, faultReadInterval))
	}
}

func (f *faults) next() (nvml.EventData, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshLocked()
	for _, name := range health.SortedDevices(f.current) {
		d, ok := f.byName[name]
		if !ok {
			continue
		}
		for _, line := range f.current[name] {
			x := line.Event()
			if f.delivered[name][x] {
				continue
			}
			ev := nvml.EventData{Device: d}
			switch x.Kind {
			case health.FaultXID:
				n, _ := strconv.ParseUint(x.Code, 10, 64)
				ev.EventType, ev.EventData = nvml.EventTypeXidCriticalError, n
			case health.FaultECC:
				ev.EventType = nvml.EventTypeDoubleBitEccError
			default:
				continue
			}
			if f.delivered[name] == nil {
				f.delivered[name] = map[health.InjectedFault]bool{}
			}
			f.delivered[name][x] = true
			return ev, true
		}
	}
	return nvml.EventData{}, false
}
