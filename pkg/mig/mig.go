// Package mig is the dynamic-MIG model: it turns the GPUs in MIG mode of an inventory into
// partitionable devices with shared counters, so that the scheduler hands out only MIG
// partitions that NVML can create side by side.
//
// Per GPU in MIG mode there is one counter set, named after the GPU ("gpu-0-mig"), with a
// counter per capacity dimension (multiprocessors, copy-engines, decoders, encoders,
// jpeg-engines, ofa-engines, memory) and one per memory slice (memory-slice-0 ... -7, value 1).
// Every profile × placement NVML offers is a device ("gpu-0-mig-1g5gb-3") that consumes its
// profile's engines and memory and the memory slices of its placement; the whole GPU is a
// device ("gpu-0") that consumes every counter, so it is given out only when no partition is,
// and no partition while it is. Two partitions whose placements share a memory slice can never
// be allocated together; the unit tests check, for every mock MIG profile, that the sets of
// partitions the counters allow are exactly the sets NVML accepts.
package mig

import (
	"fmt"
	"maps"
	"slices"

	"github.com/accel-dra/accel-dra/pkg/device"
	kslices "github.com/accel-dra/accel-dra/pkg/slices"
)

// CounterSetName is the name of the counter set of a GPU.
func CounterSetName(gpu string) string { return gpu + "-mig" }

// Counters is the counter set of a GPU in MIG mode: the full-GPU profile's engines, the GPU's
// memory, and one counter per memory slice.
func Counters(p *device.MIGParent) device.CounterSet {
	full := Full(p)
	c := map[string]int64{
		kslices.CounterMultiprocessors: int64(full.Multiprocessors),
		kslices.CounterCopyEngines:     int64(full.CopyEngines),
		kslices.CounterDecoders:        int64(full.Decoders),
		kslices.CounterEncoders:        int64(full.Encoders),
		kslices.CounterJPEGEngines:     int64(full.JPEGEngines),
		kslices.CounterOFAEngines:      int64(full.OFAEngines),
		kslices.CounterMemory:          max(p.GPU.MemoryBytes, full.MemoryBytes),
	}
	for i := range p.MemorySlices {
		c[kslices.MemorySliceCounter(i)] = 1
	}
	return device.CounterSet{Name: CounterSetName(p.GPU.Name), Counters: c}
}

// Full is the profile that spans the whole GPU: the most compute slices, then the most memory.
func Full(p *device.MIGParent) device.MIGProfile {
	var best device.MIGProfile
	for _, pr := range p.Profiles {
		if pr.SliceCount > best.SliceCount || pr.SliceCount == best.SliceCount && pr.MemoryBytes > best.MemoryBytes {
			best = pr
		}
	}
	return best
}

// Consumption is what a partition of profile pr at placement pl uses of its GPU's counters:
// its non-zero engines, its memory and its memory slices.
func Consumption(gpu string, pr device.MIGProfile, pl device.MIGPlacement) device.CounterConsumption {
	c := map[string]int64{kslices.CounterMemory: pr.MemoryBytes}
	for name, v := range map[string]int{
		kslices.CounterMultiprocessors: pr.Multiprocessors,
		kslices.CounterCopyEngines:     pr.CopyEngines,
		kslices.CounterDecoders:        pr.Decoders,
		kslices.CounterEncoders:        pr.Encoders,
		kslices.CounterJPEGEngines:     pr.JPEGEngines,
		kslices.CounterOFAEngines:      pr.OFAEngines,
	} {
		if v > 0 {
			c[name] = int64(v)
		}
	}
	for i := pl.Start; i < pl.Start+pl.Size; i++ {
		c[kslices.MemorySliceCounter(i)] = 1
	}
	return device.CounterConsumption{CounterSet: CounterSetName(gpu), Counters: c}
}

// Dynamic returns the inventory with dynamic MIG applied: the static MIG devices of GPUs in
// MIG mode are replaced by each GPU's full device and its partitions, and the counter sets are
// added. inv is not changed. A GPU whose profile table makes a counter set the API would refuse
// (more than 32 counters) is an error naming it.
func Dynamic(inv *device.Inventory) (*device.Inventory, error) {
	out := *inv
	out.Devices = nil
	parents := map[string]bool{}
	for _, p := range inv.MIGParents {
		parents[p.GPU.Name] = true
	}
	for _, d := range inv.Devices {
		if d.MIG != nil && parents[d.MIG.Parent] {
			continue
		}
		out.Devices = append(out.Devices, d)
	}
	out.CounterSets = slices.Clone(inv.CounterSets)
	for i := range inv.MIGParents {
		p := &inv.MIGParents[i]
		set := Counters(p)
		if n := len(set.Counters); n > 32 {
			return nil, fmt.Errorf("%s: %d MIG counters (7 dimensions and %d memory slices), the API allows 32", p.GPU.Name, n, p.MemorySlices)
		}
		out.CounterSets = append(out.CounterSets, set)
		whole := p.GPU
		whole.Nodes = slices.Clone(p.GPU.Nodes)
		whole.Consumes = []device.CounterConsumption{{CounterSet: set.Name, Counters: maps.Clone(set.Counters)}}
		out.Devices = append(out.Devices, whole)
		for _, pr := range p.Profiles {
			for _, pl := range pr.Placements {
				d := p.GPU
				d.Name = device.MIGName(p.GPU.Name, pr.Name, pl.Start)
				d.UUID = ""
				d.MemoryBytes = pr.MemoryBytes
				d.Nodes = slices.Clone(p.GPU.Nodes)
				d.MIG = &device.MIG{Parent: p.GPU.Name, ParentUUID: p.GPU.UUID, Profile: pr, Placement: pl, Dynamic: true}
				d.Consumes = []device.CounterConsumption{Consumption(p.GPU.Name, pr, pl)}
				out.Devices = append(out.Devices, d)
			}
		}
	}
	device.Sort(out.Devices)
	return &out, nil
}
