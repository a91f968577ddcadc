package sharing

import (
	"context"
	"errors"
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

// TestNvidiaSMIPreloadsNVML: nvidia-smi gets the driver's libnvidia-ml in LD_PRELOAD, before
// what the plugin's own environment preloads, and nothing else of the loader's environment
// changes; without the library it is not run.
func TestNvidiaSMIPreloadsNVML(t *testing.T) {
	const lib = "/driver-root/usr/lib64/libnvidia-ml.so.570.124.06"
	for name, tc := range map[string]struct {
		nvml    func() (string, error)
		preload string // the plugin's own LD_PRELOAD; "" for none
		want    string // what nvidia-smi saw; "" for not run
		wantErr string
	}{
		"driver's NVML":               {nvml: func() (string, error) { return lib, nil }, want: "LD_PRELOAD=" + lib + " LD_LIBRARY_PATH=unset"},
		"after the plugin's preloads": {nvml: func() (string, error) { return lib, nil }, preload: "/opt/libx.so", want: "LD_PRELOAD=" + lib + ":/opt/libx.so LD_LIBRARY_PATH=unset"},
		"nvidia-smi finds NVML":       {want: "LD_PRELOAD=unset LD_LIBRARY_PATH=unset"},
		"no NVML":                     {nvml: func() (string, error) { return "", errors.New("no libnvidia-ml.so.1 under /driver-root") }, wantErr: "needs the driver's NVML: no libnvidia-ml.so.1 under /driver-root"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, v := range []string{"LD_LIBRARY_PATH", "LD_PRELOAD"} {
				t.Setenv(v, "restored after the test")
				_ = os.Unsetenv(v)
			}
			if tc.preload != "" {
				t.Setenv("LD_PRELOAD", tc.preload)
			}
			smi := filepath.Join(t.TempDir(), "nvidia-smi")
			if err := os.WriteFile(smi, []byte("#!/bin/sh\necho \"LD_PRELOAD=${LD_PRELOAD-unset} LD_LIBRARY_PATH=${LD_LIBRARY_PATH-unset}\" >\"$0.env\"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			err := NvidiaSMI{Path: smi, NVML: tc.nvml}.SetTimeSlice(context.Background(), "GPU-1", configapi.TimeSliceLong)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			got, rerr := os.ReadFile(smi + ".env")
			switch {
			case tc.want == "" && rerr == nil:
				t.Errorf("nvidia-smi ran without the driver's NVML, with %s", got)
			case tc.want != "" && (rerr != nil || strings.TrimSpace(string(got)) != tc.want):
				t.Errorf("nvidia-smi ran with %q (%v), want %q", got, rerr, tc.want)
			}
		})
	}
}
