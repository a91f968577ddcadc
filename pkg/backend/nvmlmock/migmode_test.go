package nvmlmock

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestSetMigModeNeedsAnIdleGPU shows, on the mock's model of nvmlDeviceSetMigMode, why the
// plugin does not switch MIG mode per claim (docs/migrate-from-nvidia.md): a switch activates
// only on an idle GPU of a host that can reset it. A GPU a workload holds stays in its mode
// with the other one pending, and a GPU passed through to a VM needs the VM rebooted; a GPU
// without MIG cannot switch at all. mig-mixed's gpu-3 is an H100 (Hopper) not in MIG mode.
func TestSetMigModeNeedsAnIdleGPU(t *testing.T) {
	const h100, l4 = 3, 4
	for _, tc := range []struct {
		name             string
		host             MIGModeHost
		gpu              int
		activation       nvml.Return
		current, pending int
	}{
		{name: "idle, bare metal", gpu: h100, activation: nvml.SUCCESS, current: nvml.DEVICE_MIG_ENABLE, pending: nvml.DEVICE_MIG_ENABLE},
		{name: "held by a workload", host: MIGModeHost{Busy: map[int]bool{h100: true}}, gpu: h100,
			activation: nvml.ERROR_IN_USE, current: nvml.DEVICE_MIG_DISABLE, pending: nvml.DEVICE_MIG_ENABLE},
		{name: "pass-through VM", host: MIGModeHost{ResetHidden: true}, gpu: h100,
			activation: nvml.ERROR_RESET_REQUIRED, current: nvml.DEVICE_MIG_DISABLE, pending: nvml.DEVICE_MIG_ENABLE},
		{name: "no MIG", gpu: l4, activation: nvml.ERROR_NOT_SUPPORTED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewServer("mig-mixed", "node-a")
			if err != nil {
				t.Fatal(err)
			}
			s.AllowMIGModeChanges(tc.host)
			d := s.Devices[tc.gpu]
			activation, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
			if activation != tc.activation {
				t.Fatalf("activation %v, want %v", activation, tc.activation)
			}
			if tc.activation == nvml.ERROR_NOT_SUPPORTED {
				return
			}
			current, pending, ret := d.GetMigMode()
			if ret != nvml.SUCCESS || current != tc.current || pending != tc.pending {
				t.Errorf("GetMigMode = %d, %d, %v; want current %d, pending %d", current, pending, ret, tc.current, tc.pending)
			}
		})
	}
}

// TestPluginNeverSetsMigMode: without AllowMIGModeChanges the mock refuses the call outright,
// so no test of the plugin can switch a GPU's MIG mode unnoticed.
func TestPluginNeverSetsMigMode(t *testing.T) {
	s, err := NewServer("mig-mixed", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("SetMigMode did not panic")
		}
	}()
	s.Devices[3].SetMigMode(nvml.DEVICE_MIG_ENABLE)
}
