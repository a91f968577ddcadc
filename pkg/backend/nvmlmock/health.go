package nvmlmock

import (
	"encoding/binary"
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
// makes the GPU's recovery action "reset" until the line is removed; a "lost" line makes the
// GPU answer GPU_IS_LOST to everything but its minor number and PCI info, as a GPU that fell
// off the bus does. Removing the file is the reset that recovers the GPU.
func WithFaultDir(dir string) Option {
	return func(o *options) { o.faultDir = dir }
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
	// delivered are the xid/ecc lines already sent as events, per device, so each is sent
	// once; a line removed and written again is a new fault.
	delivered map[string]map[health.InjectedFault]bool
}

// injectFaults wires the fault files into the machine's NVML functions.
func (s *Server) injectFaults(dir string) {
	f := &faults{dir: dir, byName: map[string]*mock.Device{}, delivered: map[string]map[health.InjectedFault]bool{}}
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
				action := nvml.GPU_RECOVERY_ACTION_NONE
				if f.needsReset(name) {
					action = nvml.GPU_RECOVERY_ACTION_GPU_RESET
				}
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
			if !contains(got[name], fault) {
				delete(sent, fault)
			}
		}
	}
}

func contains(fs []health.InjectedFault, f health.InjectedFault) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
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

// needsReset: an ECC error or an XID that is not an application error asks for a GPU reset,
// as the driver's recovery action does.
func (f *faults) needsReset(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshLocked()
	app := health.NewClassifier(nil)
	for _, x := range f.current[name] {
		if x.Kind == health.FaultECC {
			return true
		}
		if x.Kind == health.FaultXID {
			n, _ := strconv.ParseUint(x.Code, 10, 64)
			if _, critical := app.Classify(name, n); critical {
				return true
			}
		}
	}
	return false
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
		for _, x := range f.current[name] {
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
