package nvml

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// Library is the NVML library the backend enumerates with, for the NVIDIA toolkit's CDI
// generator (pkg/cdi/nvidia), which asks it for the driver version: the same library, real or
// mock, so the driver it describes is the one whose devices were enumerated.
func (b *Backend) Library() nvml.Interface { return b.lib }
