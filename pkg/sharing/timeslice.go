// Package sharing runs the GPU-side mechanisms of GPU sharing (docs/sharing.md): setting a GPU's
// time-slice through the driver's own nvidia-smi, as NVIDIA's DRA driver does, since NVML has no
// call for it on bare metal.
package sharing

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
)

// TimeSlicer sets the time-slice interval of one GPU, by UUID.
type TimeSlicer interface {
	SetTimeSlice(ctx context.Context, uuid string, interval configapi.TimeSliceInterval) error
}

// NvidiaSMI runs `nvidia-smi compute-policy -i <uuid> --set-timeslice <0..3>`.
type NvidiaSMI struct {
	// Path of the nvidia-smi binary, normally <driver root>/usr/bin/nvidia-smi.
	Path string
	// NVML returns the driver's libnvidia-ml.so.1 (nvml.FindLibrary under the driver root),
	// which nvidia-smi gets in LD_PRELOAD, as NVIDIA's DRA driver runs it: nvidia-smi opens NVML
	// by its soname, and the preloaded library answers. Nothing of the driver root goes on the
	// loader's search path: its library directories hold the host's C library too, of another
	// build than the plugin image's loader, with which nvidia-smi would fail at exec. Asked at
	// each run, as an upgrade replaces the file. Nil: nvidia-smi finds NVML itself.
	NVML func() (string, error)
}

// DriverLibraryDirs are the directories under a driver root where distributions and the .run
// installer put libnvidia-ml; those that exist under root are returned.
func DriverLibraryDirs(root string) []string {
	var out []string
	for _, d := range []string{"usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err == nil && fi.IsDir() {
			out = append(out, filepath.Join(root, d))
		}
	}
	return out
}

// SetTimeSlice implements TimeSlicer. The error carries nvidia-smi's output, which says why
// (a GPU that does not support compute policies, insufficient permissions).
func (s NvidiaSMI) SetTimeSlice(ctx context.Context, uuid string, interval configapi.TimeSliceInterval) error {
	n := interval.SMINumber()
	if n < 0 {
		return fmt.Errorf("time-slice interval %q is not one of %v", interval, configapi.SupportedTimeSliceIntervals)
	}
	cmd := exec.CommandContext(ctx, s.Path, "compute-policy", "-i", uuid, "--set-timeslice", strconv.Itoa(n))
	cmd.Env = os.Environ()
	if s.NVML != nil {
		lib, err := s.NVML()
		if err != nil {
			return fmt.Errorf("%s needs the driver's NVML: %w", s.Path, err)
		}
		if old := os.Getenv("LD_PRELOAD"); old != "" {
			lib += ":" + old
		}
		// The last of duplicate keys is the one a command gets.
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+lib)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s compute-policy -i %s --set-timeslice %d: %w: %s", s.Path, uuid, n, err, strings.TrimSpace(out.String()))
	}
	return nil
}
