package nvml

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// FabricInfoFunc reads a GPU's fabric info with its health mask (nvmlDeviceGetGpuFabricInfoV,
// nvmlGpuFabricInfo_v3_t).
type FabricInfoFunc func(nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return)

// WithFabricInfo reads the fabric info with f instead of the library's
// nvmlDeviceGetGpuFabricInfoV. go-nvml's GetGpuFabricInfoV returns a handler bound to a device
// of the real library, which a mock cannot make: the mock machine answers through this instead.
func WithFabricInfo(f FabricInfoFunc) Option { return func(b *Backend) { b.fabricInfo = f } }

// LibraryFabricInfo asks the library for nvmlGpuFabricInfo_v3_t. A driver that predates v3
// answers NVML_ERROR_ARGUMENT_VERSION_MISMATCH; v2 has the same health mask, without the summary.
func LibraryFabricInfo(h nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return) {
	v := h.GetGpuFabricInfoV()
	info, ret := v.V3()
	if ret != nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
		return info, ret
	}
	v2, ret := v.V2()
	return nvml.GpuFabricInfo_v3{ClusterUuid: v2.ClusterUuid, Status: v2.Status, CliqueId: v2.CliqueId, State: v2.State, HealthMask: v2.HealthMask}, ret
}
