// Package serverfeatures finds what kube-apiserver dropped from the ResourceSlices the plugin
// published. The server drops, without an error, every field whose feature gate is off
// (dropDisabledFields in pkg/registry/resource/resourceslice/strategy.go, v1.37.1), and the
// scheduler then allocates from slices that no longer say what the devices are: a MIG partition
// without its counters is allocatable beside the whole GPU, a GPU shared by consumable capacity
// becomes one that a single claim takes, a lost GPU without its taint keeps getting pods. The
// comparison names, for each dropped field, the feature and the gate that would keep it
// (docs/versions.md), so that the plugin can refuse clearly instead of serving wrong slices.
//
// It compares presence, never values: the server fills some values in (a taint's timeAdded),
// and a field it keeps is one whose gate is on.
package serverfeatures

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// Drop is one field the server did not keep.
type Drop struct {
	// Gate is the kube-apiserver feature gate that keeps the field.
	Gate string
	// Feature is the DRA feature in words.
	Feature string
	// Field is the field's path in the ResourceSlice, e.g. spec.devices[].taints.
	Field string
	// Where is the pool and the device or counter set, e.g. node-1/gpu-0.
	Where string
}

// gatedDeviceField is a field of a device that the server keeps only with Gate on. count says
// how many of it a device has; fewer stored than asked for means that the server dropped it.
type gatedDeviceField struct {
	gate, feature, field string
	count                func(d *resourceapi.Device) int
}

// deviceFields follows dropDisabledFields of v1.37.1 field by field.
var deviceFields = []gatedDeviceField{
	{"DRADeviceTaints", "device taints", "spec.devices[].taints",
		func(d *resourceapi.Device) int { return len(d.Taints) }},
	{"DRAPartitionableDevices", "partitionable devices (shared counters)", "spec.devices[].consumesCounters",
		func(d *resourceapi.Device) int { return len(d.ConsumesCounters) }},
	{"DRAPartitionableDevices", "partitionable devices (per-device node selection)", "spec.devices[].nodeName",
		func(d *resourceapi.Device) int { return one(d.NodeName != nil) }},
	{"DRAPartitionableDevices", "partitionable devices (per-device node selection)", "spec.devices[].nodeSelector",
		func(d *resourceapi.Device) int { return one(d.NodeSelector != nil) }},
	{"DRAPartitionableDevices", "partitionable devices (per-device node selection)", "spec.devices[].allNodes",
		func(d *resourceapi.Device) int { return one(d.AllNodes != nil) }},
	{"DRADeviceCompatibilityGroups", "counter compatibility groups", "spec.devices[].consumesCounters[].compatibilityGroups",
		func(d *resourceapi.Device) int {
			n := 0
			for _, c := range d.ConsumesCounters {
				n += len(c.CompatibilityGroups)
			}
			return n
		}},
	// The server keeps binding conditions only with DRAResourceClaimDeviceStatus on too (GA and
	// locked on from 1.37); the message names the first gate, docs/versions.md both.
	{"DRADeviceBindingConditions", "device binding conditions", "spec.devices[].bindingConditions",
		func(d *resourceapi.Device) int { return len(d.BindingConditions) }},
	{"DRADeviceBindingConditions", "device binding conditions", "spec.devices[].bindingFailureConditions",
		func(d *resourceapi.Device) int { return len(d.BindingFailureConditions) }},
	{"DRADeviceBindingConditions", "device binding conditions", "spec.devices[].bindsToNode",
		func(d *resourceapi.Device) int { return one(d.BindsToNode != nil) }},
	{"DRAConsumableCapacity", "consumable capacity (shared devices)", "spec.devices[].allowMultipleAllocations",
		func(d *resourceapi.Device) int { return one(d.AllowMultipleAllocations != nil) }},
	{"DRAConsumableCapacity", "consumable capacity (shared devices)", "spec.devices[].capacity[].requestPolicy",
		func(d *resourceapi.Device) int {
			n := 0
			for _, c := range d.Capacity {
				n += one(c.RequestPolicy != nil)
			}
			return n
		}},
	{"DRANodeAllocatableResources", "node-allocatable resources", "spec.devices[].nodeAllocatableResources",
		func(d *resourceapi.Device) int { return len(d.NodeAllocatableResources) }},
	{"DRAListTypeAttributes", "list-type attributes", "spec.devices[].attributes[].{bools,ints,strings,versions}",
		func(d *resourceapi.Device) int {
			n := 0
			for _, a := range d.Attributes {
				n += one(a.BoolValues != nil || a.IntValues != nil || a.StringValues != nil || a.VersionValues != nil)
			}
			return n
		}},
}

// gatedSliceField is deviceFields' counterpart for the fields of a slice.
type gatedSliceField struct {
	gate, feature, field string
	count                func(s *resourceslice.Slice) int
}

var sliceFields = []gatedSliceField{
	{"DRAPartitionableDevices", "partitionable devices (shared counters)", "spec.sharedCounters",
		func(s *resourceslice.Slice) int { return len(s.SharedCounters) }},
	{"DRAPartitionableDevices", "partitionable devices (per-device node selection)", "spec.perDeviceNodeSelection",
		func(s *resourceslice.Slice) int { return one(s.PerDeviceNodeSelection != nil) }},
	{"DRAPartitionableDevicesType", "partition type attribute", "spec.partitionTypeAttribute",
		func(s *resourceslice.Slice) int { return one(s.PartitionTypeAttribute != nil) }},
	{"DRAOptionalNodeOperations", "optional node operations", "spec.skipNodeOperations",
		func(s *resourceslice.Slice) int { return len(s.SkipNodeOperations) }},
}

func one(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Gates lists every gate this package knows a field of, sorted; docs/versions.md covers each.
func Gates() []string {
	var gates []string
	for _, f := range deviceFields {
		gates = append(gates, f.gate)
	}
	for _, f := range sliceFields {
		gates = append(gates, f.gate)
	}
	slices.Sort(gates)
	return slices.Compact(gates)
}

// CompareSlice returns what the server dropped from one slice: desired is what the plugin asked
// for, stored what the server returned. Devices are matched by name; a device missing from
// stored is not a dropped field (the server never drops devices) and is ignored.
func CompareSlice(pool string, desired, stored *resourceslice.Slice) []Drop {
	var drops []Drop
	for _, f := range sliceFields {
		if f.count(desired) > f.count(stored) {
			drops = append(drops, Drop{Gate: f.gate, Feature: f.feature, Field: f.field, Where: pool})
		}
	}
	byName := make(map[string]*resourceapi.Device, len(stored.Devices))
	for i := range stored.Devices {
		byName[stored.Devices[i].Name] = &stored.Devices[i]
	}
	for i := range desired.Devices {
		want := &desired.Devices[i]
		got, ok := byName[want.Name]
		if !ok {
			continue
		}
		var dropped []string
		for _, f := range deviceFields {
			// A field inside one already dropped went with it (compatibility groups with
			// consumesCounters): only the outer field's gate is off.
			if slices.ContainsFunc(dropped, func(outer string) bool { return strings.HasPrefix(f.field, outer+"[]") }) {
				continue
			}
			if f.count(want) > f.count(got) {
				dropped = append(dropped, f.field)
				drops = append(drops, Drop{Gate: f.gate, Feature: f.feature, Field: f.field, Where: pool + "/" + want.Name})
			}
		}
	}
	return drops
}

// FromAPI is the part of a stored ResourceSlice that CompareSlice looks at.
func FromAPI(s *resourceapi.ResourceSlice) *resourceslice.Slice {
	return &resourceslice.Slice{
		Devices:                s.Spec.Devices,
		SharedCounters:         s.Spec.SharedCounters,
		PerDeviceNodeSelection: s.Spec.PerDeviceNodeSelection,
		PartitionTypeAttribute: s.Spec.PartitionTypeAttribute,
		SkipNodeOperations:     s.Spec.SkipNodeOperations,
	}
}

// ComparePools returns what the server dropped from the pools the plugin publishes, given the
// ResourceSlices the server holds for the driver on this node. published is false while the
// server does not yet hold every slice of every pool at the pool's current generation (the
// slice controller publishes in the background); drops are then those found so far.
//
// A desired slice with devices is matched with the stored slice that holds its first device; a
// desired slice without devices (a counters slice) with a stored slice without devices of the
// same pool, since the server may have dropped all that told them apart.
func ComparePools(desired map[string]resourceslice.Pool, stored []resourceapi.ResourceSlice) (drops []Drop, published bool) {
	published = true
	for _, name := range slices.Sorted(maps.Keys(desired)) {
		pool := desired[name]
		var current []resourceapi.ResourceSlice
		var generation int64
		for _, s := range stored {
			if s.Spec.Pool.Name != name {
				continue
			}
			switch {
			case s.Spec.Pool.Generation > generation:
				generation, current = s.Spec.Pool.Generation, []resourceapi.ResourceSlice{s}
			case s.Spec.Pool.Generation == generation:
				current = append(current, s)
			}
		}
		if len(current) != len(pool.Slices) {
			published = false
		}
		used := make([]bool, len(current))
		for i := range pool.Slices {
			want := &pool.Slices[i]
			j := -1
			for k := range current {
				if !used[k] && matches(want, &current[k]) {
					j = k
					break
				}
			}
			if j < 0 {
				published = false
				continue
			}
			used[j] = true
			drops = append(drops, CompareSlice(name, want, FromAPI(&current[j]))...)
		}
	}
	return drops, published
}

func matches(want *resourceslice.Slice, got *resourceapi.ResourceSlice) bool {
	if len(want.Devices) == 0 {
		return len(got.Spec.Devices) == 0
	}
	return slices.ContainsFunc(got.Spec.Devices, func(d resourceapi.Device) bool { return d.Name == want.Devices[0].Name })
}

// DroppedError says which features the server dropped, by gate. Its message is what the
// plugin logs, records in its Node's event and answers on /healthz.
type DroppedError struct {
	Drops []Drop
}

// Gates are the gates of the dropped fields, sorted.
func (e *DroppedError) Gates() []string {
	var gates []string
	for _, d := range e.Drops {
		gates = append(gates, d.Gate)
	}
	slices.Sort(gates)
	return slices.Compact(gates)
}

func (e *DroppedError) Error() string {
	type gateDrops struct {
		features, fields []string
		where            string
		n                int
	}
	drops := slices.Clone(e.Drops)
	Sort(drops)
	byGate := map[string]*gateDrops{}
	for _, d := range drops {
		g := byGate[d.Gate]
		if g == nil {
			g = &gateDrops{where: d.Where}
			byGate[d.Gate] = g
		}
		g.n++
		if !slices.Contains(g.features, d.Feature) {
			g.features = append(g.features, d.Feature)
		}
		if !slices.Contains(g.fields, d.Field) {
			g.fields = append(g.fields, d.Field)
		}
	}
	parts := make([]string, 0, len(byGate))
	for _, gate := range slices.Sorted(maps.Keys(byGate)) {
		g := byGate[gate]
		slices.Sort(g.features)
		slices.Sort(g.fields)
		parts = append(parts, fmt.Sprintf("feature gate %s is off: %s dropped (%s, %d time(s), first at %s)",
			gate, strings.Join(g.features, ", "), strings.Join(g.fields, ", "), g.n, g.where))
	}
	return "kube-apiserver drops fields of this plugin's ResourceSlices: " + strings.Join(parts, "; ") +
		"; enable " + strings.Join(e.Gates(), ", ") + " on kube-apiserver (and the scheduler), or turn off the plugin's feature that needs it (docs/versions.md)"
}

// Sort orders drops by gate, place and field, for a deterministic message.
func Sort(drops []Drop) {
	slices.SortFunc(drops, func(a, b Drop) int {
		return cmp.Or(cmp.Compare(a.Gate, b.Gate), cmp.Compare(a.Where, b.Where), cmp.Compare(a.Field, b.Field))
	})
}
