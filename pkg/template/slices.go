package template

import (
	"github.com/accel-dra/accel-dra/pkg/apivalidation"

	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// nodeSuffixLength is the length of "-" (or "+") and eight hex digits that ResourceSlices
// appends to a placeholder.
const nodeSuffixLength = 9

// ResourceSlices returns the ResourceSlices of a template node named nodeName: for each driver
// entry one pool named nodeName plus its PoolSuffix, generation 1, its shared counters in slices
// of their own (at most 8 counter sets each) followed by its devices (at most 128 per slice, 64
// in a slice where a device has taints, consumes counters or has a list attribute). Slices are
// named "<nodeName>-<driver>-<i>", i counting the driver's slices from 0.
//
// The values of identity attributes are made unique to the node: a string placeholder p
// becomes "p-<h>" and a version placeholder "p+<h>", h being eight hex digits of the SHA-256 of
// nodeName. Within the node the mapping is one to one, so devices that shared a value share one.
// Integer placeholders are kept.
func (t *Template) ResourceSlices(nodeName string) ([]*resourceapi.ResourceSlice, error) {
	if msgs := validation.IsDNS1123Subdomain(nodeName); len(msgs) > 0 {
		return nil, fmt.Errorf("node name %q: %s", nodeName, strings.Join(msgs, "; "))
	}
	c := t.deepCopy()
	c.normalize()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid node group template: %w", err)
	}
	identity := map[string]bool{}
	for _, fq := range c.IdentityAttributes {
		identity[string(fq)] = true
	}
	sum := sha256.Sum256([]byte(nodeName))
	nodeHash := hex.EncodeToString(sum[:4])

	var out []*resourceapi.ResourceSlice
	sliceIndex := map[string]int{}
	for i := range c.Drivers {
		d := &c.Drivers[i]
		pool := nodeName + d.PoolSuffix
		if err := apivalidation.PoolName(pool); err != nil {
			return nil, fmt.Errorf("driver %s: %w", d.Name, err)
		}
		var specs []resourceapi.ResourceSliceSpec
		for start := 0; start < len(d.SharedCounters); start += resourceapi.ResourceSliceMaxCounterSets {
			end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(d.SharedCounters))
			specs = append(specs, resourceapi.ResourceSliceSpec{SharedCounters: d.SharedCounters[start:end:end]})
		}
		for j := range d.Devices {
			materialize(d.Name, &d.Devices[j], identity, nodeHash)
		}
		for _, chunk := range splitDevices(d.Devices) {
			spec := resourceapi.ResourceSliceSpec{Devices: chunk, SkipNodeOperations: slices.Clone(d.SkipNodeOperations)}
			if d.PartitionTypeAttribute != nil && usesCounters(chunk) {
				spec.PartitionTypeAttribute = new(*d.PartitionTypeAttribute)
			}
			specs = append(specs, spec)
		}
		if len(specs) == 0 {
			// An empty pool still tells the scheduler that the driver runs on the node.
			specs = append(specs, resourceapi.ResourceSliceSpec{})
		}
		for _, spec := range specs {
			spec.Driver = d.Name
			spec.NodeName = new(nodeName)
			spec.Pool = resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: int64(len(specs))}
			out = append(out, &resourceapi.ResourceSlice{
				TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
				ObjectMeta: metav1.ObjectMeta{Name: sliceName(nodeName, d.Name, sliceIndex[d.Name])},
				Spec:       spec,
			})
			sliceIndex[d.Name]++
		}
	}
	return out, nil
}

// splitDevices cuts sorted devices into slices within the API's per-slice limits.
func splitDevices(devices []resourceapi.Device) [][]resourceapi.Device {
	var chunks [][]resourceapi.Device
	start, advanced := 0, false
	for i := range devices {
		adv := advanced || isAdvanced(&devices[i])
		limit := resourceapi.ResourceSliceMaxDevices
		if adv {
			limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
		if i-start+1 > limit {
			chunks = append(chunks, devices[start:i:i])
			start, adv = i, isAdvanced(&devices[i])
		}
		advanced = adv
	}
	if start < len(devices) {
		chunks = append(chunks, devices[start:])
	}
	return chunks
}

// isAdvanced reports whether a device lowers the slice's device limit to 64.
func isAdvanced(d *resourceapi.Device) bool {
	if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
		return true
	}
	for _, a := range d.Attributes {
		if a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil {
			return true
		}
	}
	return false
}

func usesCounters(devices []resourceapi.Device) bool {
	for i := range devices {
		if len(devices[i].ConsumesCounters) > 0 {
			return true
		}
	}
	return false
}

// materialize makes the identity attribute values of a device specific to the node.
func materialize(driver string, d *resourceapi.Device, identity map[string]bool, nodeHash string) {
	for name, a := range d.Attributes {
		if !identity[qualify(driver, name)] {
			continue
		}
		str := func(v string) string { return v + "-" + nodeHash }
		ver := func(v string) string { return v + "+" + nodeHash }
		switch {
		case a.StringValue != nil:
			a.StringValue = new(str(*a.StringValue))
		case a.VersionValue != nil:
			a.VersionValue = new(ver(*a.VersionValue))
		case a.StringValues != nil:
			a.StringValues = mapSlice(a.StringValues, str)
		case a.VersionValues != nil:
			a.VersionValues = mapSlice(a.VersionValues, ver)
		}
		d.Attributes[name] = a
	}
}

// sliceName returns "<nodeName>-<driver>-<i>", shortened with a hash when it would be longer
// than an object name may be.
func sliceName(nodeName, driver string, i int) string {
	suffix := "-" + strconv.Itoa(i)
	name := strings.ToLower(nodeName + "-" + driver)
	if len(name)+len(suffix) <= validation.DNS1123SubdomainMaxLength {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	hash := "-" + hex.EncodeToString(sum[:4])
	keep := validation.DNS1123SubdomainMaxLength - len(suffix) - len(hash)
	return strings.TrimRight(name[:keep], "-.") + hash + suffix
}
