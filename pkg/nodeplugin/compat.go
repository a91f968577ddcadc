package nodeplugin

import (
	"fmt"
	"path/filepath"

	"github.com/accel-dra/accel-dra/pkg/compat/nvidia"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// completeNVIDIACompat checks --nvidia-compat against the other flags and gives the driver
// NVIDIA's name. A different --driver-name is refused rather than obeyed: the point of the mode
// is that workloads naming gpu.nvidia.com find the devices, and one under another name would
// translate NVIDIA's configuration for claims nobody writes.
func (o *Options) completeNVIDIACompat(isNPU bool) error {
	if !o.NVIDIACompat {
		return nil
	}
	if isNPU {
		return fmt.Errorf("--nvidia-compat is for GPU backends, not --backend=%s", o.Backend)
	}
	if o.DriverName != "" && o.DriverName != nvidia.DriverName {
		return fmt.Errorf("--nvidia-compat publishes the GPUs as %s; --driver-name=%s contradicts it", nvidia.DriverName, o.DriverName)
	}
	o.DriverName = nvidia.DriverName
	if o.PluginDataDir == "" {
		// Not NVIDIA's own directory, which holds its checkpoint: that stays as NVIDIA's driver
		// left it, for a rollback (the chart does the same).
		o.PluginDataDir = filepath.Join("/var/lib/kubelet/plugins", nvidia.DriverName+"-accel-dra")
	}
	return nil
}

// configTranslator is the driver's ConfigTranslator: NVIDIA's configuration in the
// compatibility mode, none otherwise.
func (o *Options) configTranslator() func([]byte) ([]byte, error) {
	if !o.NVIDIACompat {
		return nil
	}
	return nvidia.Translate
}

// taintKeys is the driver's TaintKeys: NVIDIA's in the compatibility mode.
func (o *Options) taintKeys() map[health.Cause]string {
	if !o.NVIDIACompat {
		return nil
	}
	return nvidia.TaintKeys
}

// attributes is the driver's Attributes: NVIDIA's names and values in the compatibility mode.
func (o *Options) attributes() slices.AttributeFunc {
	if !o.NVIDIACompat {
		return nil
	}
	return nvidia.Attributes
}
