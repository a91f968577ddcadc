package sharing

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// buildFakeSMI builds the GPU mock's nvidia-smi, the stand-in the mock nodes use.
func buildFakeSMI(t *testing.T) string {
	t.Helper()
	return standin.Build(t, standin.MockTools, "nvidia-smi")
}

func TestNvidiaSMISetTimeSlice(t *testing.T) {
	bin := buildFakeSMI(t)
	s := NvidiaSMI{Path: bin}
	ctx := context.Background()
	for _, iv := range []configapi.TimeSliceInterval{configapi.TimeSliceLong, configapi.TimeSliceDefault} {
		if err := s.SetTimeSlice(ctx, "GPU-1", iv); err != nil {
			t.Fatal(err)
		}
	}
	calls, err := os.ReadFile(bin + ".calls")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(calls), "GPU-1 3\nGPU-1 0\n"; got != want {
		t.Errorf("nvidia-smi was asked %q, want %q", got, want)
	}
	if err := s.SetTimeSlice(ctx, "GPU-1", "Forever"); err == nil {
		t.Error("an unknown interval reached nvidia-smi")
	}
	t.Setenv("FAKESMI_FAIL_UUID", "GPU-2")
	err = s.SetTimeSlice(ctx, "GPU-2", configapi.TimeSliceShort)
	if err == nil || !strings.Contains(err.Error(), "not supported for GPU GPU-2") {
		t.Errorf("failing nvidia-smi: error %v, want its output", err)
	}
	if err := (NvidiaSMI{Path: filepath.Join(t.TempDir(), "missing")}).SetTimeSlice(ctx, "GPU-1", configapi.TimeSliceShort); err == nil {
		t.Error("a missing nvidia-smi is no error")
	}
}
