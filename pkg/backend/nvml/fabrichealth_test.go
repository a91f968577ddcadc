package nvml

import (
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/accel-dra/accel-dra/pkg/health"
)

// healthy is a fabric health mask with every field supported and healthy (FALSE, NONE).
const healthy = nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW |
	nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY |
	nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY |
	nvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY |
	nvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION

// with replaces one field of mask.
func with(mask uint32, shift, width, value uint32) uint32 {
	return mask&^(width<<shift) | value<<shift
}

func TestFabricConditions(t *testing.T) {
	tests := map[string]struct {
		mask uint32
		want []string
	}{
		"every field NOT_SUPPORTED (Hopper HGX)": {mask: 0},
		"every field healthy":                    {mask: healthy},
		"degraded bandwidth": {mask: with(healthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE),
			want: []string{health.FabricDegradedBW}},
		"degraded bandwidth, other fields NOT_SUPPORTED":   {mask: nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE, want: []string{health.FabricDegradedBW}},
		"degraded bandwidth NOT_SUPPORTED, others healthy": {mask: with(healthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_NOT_SUPPORTED)},
		"route recovery in progress": {mask: with(healthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE),
			want: []string{health.FabricRouteRecovery}},
		"route unhealthy": {mask: with(healthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE),
			want: []string{health.FabricRouteUnhealthy}},
		"access timeout recovery in progress": {mask: with(healthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ACCESS_TIMEOUT_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE),
			want: []string{health.FabricAccessTimeoutRecovery}},
		"incorrect SysGUID": {mask: with(healthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION, nvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INCORRECT_SYSGUID),
			want: []string{health.FabricIncorrectConfig}},
		"insufficient NVLinks": {mask: with(healthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION, nvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS),
			want: []string{health.FabricIncorrectConfig}},
		"degraded bandwidth and route unhealthy, in mask order": {mask: with(with(healthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE),
			nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE),
			want: []string{health.FabricDegradedBW, health.FabricRouteUnhealthy}},
		// Bits above the fields this go-nvml knows (a newer driver's) say nothing known.
		"unknown higher fields": {mask: healthy | 0xff<<16},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := fabricConditions(tc.mask); !slices.Equal(got, tc.want) {
				t.Errorf("fabricConditions(%#x) = %v, want %v", tc.mask, got, tc.want)
			}
		})
	}
}

// TestFabricHealthAnswers: what each answer of nvmlDeviceGetGpuFabricInfoV means for health.
func TestFabricHealthAnswers(t *testing.T) {
	degraded := with(healthy, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE)
	tests := map[string]struct {
		info          nvml.GpuFabricInfo_v3
		ret           nvml.Return
		wantConds     []string
		wantSupported bool
		wantRet       nvml.Return
	}{
		"GPU before Hopper": {ret: nvml.ERROR_NOT_SUPPORTED},
		"Hopper HGX: state NOT_SUPPORTED, a stray mask ignored": {info: nvml.GpuFabricInfo_v3{State: nvml.GPU_FABRIC_STATE_NOT_SUPPORTED, HealthMask: degraded}},
		"GB200 healthy":               {info: nvml.GpuFabricInfo_v3{State: nvml.GPU_FABRIC_STATE_COMPLETED, HealthMask: healthy}, wantSupported: true},
		"GB200 degraded":              {info: nvml.GpuFabricInfo_v3{State: nvml.GPU_FABRIC_STATE_COMPLETED, HealthMask: degraded}, wantSupported: true, wantConds: []string{health.FabricDegradedBW}},
		"GB200 registering, degraded": {info: nvml.GpuFabricInfo_v3{State: nvml.GPU_FABRIC_STATE_IN_PROGRESS, HealthMask: degraded}, wantSupported: true, wantConds: []string{health.FabricDegradedBW}},
		"library error":               {ret: nvml.ERROR_UNKNOWN, wantSupported: true, wantRet: nvml.ERROR_UNKNOWN},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := &Backend{fabricInfo: func(nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return) { return tc.info, tc.ret }}
			conds, _, supported, ret := b.fabricHealth(&mock.Device{})
			if !slices.Equal(conds, tc.wantConds) || supported != tc.wantSupported || ret != tc.wantRet {
				t.Errorf("fabricHealth = %v, supported %v, %v; want %v, %v, %v", conds, supported, ret, tc.wantConds, tc.wantSupported, tc.wantRet)
			}
		})
	}
}
