package slices

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/accel-dra/accel-dra/api/template/apirules"
)

// Option changes what Build produces.
type Option func(*buildOptions)

type buildOptions struct {
	taints map[string][]resourceapi.DeviceTaint
	// consumableMemory: see WithConsumableMemory (capacity.go).
	consumableMemory bool
	// attributes: see WithAttributes (extra.go).
	attributes AttributeFunc
}

// WithTaints puts taints on devices, by device name (see pkg/driver's health taints).
func WithTaints(taints map[string][]resourceapi.DeviceTaint) Option {
	return func(o *buildOptions) { o.taints = taints }
}

// splitPlain cuts devices, in order, into slices: a slice holds up to ResourceSliceMaxDevices
// devices, or ResourceSliceMaxDevicesWithAdvancedFeatures once one of them is tainted or
// consumes counters. Filling greedily in device order keeps the split deterministic, and a
// taint on one device only re-cuts the slices from its own onwards.
func splitPlain(devs []resourceapi.Device) []resourceslice.Slice {
	var out []resourceslice.Slice
	start, adv := 0, false
	for i := range devs {
		a := adv || apirules.LowersSliceLimit(&devs[i])
		limit := resourceapi.ResourceSliceMaxDevices
		if a {
			limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
		if i-start+1 > limit {
			out = append(out, resourceslice.Slice{Devices: devs[start:i]})
			start, a = i, apirules.LowersSliceLimit(&devs[i])
		}
		adv = a
	}
	if start < len(devs) {
		out = append(out, resourceslice.Slice{Devices: devs[start:]})
	}
	return out
}
