package nvidia

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// NVIDIA's attribute names that accel-dra does not publish by itself.
const (
	AttrBrand             resourceapi.QualifiedName = "brand"
	AttrCUDADriverVersion resourceapi.QualifiedName = "cudaDriverVersion"
)

// architectures are the architecture values NVIDIA's driver spells differently (go-nvlib's
// GetArchitectureAsString); the others are the same words.
var architectures = map[string]string{"Ada": "Ada Lovelace"}

// Attributes is the compatibility mode's slices.AttributeFunc: what a GPU or MIG device of
// accel-dra needs on top of its own attributes for selectors written against NVIDIA's driver to
// match it as they match there.
//
// They come in addition to accel-dra's, not instead, so that accel-dra's documentation, tools
// and the claims of a cluster half-way through the move keep working; the names do not clash
// (NVIDIA's type, uuid, productName, architecture, driverVersion, cudaComputeCapability,
// parentUUID, profile and the resource.kubernetes.io ones are accel-dra's too) and a MIG device,
// the fullest, stays well under the API's 32 attributes and capacities. Where the names are
// shared and the values differ, NVIDIA's value is published (architecture "Ada Lovelace",
// where accel-dra says "Ada"): two values cannot share a name, and in this mode selectors
// are NVIDIA's.
func Attributes(d *device.Device) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if d.Kind != device.KindGPU {
		return out
	}
	if a, ok := architectures[d.Architecture]; ok {
		out[slices.AttrArchitecture] = resourceapi.DeviceAttribute{StringValue: &a}
	}
	if d.Brand != "" {
		b := d.Brand
		out[AttrBrand] = resourceapi.DeviceAttribute{StringValue: &b}
	}
	// A version NVIDIA's driver would publish as semver (12.8 is 12.8.0); one that cannot be
	// made semver is left out, as accel-dra's own versions are.
	if v, err := slices.NormalizeVersion(d.CUDADriverVersion); d.CUDADriverVersion != "" && err == nil {
		out[AttrCUDADriverVersion] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	return out
}
