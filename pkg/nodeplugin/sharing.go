package nodeplugin

import (
	"path/filepath"

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
	if src.root != "" {
		smi.LibraryPath = sharing.DriverLibraryDirs(src.root)
	}
	if smi.Path == "" {
		smi.Path = filepath.Join(src.root, "usr/bin/nvidia-smi")
	}
	return smi
}
