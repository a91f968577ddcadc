// Package slices turns a node's device inventory into the ResourceSlice content the
// kubeletplugin helper publishes: standard and driver attributes, capacity, validation against
// the API's per-device rules, and a deterministic split into slices.
package slices

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/blang/semver/v4"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// Driver attribute names, unqualified (they belong to the driver's own domain).
const (
	AttrType                  resourceapi.QualifiedName = "type"
	AttrUUID                  resourceapi.QualifiedName = "uuid"
	AttrProductName           resourceapi.QualifiedName = "productName"
	AttrArchitecture          resourceapi.QualifiedName = "architecture"
	AttrIndex                 resourceapi.QualifiedName = "index"
	AttrDriverVersion         resourceapi.QualifiedName = "driverVersion"
	AttrCUDAComputeCapability resourceapi.QualifiedName = "cudaComputeCapability"
	CapacityMemory            resourceapi.QualifiedName = "memory"
)

// Rejected is a device left out of the published slices and why.
type Rejected struct {
	Device string
	// Reason is a short machine-friendly cause, used as a metric label.
	Reason string
	Err    error
}

// Result is what Build produces.
type Result struct {
	Resources resourceslice.DriverResources
	// Published are the names of the devices in Resources, sorted.
	Published []string
	Rejected  []Rejected
}

// Build converts an inventory into one pool named poolName (the node name, as the kubelet
// plugin helper expects). A device whose attributes break the API's rules is left out and
// reported in Rejected, so one bad device never takes the whole pool down.
func Build(inv *device.Inventory, poolName string) Result {
	devs := append([]device.Device(nil), inv.Devices...)
	device.Sort(devs)

	var res Result
	var apiDevs []resourceapi.Device
	for i := range devs {
		d, reason, err := ToAPI(&devs[i])
		if err == nil {
			err = ValidateDevice(&d)
			reason = "invalid"
		}
		if err != nil {
			res.Rejected = append(res.Rejected, Rejected{Device: devs[i].Name, Reason: reason, Err: err})
			continue
		}
		apiDevs = append(apiDevs, d)
		res.Published = append(res.Published, d.Name)
	}

	pool := resourceslice.Pool{}
	for start := 0; start < len(apiDevs); start += resourceapi.ResourceSliceMaxDevices {
		end := min(start+resourceapi.ResourceSliceMaxDevices, len(apiDevs))
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: apiDevs[start:end]})
	}
	// An empty pool still gets one empty slice so that the scheduler sees the node's pool as
	// complete rather than unknown.
	if len(pool.Slices) == 0 {
		pool.Slices = []resourceslice.Slice{{}}
	}
	res.Resources = resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{poolName: pool}}
	return res
}

// ToAPI converts one device. The reason string names the failing conversion for metrics.
func ToAPI(d *device.Device) (resourceapi.Device, string, error) {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType:        str(string(d.Kind)),
		AttrUUID:        str(d.UUID),
		AttrProductName: str(d.ProductName),
		AttrIndex:       {IntValue: ptr(int64(d.Index))},
	}
	if d.Architecture != "" {
		attrs[AttrArchitecture] = str(d.Architecture)
	}
	if d.DriverVersion != "" {
		v, err := NormalizeVersion(d.DriverVersion)
		if err != nil {
			return resourceapi.Device{}, "driver-version", fmt.Errorf("device %s: driverVersion: %w", d.Name, err)
		}
		attrs[AttrDriverVersion] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	if d.CUDAComputeCapability != "" {
		v, err := NormalizeVersion(d.CUDAComputeCapability)
		if err != nil {
			return resourceapi.Device{}, "compute-capability", fmt.Errorf("device %s: cudaComputeCapability: %w", d.Name, err)
		}
		attrs[AttrCUDAComputeCapability] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	if d.PCIBusID != "" {
		a, err := deviceattribute.GetPCIBusIDAttribute(d.PCIBusID)
		if err != nil {
			return resourceapi.Device{}, "pci-bus-id", fmt.Errorf("device %s: %w", d.Name, err)
		}
		attrs[a.Name] = a.Value
	}
	if d.PCIeRoot != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = str(d.PCIeRoot)
	}
	if d.NUMANode != nil {
		a, err := deviceattribute.GetNUMANodeAttribute(int(*d.NUMANode), deviceattribute.ScalarAttribute)
		if err != nil {
			return resourceapi.Device{}, "numa-node", fmt.Errorf("device %s: %w", d.Name, err)
		}
		attrs[a.Name] = a.Value
	}
	return resourceapi.Device{
		Name:       d.Name,
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: *resource.NewQuantity(d.MemoryBytes, resource.BinarySI)},
		},
	}, "", nil
}

// NormalizeVersion makes a driver-reported version semver, as version attributes must be:
// NVIDIA reports "570.124.06" (a leading zero semver forbids), compute capabilities are "9.0",
// and Ascend drivers report "24.1.rc2". Numeric parts lose leading zeros, missing parts become 0,
// and a trailing alphanumeric part after at least two numeric ones ("rc2") or a "-suffix" becomes
// the pre-release. Anything that is still not semver afterwards is an error.
func NormalizeVersion(s string) (string, error) {
	in := strings.TrimSpace(s)
	core, pre, hasPre := strings.Cut(in, "-")
	parts := strings.Split(core, ".")
	if !hasPre && len(parts) >= 3 && len(parts) <= 4 && isAlnumIdent(parts[len(parts)-1]) {
		pre, hasPre = parts[len(parts)-1], true
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 3 {
		return "", fmt.Errorf("%q is not a version of at most three numeric parts", s)
	}
	nums := []string{"0", "0", "0"}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return "", fmt.Errorf("%q is not a semantic version: part %q is not a number", s, p)
		}
		nums[i] = strconv.FormatUint(n, 10)
	}
	v := strings.Join(nums, ".")
	if hasPre {
		v += "-" + pre
	}
	if _, err := semver.Parse(v); err != nil {
		return "", fmt.Errorf("%q is not a semantic version: %w", s, err)
	}
	return v, nil
}

// isAlnumIdent reports whether p is a letter followed by letters and digits ("rc2", "RC1").
func isAlnumIdent(p string) bool {
	if p == "" || !(p[0] >= 'a' && p[0] <= 'z' || p[0] >= 'A' && p[0] <= 'Z') {
		return false
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

func ptr[T any](v T) *T { return &v }
