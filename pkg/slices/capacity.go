package slices

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MinMemoryShare is the smallest memory share a claim can get of a GPU published with
// consumable memory; smaller requests are rounded up to it by the scheduler. A share below 1 GiB
// holds no useful CUDA context and would only let a node fill with unusable claims.
var MinMemoryShare = resource.MustParse("1Gi")

// WithConsumableMemory publishes every device for consumable capacity (KEP-5075): the device
// allows multiple allocations and its memory capacity gets a request policy, so that the
// scheduler gives several claims the same device, each with the memory it asked for, and
// never more than the device has.
func WithConsumableMemory() Option {
	return func(o *buildOptions) { o.consumableMemory = true }
}

// ConsumableMemory turns dev, as ToAPI built it, into a device shared by memory: a claim
// that asks for no memory gets all of it (so an unchanged claim keeps a whole GPU), and any
// request from MinMemoryShare up to the device's memory is valid.
func ConsumableMemory(dev *resourceapi.Device) {
	c, ok := dev.Capacity[CapacityMemory]
	if !ok {
		return
	}
	min := MinMemoryShare.DeepCopy()
	if min.Cmp(c.Value) > 0 {
		min = c.Value.DeepCopy()
	}
	def := c.Value.DeepCopy()
	c.RequestPolicy = &resourceapi.CapacityRequestPolicy{
		Default:    &def,
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &min},
	}
	dev.Capacity[CapacityMemory] = c
	multi := true
	dev.AllowMultipleAllocations = &multi
}
