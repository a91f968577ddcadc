package slices

import (
	"maps"
	stdslices "slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// MIG attributes and capacities (docs/mig.md). A MIG device also has the parent GPU's
// productName, index, architecture, versions, PCI and NUMA attributes, and type "mig".
const (
	TypeMIG = "mig"
	// TypeMIGParent is the type of a GPU in MIG mode published whole beside its partitions
	// (dynamic MIG): CUDA sees no device on a GPU in MIG mode without a MIG instance, so a claim
	// for a GPU (type "gpu", the DeviceClass's selector and users' own) must never get it; a
	// claim that manages or watches the GPU, or keeps it free of partitions, asks for this type.
	TypeMIGParent                                      = "mig-parent"
	AttrProfile              resourceapi.QualifiedName = "profile"
	AttrParentUUID           resourceapi.QualifiedName = "parentUUID"
	AttrPlacementStart       resourceapi.QualifiedName = "placementStart"
	CapacityMultiprocessors  resourceapi.QualifiedName = "multiprocessors"
	CapacityCopyEngines      resourceapi.QualifiedName = "copyEngines"
	CapacityDecoders         resourceapi.QualifiedName = "decoders"
	CapacityEncoders         resourceapi.QualifiedName = "encoders"
	CapacityJPEGEngines      resourceapi.QualifiedName = "jpegEngines"
	CapacityOFAEngines       resourceapi.QualifiedName = "ofaEngines"
	CounterMemory                                      = "memory"
	CounterMultiprocessors                             = "multiprocessors"
	CounterCopyEngines                                 = "copy-engines"
	CounterDecoders                                    = "decoders"
	CounterEncoders                                    = "encoders"
	CounterJPEGEngines                                 = "jpeg-engines"
	CounterOFAEngines                                  = "ofa-engines"
	counterMemorySlicePrefix                           = "memory-slice-"
)

// addMIG gives a MIG device its MIG attributes, capacities and counter consumption. A dynamic
// MIG device has no UUID until it is prepared, so it is published without one.
func addMIG(d *device.Device, out *resourceapi.Device) {
	if d.UUID == "" {
		delete(out.Attributes, AttrUUID)
	}
	if len(d.Consumes) > 0 {
		for _, c := range d.Consumes {
			out.ConsumesCounters = append(out.ConsumesCounters, resourceapi.DeviceCounterConsumption{CounterSet: c.CounterSet, Counters: apiCounters(c.Counters)})
		}
	}
	m := d.MIG
	if m == nil {
		return
	}
	out.Attributes[AttrType] = str(TypeMIG)
	out.Attributes[AttrProfile] = str(m.Profile.Name)
	out.Attributes[AttrParentUUID] = str(m.ParentUUID)
	out.Attributes[AttrPlacementStart] = resourceapi.DeviceAttribute{IntValue: ptr(int64(m.Placement.Start))}
	for name, v := range map[resourceapi.QualifiedName]int{
		CapacityMultiprocessors: m.Profile.Multiprocessors,
		CapacityCopyEngines:     m.Profile.CopyEngines,
		CapacityDecoders:        m.Profile.Decoders,
		CapacityEncoders:        m.Profile.Encoders,
		CapacityJPEGEngines:     m.Profile.JPEGEngines,
		CapacityOFAEngines:      m.Profile.OFAEngines,
	} {
		out.Capacity[name] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(v), resource.DecimalSI)}
	}
}

// MemorySliceCounter is the counter of memory slice i of a MIG-capable GPU.
func MemorySliceCounter(i int) string { return counterMemorySlicePrefix + strconv.Itoa(i) }

func apiCounters(c map[string]int64) map[string]resourceapi.Counter {
	out := make(map[string]resourceapi.Counter, len(c))
	for name, v := range c {
		format := resource.DecimalSI
		if name == CounterMemory {
			format = resource.BinarySI
		}
		out[name] = resourceapi.Counter{Value: *resource.NewQuantity(v, format)}
	}
	return out
}

// split puts devices and counter sets into slices under the 1.37 rules: devices without
// counters up to 128 a slice, or 64 from a tainted one on (splitPlain); devices that consume counters up to 64 a slice, the
// devices of one counter set (one GPU) kept in one slice where they fit; counter sets in slices
// of their own, up to 8 a slice. The order is the devices' and sets' own, so the split is
// deterministic.
func split(devs []resourceapi.Device, sets []device.CounterSet) []resourceslice.Slice {
	var out []resourceslice.Slice
	var plain, consumers []resourceapi.Device
	for _, d := range devs {
		if len(d.ConsumesCounters) > 0 {
			consumers = append(consumers, d)
		} else {
			plain = append(plain, d)
		}
	}
	// Devices that consume no counters may still carry taints, which lower their slice's limit.
	out = append(out, splitPlain(plain)...)
	// Groups of consecutive devices on the same counter set.
	var groups [][]resourceapi.Device
	for _, d := range consumers {
		n := len(groups)
		if n > 0 && groups[n-1][0].ConsumesCounters[0].CounterSet == d.ConsumesCounters[0].CounterSet {
			groups[n-1] = append(groups[n-1], d)
			continue
		}
		groups = append(groups, []resourceapi.Device{d})
	}
	const maxConsumers = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	var cur []resourceapi.Device
	flush := func() {
		if len(cur) > 0 {
			out = append(out, resourceslice.Slice{Devices: cur})
			cur = nil
		}
	}
	for _, g := range groups {
		if len(cur)+len(g) > maxConsumers {
			flush()
		}
		for len(g) > maxConsumers {
			out = append(out, resourceslice.Slice{Devices: g[:maxConsumers]})
			g = g[maxConsumers:]
		}
		cur = append(cur, g...)
	}
	flush()
	for start := 0; start < len(sets); start += resourceapi.ResourceSliceMaxCounterSets {
		end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(sets))
		var cs []resourceapi.CounterSet
		for _, s := range sets[start:end] {
			cs = append(cs, resourceapi.CounterSet{Name: s.Name, Counters: apiCounters(s.Counters)})
		}
		out = append(out, resourceslice.Slice{SharedCounters: cs})
	}
	return out
}

// sortedSets returns the counter sets sorted by name.
func sortedSets(sets []device.CounterSet) []device.CounterSet {
	out := stdslices.Clone(sets)
	stdslices.SortFunc(out, func(a, b device.CounterSet) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	for i := range out {
		out[i].Counters = maps.Clone(out[i].Counters)
	}
	return out
}
