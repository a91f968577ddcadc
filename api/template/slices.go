package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"

	"github.com/accel-dra/accel-dra/api/template/apirules"
)

// nodeSuffixLength is the length of "-" (or "+") and eight hex digits that ResourceSlices
// appends to a placeholder.
const nodeSuffixLength = 9

// ResourceSlices returns the ResourceSlices of a template node named nodeName: for each driver
// entry one pool named nodeName plus its PoolSuffix, generation 1, its shared counters in slices
// of their own (at most 8 counter sets each) followed by its devices (at most 128 per slice, 64
// in a slice where a device has taints, consumes counters or has a list attribute). Slices are
// named "<nodeName>-<driver>-<i>", i counting all slices of the driver, over its pools in
// document order, from 0.
//
// The values of identity attributes are made unique to the node: a string placeholder p
// becomes "p-<h>" and a version placeholder "p+<h>", h being eight hex digits of the SHA-256 of
// nodeName. Within the node the mapping is one to one, so devices that shared a value share one.
// Integer placeholders are kept.
func (t *Template) ResourceSlices(nodeName string) ([]*resourceapi.ResourceSlice, error) {
	return t.resourceSlices(nodeName, true)
}

// ResourceSlicesVerbatim is ResourceSlices without making identity attribute values specific
// to the node: every value is the template's, as for a copy of a real node's slices. It is what
// the publisher writes into the Cluster Autoscaler's own key, whose reader rewrites no values.
func (t *Template) ResourceSlicesVerbatim(nodeName string) ([]*resourceapi.ResourceSlice, error) {
	return t.resourceSlices(nodeName, false)
}

func (t *Template) resourceSlices(nodeName string, perNode bool) ([]*resourceapi.ResourceSlice, error) {
	if msgs := validation.IsDNS1123Subdomain(nodeName); len(msgs) > 0 {
		return nil, fmt.Errorf("node name %q: %s", nodeName, strings.Join(msgs, "; "))
	}
	c := t.DeepCopy()
	c.Normalize()
	if err := c.Validate(); err != nil {
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
		if err := apirules.PoolName(pool); err != nil {
			return nil, fmt.Errorf("driver %s: %w", d.Name, err)
		}
		type part struct {
			spec   resourceapi.ResourceSliceSpec
			extras map[string]any // spec fields that older k8s.io/api releases lack
		}
		var parts []part
		for start := 0; start < len(d.SharedCounters); start += resourceapi.ResourceSliceMaxCounterSets {
			end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(d.SharedCounters))
			parts = append(parts, part{spec: resourceapi.ResourceSliceSpec{SharedCounters: d.SharedCounters[start:end:end]}})
		}
		for j := range d.Devices {
			if perNode {
				materialize(d.Name, &d.Devices[j], identity, nodeHash)
			}
		}
		for _, chunk := range splitDevices(d.Devices) {
			p := part{spec: resourceapi.ResourceSliceSpec{Devices: chunk}, extras: map[string]any{}}
			if len(d.SkipNodeOperations) > 0 {
				p.extras["skipNodeOperations"] = d.SkipNodeOperations
			}
			if d.PartitionTypeAttribute != nil && usesCounters(chunk) {
				p.extras["partitionTypeAttribute"] = *d.PartitionTypeAttribute
			}
			parts = append(parts, p)
		}
		if len(parts) == 0 {
			// An empty pool still tells the scheduler that the driver runs on the node.
			parts = append(parts, part{})
		}
		for _, p := range parts {
			p.spec.Driver = d.Name
			p.spec.NodeName = new(nodeName)
			p.spec.Pool = resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: int64(len(parts))}
			s := &resourceapi.ResourceSlice{
				TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
				ObjectMeta: metav1.ObjectMeta{Name: sliceName(nodeName, d.Name, sliceIndex[d.Name])},
				Spec:       p.spec,
			}
			if len(p.extras) > 0 {
				var err error
				if s, err = withSpecFields(s, p.extras); err != nil {
					return nil, fmt.Errorf("driver %s: %w", d.Name, err)
				}
			}
			out = append(out, s)
			sliceIndex[d.Name]++
		}
	}
	return out, nil
}

// withSpecFields sets spec fields by their JSON names. It is how this package sets fields that
// only newer k8s.io/api releases have without naming them in Go, so that it compiles against
// older ones; with an older API the field is refused by name.
func withSpecFields(s *resourceapi.ResourceSlice, fields map[string]any) (*resourceapi.ResourceSlice, error) {
	doc, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	spec, _ := obj["spec"].(map[string]any)
	for k, v := range fields {
		spec[k] = v
	}
	if doc, err = json.Marshal(obj); err != nil {
		return nil, err
	}
	out := &resourceapi.ResourceSlice{}
	strict, err := kjson.UnmarshalStrict(doc, out, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("this reader's k8s.io/api cannot express the template: %w", errors.Join(strict...))
	}
	return out, nil
}

// specFieldSupported reports whether the k8s.io/api this package is built with has a
// ResourceSlice spec field of that JSON name.
var specFieldSupported = sync.OnceValue(func() map[string]bool {
	supported := map[string]bool{}
	for _, probe := range []struct{ field, value string }{
		{"partitionTypeAttribute", `"example.com/type"`},
		{"skipNodeOperations", `["All"]`},
	} {
		var spec resourceapi.ResourceSliceSpec
		supported[probe.field] = strictOK([]byte(`{"`+probe.field+`":`+probe.value+`}`), &spec)
	}
	return supported
})

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
	if apirules.LowersSliceLimit(d) {
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
		if !identity[Qualify(driver, name)] {
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

func mapSlice[T any](in []T, f func(T) T) []T {
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// Qualify returns the fully qualified name of an attribute of a device of the driver: a name
// without a domain is in the driver's domain.
func Qualify(driver string, name resourceapi.QualifiedName) string {
	if strings.Contains(string(name), "/") {
		return string(name)
	}
	return driver + "/" + string(name)
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

// strictOK reports whether doc decodes into v without unknown fields.
func strictOK(doc []byte, v any) bool {
	strict, err := kjson.UnmarshalStrict(doc, v, kjson.DisallowUnknownFields)
	return err == nil && len(strict) == 0
}
