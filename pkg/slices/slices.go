// Package slices turns a node's device inventory into the ResourceSlice content the
// kubeletplugin helper publishes: standard and driver attributes, capacity, validation against
// the API's per-device rules, and a deterministic split into slices.
package slices

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/blang/semver/v4"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/accel-dra/accel-dra/pkg/apivalidation"
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

// Omitted is an attribute left out of a published device because its value cannot be
// represented (a driver version that cannot be made semver): the device is still usable, and a
// selector on that attribute simply does not match it.
type Omitted struct {
	Device    string
	Attribute resourceapi.QualifiedName
	Err       error
}

// Result is what Build produces.
type Result struct {
	Resources resourceslice.DriverResources
	// Published are the names of the devices in Resources, sorted.
	Published []string
	Rejected  []Rejected
	// Omitted are the attributes left out of published devices, in device order.
	Omitted []Omitted
}

// Build converts an inventory into one pool named poolName (the node name, as the kubelet
// plugin helper expects). A device whose attributes break the API's rules is left out and
// reported in Rejected, so one bad device never takes the whole pool down.
func Build(inv *device.Inventory, poolName string, opts ...Option) Result {
	var o buildOptions
	for _, opt := range opts {
		opt(&o)
	}
	devs := append([]device.Device(nil), inv.Devices...)
	device.Sort(devs)

	var res Result
	var apiDevs []resourceapi.Device
	for i := range devs {
		d, omitted, reason, err := ToAPI(&devs[i])
		if err == nil && o.consumableMemory {
			ConsumableMemory(&d)
		}
		if err == nil && o.attributes != nil {
			maps.Copy(d.Attributes, o.attributes(&devs[i]))
		}
		if err == nil {
			err = ValidateDevice(&d)
			reason = "invalid"
		}
		if err != nil {
			res.Rejected = append(res.Rejected, Rejected{Device: devs[i].Name, Reason: reason, Err: err})
			continue
		}
		// Taints are added after validation: the health tracker builds them from known-good
		// parts, and a device must never be left out of the slices for being unhealthy.
		d.Taints = o.taints[d.Name]
		apiDevs = append(apiDevs, d)
		res.Published = append(res.Published, d.Name)
		res.Omitted = append(res.Omitted, omitted...)
	}

	// Counters of devices that are left out stay: a counter nobody consumes is harmless.
	pool := resourceslice.Pool{Slices: split(apiDevs, sortedSets(inv.CounterSets))}
	// An empty pool still gets one empty slice so that the scheduler sees the node's pool as
	// complete rather than unknown.
	if len(pool.Slices) == 0 {
		pool.Slices = []resourceslice.Slice{{}}
	}
	res.Resources = resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{poolName: pool}}
	return res
}

// ToAPI converts one device. A version attribute whose value cannot be made semver is left out
// and returned in omitted; the device is still converted. An error (a PCI bus ID or NUMA node the
// standard helpers refuse) means the device cannot be published; the reason string names the
// failing conversion for metrics.
func ToAPI(d *device.Device) (dev resourceapi.Device, omitted []Omitted, reason string, err error) {
	typ := string(d.Kind)
	if d.MIG == nil && len(d.Consumes) > 0 {
		// A whole GPU that consumes counters is a dynamic-MIG parent, in MIG mode.
		typ = TypeMIGParent
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType:        str(typ),
		AttrUUID:        str(d.UUID),
		AttrProductName: str(d.ProductName),
		AttrIndex:       {IntValue: ptr(int64(d.Index))},
	}
	if d.Architecture != "" {
		attrs[AttrArchitecture] = str(d.Architecture)
	}
	version := func(name resourceapi.QualifiedName, raw string) {
		if raw == "" {
			return
		}
		v, err := NormalizeVersion(raw)
		if err == nil {
			// The API's limit on every attribute value; checked here so that an overlong
			// version costs the attribute, not the device.
			_, err = apivalidation.Attribute(resourceapi.DeviceAttribute{VersionValue: &v})
		}
		if err != nil {
			omitted = append(omitted, Omitted{Device: d.Name, Attribute: name, Err: fmt.Errorf("device %s: %s: %w", d.Name, name, err)})
			return
		}
		attrs[name] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	version(AttrDriverVersion, d.DriverVersion)
	version(AttrCUDAComputeCapability, d.CUDAComputeCapability)
	if d.PCIBusID != "" {
		a, err := deviceattribute.GetPCIBusIDAttribute(d.PCIBusID)
		if err != nil {
			return resourceapi.Device{}, nil, "pci-bus-id", fmt.Errorf("device %s: %w", d.Name, err)
		}
		attrs[a.Name] = a.Value
	}
	if d.PCIeRoot != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = str(d.PCIeRoot)
	}
	if d.NUMANode != nil {
		a, err := deviceattribute.GetNUMANodeAttribute(int(*d.NUMANode), deviceattribute.ScalarAttribute)
		if err != nil {
			return resourceapi.Device{}, nil, "numa-node", fmt.Errorf("device %s: %w", d.Name, err)
		}
		attrs[a.Name] = a.Value
	}
	addTopology(d, attrs)
	dev = resourceapi.Device{
		Name:       d.Name,
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: *resource.NewQuantity(d.MemoryBytes, resource.BinarySI)},
		},
	}
	addMIG(d, &dev)
	return dev, omitted, "", nil
}

// NormalizeVersion makes a driver-reported version semver, as version attributes must be, where
// that can be done without changing how versions compare. The rules (docs/device-attributes.md):
//
//   - Surrounding space is trimmed. The leading numeric dot-separated parts are the version core;
//     they lose leading zeros (NVIDIA's "570.124.06" is 570.124.6) and missing ones become 0
//     ("9.0" is 9.0.0).
//   - Parts after a core of two or three numbers that start with a letter begin a pre-release,
//     and every later part belongs to it: Ascend's "24.1.rc2" is 24.1.0-rc2, "24.1.rc2.1" is
//     24.1.0-rc2.1, "23.0.rc3.b070" is 23.0.0-rc3.b070. Ascend ships 24.1.rc1, rc2, rc3 before
//     24.1.0, which is what semver's pre-release order says. Numeric identifiers in it lose
//     leading zeros.
//   - Numeric parts beyond the third (Ascend hotfixes, "25.0.0.1") become build metadata,
//     25.0.0+1: semver has no fourth number, and build metadata keeps the value visible while
//     comparing equal to 25.0.0, which is closer to the truth than any pre-release would be.
//   - A "-suffix" or "+build" the input already has is kept.
//
// Anything else ("r570", "24.rc2", characters semver does not allow) is an error.
func NormalizeVersion(s string) (string, error) {
	in := strings.TrimSpace(s)
	rest, build, hasBuild := strings.Cut(in, "+")
	core, pre, hasPre := strings.Cut(rest, "-")
	parts := strings.Split(core, ".")
	n := 0
	for n < len(parts) && isNumeric(parts[n]) {
		n++
	}
	if n == 0 {
		return "", fmt.Errorf("%q is not a version: it does not start with a number", s)
	}
	var preIDs, buildIDs []string
	switch {
	case n > 3:
		// Fourth and later numbers, and anything after them, are build metadata.
		buildIDs = parts[3:]
		n = 3
	case n < len(parts):
		if n < 2 || !startsWithLetter(parts[n]) {
			return "", fmt.Errorf("%q is not a version of the form MAJOR.MINOR[.PATCH][.PRERELEASE]: part %q after %d number(s)", s, parts[n], n)
		}
		if hasPre {
			return "", fmt.Errorf("%q has a dotted and a hyphenated pre-release", s)
		}
		preIDs = parts[n:]
	}
	nums := []string{"0", "0", "0"}
	for i := range n {
		v, err := strconv.ParseUint(parts[i], 10, 64)
		if err != nil {
			return "", fmt.Errorf("%q is not a version: part %q: %w", s, parts[i], err)
		}
		nums[i] = strconv.FormatUint(v, 10)
	}
	for i, id := range preIDs {
		if isNumeric(id) {
			v, err := strconv.ParseUint(id, 10, 64)
			if err != nil {
				return "", fmt.Errorf("%q is not a version: part %q: %w", s, id, err)
			}
			preIDs[i] = strconv.FormatUint(v, 10)
		}
	}
	if hasPre {
		preIDs = []string{pre}
	}
	if hasBuild {
		buildIDs = append(buildIDs, build)
	}
	v := strings.Join(nums, ".")
	if len(preIDs) > 0 {
		v += "-" + strings.Join(preIDs, ".")
	}
	if len(buildIDs) > 0 {
		v += "+" + strings.Join(buildIDs, ".")
	}
	if _, err := semver.Parse(v); err != nil {
		return "", fmt.Errorf("%q is not a semantic version (normalised to %q): %w", s, v, err)
	}
	return v, nil
}

func isNumeric(p string) bool {
	if p == "" {
		return false
	}
	for _, r := range p {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func startsWithLetter(p string) bool {
	return p != "" && (p[0] >= 'a' && p[0] <= 'z' || p[0] >= 'A' && p[0] <= 'Z')
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

func ptr[T any](v T) *T { return &v }
