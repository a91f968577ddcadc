package nvml

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/accel-dra/accel-dra/pkg/health"
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

// fabricField is one field of the fabric health mask (NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_* and
// _WIDTH_*, where WIDTH is the field's mask after the shift) and whether a value of it is a
// condition that makes the GPU unhealthy.
type fabricField struct {
	cond         string
	shift, width uint32
	bad          func(v uint32) bool
}

// is reports a field whose value TRUE is the condition: FALSE is healthy, and NOT_SUPPORTED (0,
// every field of a GPU without a fabric health mask, such as a Hopper HGX) says nothing.
func is(trueValue uint32) func(uint32) bool { return func(v uint32) bool { return v == trueValue } }

// fabricFields are the mask's fields, from the NVML API reference (docs.nvidia.com/deploy/nvml-api,
// "Fabric definitions", nvmlGpuFabricInfo_v3_t.healthMask), in health.FabricConditions order.
var fabricFields = []fabricField{
	{health.FabricDegradedBW, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW, is(nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE)},
	{health.FabricRouteRecovery, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_RECOVERY, is(nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE)},
	{health.FabricRouteUnhealthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY, is(nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE)},
	{health.FabricAccessTimeoutRecovery, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ACCESS_TIMEOUT_RECOVERY, is(nvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE)},
	// Every value but NOT_SUPPORTED and NONE names a wrong configuration (SysGUID, chassis
	// serial number, no partition, too few NVLinks, and those a newer driver adds).
	{health.FabricIncorrectConfig, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION, func(v uint32) bool {
		return v != nvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NOT_SUPPORTED && v != nvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE
	}},
}

// fabricConditions are the conditions a health mask reports, in fabricFields order.
func fabricConditions(mask uint32) []string {
	var out []string
	for _, f := range fabricFields {
		if f.bad((mask >> f.shift) & f.width) {
			out = append(out, f.cond)
		}
	}
	return out
}

// fabricHealth is what a GPU's fabric says about its health: supported is false for a GPU
// without a fabric health mask (no fabric info, or state NOT_SUPPORTED), which is never
// unhealthy for the fabric cause. ret is the library's error otherwise.
func (b *Backend) fabricHealth(h nvml.Device) (conds []string, mask uint32, supported bool, ret nvml.Return) {
	info, ret := b.fabricInfo(h)
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED, ret == nvml.SUCCESS && info.State == nvml.GPU_FABRIC_STATE_NOT_SUPPORTED:
		return nil, 0, false, nvml.SUCCESS
	case ret != nvml.SUCCESS:
		return nil, 0, true, ret
	}
	return fabricConditions(info.HealthMask), info.HealthMask, true, nvml.SUCCESS
}

// fabricEvent is the fabric fault of conds, or a recovery where there are none. The conditions
// joined by "." are the taint's value (a label value: no commas).
func fabricEvent(conds []string, mask uint32) health.Event {
	if len(conds) == 0 {
		return health.Event{Type: health.Recovered, Cause: health.CauseFabric}
	}
	return health.Event{Type: health.Fault, Cause: health.CauseFabric, Code: strings.Join(conds, "."),
		Message: fmt.Sprintf("NVLink fabric health: %s (nvmlGpuFabricInfo healthMask 0x%x)", strings.Join(conds, ", "), mask)}
}
