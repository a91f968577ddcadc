package nvmlmock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// The mock's /proc is what the driver writes: the nvidia-caps major in /proc/devices, and an
// access file per GPU and compute instance only while the instance exists. Its /dev has no
// nvidia-caps nodes, which on a real node exist only where something made them on the host.
func TestProcFS(t *testing.T) {
	ctx := context.Background()
	s, err := NewServer("a100-8x-mig", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	s.UseStateDir(t.TempDir())
	proc := s.ProcFS()
	devices, err := fs.ReadFile(proc, "devices")
	if err != nil {
		t.Fatal(err)
	}
	chars, _, _ := strings.Cut(string(devices), "Block devices:")
	if want := fmt.Sprintf("\n%d nvidia-caps\n", CapsMajor); !strings.HasPrefix(chars, "Character devices:\n") || !strings.Contains(chars, want) {
		t.Errorf("/proc/devices lacks %q among the character devices:\n%s", want, devices)
	}
	for _, f := range []struct {
		name string
		want string
	}{
		{"mig/config", "DeviceFileMinor: 1\nDeviceFileMode: 256\n"},
		{"mig/monitor", "DeviceFileMinor: 2\nDeviceFileMode: 292\n"},
	} {
		got, err := fs.ReadFile(proc, CapabilitiesDir+"/"+f.name)
		if err != nil || !strings.HasPrefix(string(got), f.want) {
			t.Errorf("%s = %q, %v; want it to start with %q", f.name, got, err, f.want)
		}
	}

	b := s.Backend()
	inv, err := b.Enumerate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gpu := inv.MIGParents[2].GPU
	gi, err := b.CreateGI(ctx, gpu.UUID, nvml.GPU_INSTANCE_PROFILE_1_SLICE, device.MIGPlacement{Start: 6, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	giAccess := fmt.Sprintf("%s/gpu%d/mig/gi%d/access", CapabilitiesDir, gpu.Number, gi)
	ciAccess := fmt.Sprintf("%s/gpu%d/mig/gi%d/ci0/access", CapabilitiesDir, gpu.Number, gi)
	if got, err := fs.ReadFile(proc, giAccess); err != nil || string(got) != fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: 292\nDeviceFileModify: 1\n", CapMinor(gpu.Number, gi, -1)) {
		t.Errorf("%s after creating the GPU instance = %q, %v", giAccess, got, err)
	}
	if _, err := fs.Stat(proc, ciAccess); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s before its compute instance exists: %v, want not found", ciAccess, err)
	}
	if _, err := b.CreateCI(ctx, gpu.UUID, gi); err != nil {
		t.Fatal(err)
	}
	if got, err := fs.ReadFile(proc, ciAccess); err != nil || !strings.HasPrefix(string(got), fmt.Sprintf("DeviceFileMinor: %d\n", CapMinor(gpu.Number, gi, 0))) {
		t.Errorf("%s after creating the compute instance = %q, %v", ciAccess, got, err)
	}
	for _, minor := range []int{1, 2, CapMinor(gpu.Number, gi, -1), CapMinor(gpu.Number, gi, 0)} {
		if _, err := s.Stat(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat of /dev/nvidia-caps/nvidia-cap%d: %v, want not found: nothing created it", minor, err)
		}
	}
	if err := b.DestroyMIG(ctx, gpu.UUID, gi); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{giAccess, ciAccess} {
		if _, err := fs.Stat(proc, f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after the instance was destroyed: %v, want not found", f, err)
		}
	}
}
