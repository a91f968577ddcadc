package nodeplugin

import (
	"path/filepath"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/metrics"
)

// HealthStateFile is where, under the plugin data directory, device health conditions are kept
// across restarts of the plugin (not across reboots).
const HealthStateFile = "health/state.json"

// enableHealth turns device health on in the driver, with the backend's health source.
// With mismatch, the driver cannot be used (mismatch.go) and every device is unhealthy for it;
// otherwise a mismatch's conditions kept from before are cleared first.
func enableHealth(o *Options, drv *driver.Driver, w health.Watcher, mismatch error, inv *device.Inventory, boot string, m *metrics.Plugin) error {
	effects, err := health.ParseEffects(o.DeviceTaintEffects)
	if err != nil {
		return err
	}
	ignored := make([]uint64, len(o.IgnoredXIDs))
	for i, x := range o.IgnoredXIDs {
		ignored[i] = uint64(x)
	}
	var src health.Source
	if mismatch != nil {
		src = mismatchSource(inv.Devices, mismatch)
	} else {
		src = recoveredDriver(inv.Devices, w.HealthSource(inv.Devices, health.SourceConfig{Classifier: health.NewClassifier(ignored), Observed: observeHardware(m)}))
	}
	return drv.EnableHealth(driver.HealthOptions{
		Source: src, StatePath: filepath.Join(o.PluginDataDir, HealthStateFile), BootID: boot, Effects: effects,
	})
}
