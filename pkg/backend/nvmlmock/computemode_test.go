package nvmlmock

import (
	"context"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// TestComputeMode: the NVML backend sets a GPU's compute mode through NVML, initialising NVML
// for the call and shutting it down again when nothing else holds it; the mock keeps the mode
// in its state directory, where a second mock machine (a restarted plugin) and tests find it.
func TestComputeMode(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewServer("h100-8x-2numa", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	s.UseStateDir(dir)
	inits, shutdowns := 0, 0
	s.InitFunc = func() nvml.Return { inits++; return nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return { shutdowns++; return nvml.SUCCESS }
	var b device.ComputeModeSetter = s.Backend()
	u0, _ := s.Devices[0].GetUUID()
	u1, _ := s.Devices[1].GetUUID()
	if err := b.SetComputeMode(ctx, u1, device.ComputeModeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	if inits != 1 || shutdowns != 1 {
		t.Errorf("NVML Init %d, Shutdown %d times, want once each", inits, shutdowns)
	}
	got, err := ComputeModes(dir)
	if err != nil || len(got) != 1 || got[u1] != "EXCLUSIVE_PROCESS" {
		t.Errorf("state: %v (%v), want %s EXCLUSIVE_PROCESS only", got, err, u1)
	}
	again, err := NewServer("h100-8x-2numa", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	again.UseStateDir(dir)
	for i, want := range []nvml.ComputeMode{nvml.COMPUTEMODE_DEFAULT, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS} {
		if m, ret := again.Devices[i].GetComputeMode(); ret != nvml.SUCCESS || m != want {
			t.Errorf("GPU %d after a restart: mode %v (%v), want %v", i, m, ret, want)
		}
	}
	if err := b.SetComputeMode(ctx, u1, device.ComputeModeDefault); err != nil {
		t.Fatal(err)
	}
	if got, _ := ComputeModes(dir); got[u1] != "DEFAULT" || got[u0] != "" {
		t.Errorf("state after setting DEFAULT: %v", got)
	}
	for name, tc := range map[string]struct {
		uuid string
		mode device.ComputeMode
		want string
	}{
		"unknown GPU":  {"GPU-nope", device.ComputeModeDefault, "nvml DeviceGetHandleByUUID(GPU-nope)"},
		"unknown mode": {u0, "SHARED", `compute mode "SHARED" is not one of`},
	} {
		if err := b.SetComputeMode(ctx, tc.uuid, tc.mode); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
	if inits != shutdowns {
		t.Errorf("NVML Init %d, Shutdown %d times", inits, shutdowns)
	}
}
