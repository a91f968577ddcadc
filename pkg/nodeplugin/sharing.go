package nodeplugin

import (
	"path/filepath"

	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

// timeSlicer is the driver's nvidia-smi for GPU nodes (the mock's driver root has a stand-in),
// nil for NPUs and for a node without driver files and without --nvidia-smi-path.
func timeSlicer(o *Options, src *driverSource, kind device.Kind) sharing.TimeSlicer {
	if kind != device.KindGPU || o.NVIDIASMIPath == "" && src.root == "" {
		return nil
	}
	smi := sharing.NvidiaSMI{Path: o.NVIDIASMIPath}
	if root := src.root; root != "" {
		smi.NVML = func() (string, error) { return nvmlbackend.FindLibrary(root) }
	}
	if smi.Path == "" {
		smi.Path = filepath.Join(src.root, "usr/bin/nvidia-smi")
	}
	return smi
}

// mpsControl runs MPS daemons with the driver's nvidia-cuda-mps-control, under the plugin data
// directory (the same path on the host, where the containers' mounts come from); nil for NPUs
// and for a node without driver files and without --nvidia-mps-control-path.
func mpsControl(o *Options, src *driverSource, kind device.Kind) *sharing.MPS {
	if kind != device.KindGPU || o.NVIDIAMPSControlPath == "" && src.root == "" {
		return nil
	}
	m := &sharing.MPS{Control: o.NVIDIAMPSControlPath, Root: filepath.Join(o.PluginDataDir, "mps")}
	if src.root != "" {
		m.LibraryPath = sharing.DriverLibraryDirs(src.root)
	}
	if m.Control == "" {
		m.Control = filepath.Join(src.root, "usr/bin/nvidia-cuda-mps-control")
	}
	return m
}

// computeModeSetter is the backend, for the compute modes of sharing claims' GPUs, if it can set
// them (the NVML backend and its mock). The backend may have been closed after enumerating: it
// opens NVML again for each call.
func computeModeSetter(be device.Backend, kind device.Kind) device.ComputeModeSetter {
	if s, ok := be.(device.ComputeModeSetter); ok && kind == device.KindGPU {
		return s
	}
	return nil
}
