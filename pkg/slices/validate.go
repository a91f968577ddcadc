package slices

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/apivalidation"
)

// ValidateDevice checks a device against the rules the API server applies to a ResourceSlice
// device, before it is published: the API server rejects a whole slice for one bad device.
func ValidateDevice(d *resourceapi.Device) error {
	if err := apivalidation.Device(d); err != nil {
		return fmt.Errorf("device %s: %w", d.Name, err)
	}
	return nil
}
