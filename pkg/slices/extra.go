package slices

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// AttributeFunc returns attributes a device gets on top of, or in place of, its own (the NVIDIA
// compatibility mode's, pkg/compat/nvidia); nil or empty for none.
type AttributeFunc func(d *device.Device) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

// WithAttributes applies f to every device before validation, so that a device the extra
// attributes take over the API's limits is left out and reported like any invalid device.
func WithAttributes(f AttributeFunc) Option {
	return func(o *buildOptions) { o.attributes = f }
}
