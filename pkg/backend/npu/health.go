package npu

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

var _ health.Watcher = (*Backend)(nil)

// HealthSource returns the health source of the NPUs in devs.
//
// On a real node it is health.Unmonitored, so every NPU is reported Unknown: the Ascend driver
// exposes device health (dcmi_get_device_health, error codes, fault event subscription) only
// through its DCMI library, which this sysfs/devfs backend does not load, and sysfs carries no
// health attribute for the NPU's PCI function. With Config.FaultDir set (the npu-mock backend)
// the NPUs are healthy unless a fault file says otherwise (health.FaultDir).
func (b *Backend) HealthSource(devs []device.Device, cfg health.SourceConfig) health.Source {
	if b.cfg.FaultDir == "" {
		return health.Unmonitored
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	return &faultSource{dir: b.cfg.FaultDir, devs: devs, interval: cfg.PollInterval}
}

type faultSource struct {
	dir      string
	devs     []device.Device
	interval time.Duration
}

func (s *faultSource) Run(ctx context.Context, emit func(health.Event)) error {
	logger := klog.FromContext(ctx)
	reported := map[string]map[health.InjectedFault]bool{}
	for _, d := range s.devs {
		emit(health.Event{Type: health.Watching, Device: d.Name})
	}
	first := true
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		faults, bad := health.ReadFaults(s.dir)
		for name, err := range bad {
			logger.Error(err, "Ignoring unreadable fault file, keeping the device's faults as they were", "device", name)
		}
		for _, d := range s.devs {
			if _, isBad := bad[d.Name]; isBad {
				continue
			}
			now := faults[d.Name]
			had := reported[d.Name]
			if len(now) == 0 {
				// The first pass also clears a state from before a restart: the fault files
				// are the hardware's truth.
				if len(had) > 0 || first {
					emit(health.Event{Type: health.Recovered, Device: d.Name})
				}
				delete(reported, d.Name)
				continue
			}
			next := map[health.InjectedFault]bool{}
			for _, f := range now {
				next[f] = true
				if had[f] {
					continue
				}
				switch f.Kind {
				case health.FaultNPU:
					emit(health.Event{Type: health.Fault, Device: d.Name, Cause: health.CauseFault, Code: f.Code, Message: fmt.Sprintf("NPU fault, error code %s", f.Code)})
				case health.FaultLost:
					emit(health.Event{Type: health.Fault, Device: d.Name, Cause: health.CauseLost, Message: "NPU is lost: it stopped answering"})
				default:
					logger.Info("Ignoring a GPU fault injected for an NPU", "device", d.Name, "fault", f.String())
				}
			}
			for f := range had {
				if !next[f] {
					cause := health.CauseFault
					if f.Kind == health.FaultLost {
						cause = health.CauseLost
					}
					emit(health.Event{Type: health.Recovered, Device: d.Name, Cause: cause})
				}
			}
			reported[d.Name] = next
		}
		if first {
			emit(health.Event{Type: health.Synced})
		}
		first = false
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
