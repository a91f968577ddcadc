package nvml

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
)

var _ device.ComputeModeSetter = (*Backend)(nil)

// SetComputeMode implements device.ComputeModeSetter with nvmlDeviceSetComputeMode, which needs
// root. NVML is initialised for the call if nothing holds it (the plugin closes the backend
// after enumerating unless device health or dynamic MIG keeps it), and shut down again after.
func (b *Backend) SetComputeMode(ctx context.Context, uuid string, mode device.ComputeMode) error {
	var m nvml.ComputeMode
	switch mode {
	case device.ComputeModeDefault:
		m = nvml.COMPUTEMODE_DEFAULT
	case device.ComputeModeExclusiveProcess:
		m = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
	default:
		return fmt.Errorf("compute mode %q is not one of %s, %s", mode, device.ComputeModeDefault, device.ComputeModeExclusiveProcess)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.inited {
		if err := b.initLocked(ctx); err != nil {
			return err
		}
		defer func() {
			b.inited = false
			if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
				klog.FromContext(ctx).Error(ret, "nvml Shutdown after setting a compute mode")
			}
		}()
	}
	h, ret := b.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml DeviceGetHandleByUUID(%s): %w", uuid, ret)
	}
	if ret := h.SetComputeMode(m); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml SetComputeMode(%s, %s): %w", uuid, mode, ret)
	}
	return nil
}
