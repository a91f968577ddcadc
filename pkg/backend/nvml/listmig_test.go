package nvml_test

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// TestListMIGPerGPUErrors: a GPU that cannot be read is named in a device.GPUErrors and the
// instances of the others are listed all the same; one that fell off the bus is ErrGPULost.
func TestListMIGPerGPUErrors(t *testing.T) {
	t.Run("lost GPU not in MIG mode", func(t *testing.T) {
		s, err := nvmlmock.NewServer("h100-8x-one-broken", "node-a")
		if err != nil {
			t.Fatal(err)
		}
		list, err := s.Backend().ListMIG(t.Context())
		var failed device.GPUErrors
		if !errors.As(err, &failed) || len(failed) != 1 || failed[0].Index != 3 || !errors.Is(err, device.ErrGPULost) {
			t.Fatalf("ListMIG: %v (%#v), want one GPUError for index 3 that is ErrGPULost", err, failed)
		}
		if len(list) != 0 {
			t.Errorf("instances %+v, want none (no GPU is in MIG mode)", list)
		}
	})
	t.Run("one MIG GPU fails", func(t *testing.T) {
		s, err := nvmlmock.NewServer("mig-mixed", "node-a")
		if err != nil {
			t.Fatal(err)
		}
		s.UseStateDir(t.TempDir())
		all, err := s.Backend().ListMIG(t.Context())
		if err != nil || len(all) == 0 {
			t.Fatalf("ListMIG of the healthy machine: %v, %+v", err, all)
		}
		// gpu-0 (the A100 with the operator's instances) stops answering its UUID query.
		s.Devices[0].GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		list, err := s.Backend().ListMIG(t.Context())
		var failed device.GPUErrors
		if !errors.As(err, &failed) || len(failed) != 1 || failed[0].Index != 0 || errors.Is(err, device.ErrGPULost) {
			t.Fatalf("ListMIG: %v, want one GPUError for index 0, not lost", err)
		}
		if !errors.Is(err, nvml.ERROR_UNKNOWN) {
			t.Errorf("error %v does not wrap NVML's", err)
		}
		// The mock's other MIG GPUs are empty: nothing else to list, and nothing of gpu-0's.
		for _, in := range list {
			if in.ParentUUID == all[0].ParentUUID {
				t.Errorf("instance %+v of the failed GPU listed", in)
			}
		}
	})
}
