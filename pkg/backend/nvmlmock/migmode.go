package nvmlmock

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MIG mode changes, for the test of why accel-dra never makes one (docs/migrate-from-nvidia.md,
// "Why accel-dra does not switch MIG mode"). By default the mock's SetMigMode panics: the plugin
// must never call it. AllowMIGModeChanges makes it answer as nvmlDeviceSetMigMode is documented
// to (NVML API reference, nvmlDeviceSetMigMode; go-nvml returns activationStatus first):
//
//   - the call sets the pending mode, then activates it by unbinding or resetting the GPU;
//   - activation fails with NVML_ERROR_IN_USE while the device is not idle ("if device unbind
//     fails because the device isn't idle"): the caller must idle it and retry;
//   - on platforms that do not expose reset, such as pass-through virtualization, activation
//     fails with NVML_ERROR_RESET_REQUIRED: only a VM reboot activates the mode;
//   - GPUs without MIG answer NVML_ERROR_NOT_SUPPORTED.
//
// GetMigMode then returns the current and the pending mode, which differ until activation.

// MIGModeHost is what decides whether a GPU of the mock can change its MIG mode now.
type MIGModeHost struct {
	// ResetHidden: the GPUs are passed through to a VM that cannot reset them.
	ResetHidden bool
	// Busy are the NVML indexes of GPUs that a process holds: a container's CUDA context, a
	// monitoring agent.
	Busy map[int]bool
}

// AllowMIGModeChanges makes SetMigMode of the machine's MIG-capable GPUs answer as NVML does on
// host h, and GetMigMode report the current and pending modes it leaves.
func (s *Server) AllowMIGModeChanges(h MIGModeHost) {
	var mu sync.Mutex
	for i, d := range s.Devices {
		g := s.profile.gpus[i]
		if !g.model.mig || g.model.migTable == nil {
			d.SetMigModeFunc = func(int) (nvml.Return, nvml.Return) { return nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED }
			continue
		}
		current := nvml.DEVICE_MIG_DISABLE
		if g.migMode {
			current = nvml.DEVICE_MIG_ENABLE
		}
		pending := current
		d.SetMigModeFunc = func(mode int) (nvml.Return, nvml.Return) {
			mu.Lock()
			defer mu.Unlock()
			if mode != nvml.DEVICE_MIG_DISABLE && mode != nvml.DEVICE_MIG_ENABLE {
				return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
			}
			pending = mode
			switch {
			case h.ResetHidden:
				return nvml.ERROR_RESET_REQUIRED, nvml.SUCCESS
			case h.Busy[i]:
				return nvml.ERROR_IN_USE, nvml.SUCCESS
			}
			current = pending
			return nvml.SUCCESS, nvml.SUCCESS
		}
		d.GetMigModeFunc = func() (int, int, nvml.Return) {
			mu.Lock()
			defer mu.Unlock()
			return current, pending, nvml.SUCCESS
		}
	}
}
