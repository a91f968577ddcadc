// Package mig is the dynamic-MIG model: it turns the GPUs in MIG mode of an inventory into
// partitionable devices with shared counters, so that the scheduler hands out only MIG
// partitions that NVML can create side by side.
//
// Per GPU in MIG mode there is one counter set, named after the GPU ("gpu-0-mig"), with one
// counter per memory slice (memory-slice-0 ... -7, value 1) and one per capacity dimension
// (multiprocessors, copy-engines, decoders, encoders, jpeg-engines, ofa-engines, memory) that
// can bind at all (binding). Every profile × placement NVML offers is a device
// ("gpu-0-mig-1g5gb-3") that consumes the memory slices of its placement and its profile's use
// of those dimensions; the whole GPU is a
// device ("gpu-0") that consumes every counter, so it is given out only when no partition is,
// and no partition while it is. Two partitions whose placements share a memory slice can never
// be allocated together; the unit tests check, for every mock MIG profile, that the sets of
// partitions the counters allow are exactly the sets NVML accepts.
package mig

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/accel-dra/accel-dra/pkg/device"
	kslices "github.com/accel-dra/accel-dra/pkg/slices"
)

// CounterSetName is the name of the counter set of a GPU.
func CounterSetName(gpu string) string { return gpu + "-mig" }

// Counters is the counter set of a GPU in MIG mode: one counter per memory slice, and those of
// the full-GPU profile's engines and the GPU's memory that can bind (binding).
func Counters(p *device.MIGParent) device.CounterSet {
	c := map[string]int64{}
	keep := binding(p)
	for name, v := range capacity(p) {
		if keep[name] {
			c[name] = v
		}
	}
	for i := range p.MemorySlices {
		c[kslices.MemorySliceCounter(i)] = 1
	}
	return device.CounterSet{Name: CounterSetName(p.GPU.Name), Counters: c}
}

// capacity is what the whole GPU has of each dimension counter: the full-GPU profile's
// engines and the GPU's memory.
func capacity(p *device.MIGParent) map[string]int64 {
	full := Full(p)
	c := dimensions(full)
	c[kslices.CounterMemory] = max(p.GPU.MemoryBytes, full.MemoryBytes)
	return c
}

// dimensions is what a partition of profile pr uses of each dimension counter.
func dimensions(pr device.MIGProfile) map[string]int64 {
	return map[string]int64{
		kslices.CounterMemory:          pr.MemoryBytes,
		kslices.CounterMultiprocessors: int64(pr.Multiprocessors),
		kslices.CounterCopyEngines:     int64(pr.CopyEngines),
		kslices.CounterDecoders:        int64(pr.Decoders),
		kslices.CounterEncoders:        int64(pr.Encoders),
		kslices.CounterJPEGEngines:     int64(pr.JPEGEngines),
		kslices.CounterOFAEngines:      int64(pr.OFAEngines),
	}
}

// binding returns the dimension counters of p that some set of partitions could exhaust. The
// memory-slice counters already confine every allocatable set to partitions on pairwise
// disjoint memory slices; a dimension that no such set can use more of than the GPU has never
// refuses an allocation, so publishing it would change nothing the scheduler allows and cost
// it a counter per device on every node it examines (each Filter call converts and checks
// every consumption of the node's devices). On the A100 and H100 tables only the OFA engine
// (and on the A100 the decoders) can bind: it keeps +me profiles and 7g apart. The most a
// dimension can be used is a weighted interval scheduling over the memory slices.
func binding(p *device.MIGParent) map[string]bool {
	limit := capacity(p)
	keep := map[string]bool{}
	for name := range limit {
		best := make([]int64, p.MemorySlices+1)
		for end := 1; end <= p.MemorySlices; end++ {
			best[end] = best[end-1]
			for _, pr := range p.Profiles {
				use := dimensions(pr)[name]
				for _, pl := range pr.Placements {
					if pl.Start+pl.Size == end {
						best[end] = max(best[end], best[pl.Start]+use)
					}
				}
			}
		}
		keep[name] = best[p.MemorySlices] > limit[name]
	}
	return keep
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

// Consumption is what a partition of profile pr at placement pl uses of the counters of its
// GPU p (Counters): its memory slices and its non-zero use of the dimensions that can bind.
func Consumption(p *device.MIGParent, pr device.MIGProfile, pl device.MIGPlacement) device.CounterConsumption {
	c := map[string]int64{}
	keep := binding(p)
	for name, v := range dimensions(pr) {
		if v > 0 && keep[name] {
			c[name] = v
		}
	}
	for i := pl.Start; i < pl.Start+pl.Size; i++ {
		c[kslices.MemorySliceCounter(i)] = 1
	}
	return device.CounterConsumption{CounterSet: CounterSetName(p.GPU.Name), Counters: c}
}

// AllProfiles, as the only entry of a profile choice, publishes every profile a GPU offers.
const AllProfiles = "all"

// profileName is the form of NVIDIA's GPU-instance profile names as pkg/backend/nvml computes
// them: "<slices>g.<memory>gb" and a revision suffix.
var profileName = regexp.MustCompile(`^[1-9][0-9]*g\.[0-9]+gb(\+me|\+me\.all|-me|\+gfx)?$`)

// ValidateProfiles checks a choice of profiles (--mig-profiles): AllProfiles alone, or
// distinct NVIDIA profile names ("1g.10gb", "1g.10gb+me"). Which GPU offers which profile is
// known only once the node is enumerated, so a well-formed name no GPU offers is not an error
// here (Dynamic reports it).
func ValidateProfiles(names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("no MIG profile given: name profiles such as 1g.10gb, or %q", AllProfiles)
	}
	seen := map[string]bool{}
	for _, n := range names {
		switch {
		case n == AllProfiles && len(names) > 1:
			return fmt.Errorf("%q cannot be combined with profile names", AllProfiles)
		case n == AllProfiles:
		case !profileName.MatchString(n):
			return fmt.Errorf("%q is not a MIG profile name (NVIDIA's form: <slices>g.<memory>gb with an optional +me, +me.all, -me or +gfx, e.g. 1g.10gb or 1g.10gb+me)", n)
		case seen[n]:
			return fmt.Errorf("MIG profile %q given twice", n)
		}
		seen[n] = true
	}
	return nil
}

// Option tunes Dynamic.
type Option func(*options)

type options struct {
	// profiles is the choice of profiles to publish; nil means all.
	profiles map[string]bool
}

// WithProfiles publishes only the partitions of the named profiles (ValidateProfiles' form);
// nil, empty or AllProfiles publishes every profile. The GPU's whole device and its counter
// set are published whatever the choice, so a claim for the whole GPU and the counters that
// keep partitions apart are unchanged; a profile left out is simply not offered.
func WithProfiles(names []string) Option {
	return func(o *options) {
		o.profiles = nil
		if len(names) == 0 || len(names) == 1 && names[0] == AllProfiles {
			return
		}
		o.profiles = map[string]bool{}
		for _, n := range names {
			o.profiles[n] = true
		}
	}
}

// Result is what Dynamic did besides the inventory: the chosen profiles that no GPU in MIG
// mode offers (a name of another GPU model, e.g. 1g.5gb on an H100 node), sorted, so that the
// caller can say so.
type Result struct {
	NotOffered []string
}

// Dynamic returns the inventory with dynamic MIG applied: the static MIG devices of GPUs in
// MIG mode are replaced by each GPU's full device and its partitions, and the counter sets are
// added. inv is not changed. A GPU whose profile table makes a counter set the API would refuse
// (more than 32 counters) is an error naming it.
func Dynamic(inv *device.Inventory, opts ...Option) (*device.Inventory, error) {
	out, _, err := DynamicWithResult(inv, opts...)
	return out, err
}

// DynamicWithResult is Dynamic that also returns the Result.
func DynamicWithResult(inv *device.Inventory, opts ...Option) (*device.Inventory, Result, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	offered := map[string]bool{}
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
			return nil, Result{}, fmt.Errorf("%s: %d MIG counters (7 dimensions and %d memory slices), the API allows 32", p.GPU.Name, n, p.MemorySlices)
		}
		out.CounterSets = append(out.CounterSets, set)
		whole := p.GPU
		whole.Nodes = slices.Clone(p.GPU.Nodes)
		whole.Consumes = []device.CounterConsumption{{CounterSet: set.Name, Counters: maps.Clone(set.Counters)}}
		out.Devices = append(out.Devices, whole)
		for _, pr := range p.Profiles {
			offered[pr.Name] = true
			if o.profiles != nil && !o.profiles[pr.Name] {
				continue
			}
			for _, pl := range pr.Placements {
				d := p.GPU
				d.Name = device.MIGName(p.GPU.Name, pr.Name, pl.Start)
				d.UUID = ""
				d.MemoryBytes = pr.MemoryBytes
				// The parent's /dev/nvidiaN, not its DRM nodes, which belong to the whole GPU.
				d.Nodes = device.WithoutDRM(p.GPU.Nodes)
				d.MIG = &device.MIG{Parent: p.GPU.Name, ParentUUID: p.GPU.UUID, Profile: pr, Placement: pl, Dynamic: true}
				d.Consumes = []device.CounterConsumption{Consumption(p, pr, pl)}
				out.Devices = append(out.Devices, d)
			}
		}
	}
	device.Sort(out.Devices)
	var res Result
	if len(inv.MIGParents) > 0 {
		for n := range o.profiles {
			if !offered[n] {
				res.NotOffered = append(res.NotOffered, n)
			}
		}
		slices.Sort(res.NotOffered)
	}
	return &out, res, nil
}

// OfferedProfiles lists the profile names the GPUs in MIG mode of inv offer, sorted and
// joined with ", ", for messages about a profile choice.
func OfferedProfiles(inv *device.Inventory) string {
	seen := map[string]bool{}
	var names []string
	for _, p := range inv.MIGParents {
		for _, pr := range p.Profiles {
			if !seen[pr.Name] {
				seen[pr.Name] = true
				names = append(names, pr.Name)
			}
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
