// Package apivalidation restates the API server's validation of ResourceSlice content
// (k8s.io/kubernetes/pkg/apis/resource/validation, v1.37), which cannot be imported as a library.
// The node plugin checks each device with it before publishing, because the API server rejects a
// whole slice for one bad device; the template format checks decoded templates with it. The
// rules for the fields every k8s.io/api release the template reader supports has are stated
// once, in the reader module's apirules;
// this package adds the rules of the fields only this module's k8s.io/api has and the per-slice
// rules. The e2e suites show that what passes here is accepted by a real API server.
package apivalidation

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/accel-dra/accel-dra/api/template/apirules"
)

// Device checks one device of a ResourceSlice against the API server's rules: apirules.Device,
// then the fields that only this module's k8s.io/api has (counter compatibility groups,
// nodeAllocatableResources).
func Device(dev *resourceapi.Device) error {
	if err := apirules.Device(dev); err != nil {
		return err
	}
	for i, cc := range dev.ConsumesCounters {
		if err := compatibilityGroups(cc.CompatibilityGroups); err != nil {
			return fmt.Errorf("consumesCounters[%d]: %w", i, err)
		}
	}
	for name, r := range dev.NodeAllocatableResources {
		if name != "cpu" && name != "memory" && !strings.HasPrefix(string(name), "hugepages-") {
			return fmt.Errorf("nodeAllocatableResources %q: must be a node allocatable resource name", name)
		}
		if r.Mapping == nil && r.Overhead == nil {
			return fmt.Errorf("nodeAllocatableResources %q: at least one of mapping or overhead must be set", name)
		}
		if m := r.Mapping; m != nil {
			if (m.CapacityKey == nil) != (m.CapacityMultiplier == nil) {
				return fmt.Errorf("nodeAllocatableResources %q: capacityKey and capacityMultiplier go together", name)
			}
			if m.CapacityKey != nil {
				if _, ok := dev.Capacity[*m.CapacityKey]; !ok {
					return fmt.Errorf("nodeAllocatableResources %q: capacity %q not found", name, *m.CapacityKey)
				}
				if m.CapacityMultiplier.Sign() <= 0 {
					return fmt.Errorf("nodeAllocatableResources %q: capacityMultiplier must be positive", name)
				}
			}
			if m.DeviceMultiplier != nil && m.DeviceMultiplier.Sign() <= 0 {
				return fmt.Errorf("nodeAllocatableResources %q: deviceMultiplier must be positive", name)
			}
		}
		if o := r.Overhead; o != nil {
			if o.PerPod == nil && o.PerContainer == nil {
				return fmt.Errorf("nodeAllocatableResources %q: at least one of perPod or perContainer must be set", name)
			}
			if o.PerPod != nil && o.PerPod.Sign() < 0 || o.PerContainer != nil && o.PerContainer.Sign() < 0 {
				return fmt.Errorf("nodeAllocatableResources %q: overhead must be non-negative", name)
			}
		}
	}
	return nil
}

func compatibilityGroups(groups []string) error {
	if len(groups) > resourceapi.DeviceCompatibilityGroupsMaxSize {
		return fmt.Errorf("%d compatibilityGroups, at most %d allowed", len(groups), resourceapi.DeviceCompatibilityGroupsMaxSize)
	}
	for i, g := range groups {
		if err := apirules.DNSLabel(g); err != nil {
			return fmt.Errorf("compatibilityGroups[%d]: %w", i, err)
		}
		if slices.Contains(groups[:i], g) {
			return fmt.Errorf("compatibilityGroups[%d]: %q listed twice", i, g)
		}
	}
	return nil
}

// Attribute checks one attribute and returns how many values it counts for (apirules.Attribute).
func Attribute(a resourceapi.DeviceAttribute) (int, error) { return apirules.Attribute(a) }

// DNSLabel checks a DNS label: device, counter set and counter names (apirules.DNSLabel).
func DNSLabel(s string) error { return apirules.DNSLabel(s) }

// SkipNodeOperations checks a slice's skipNodeOperations.
func SkipNodeOperations(ops []resourceapi.SkipNodeOperation) error {
	for i, op := range ops {
		switch op {
		case resourceapi.SkipNodeOperationNodePrepareResources, resourceapi.SkipNodeOperationNodeUnprepareResources, resourceapi.SkipNodeOperationAll:
		default:
			return fmt.Errorf("%q not supported", op)
		}
		if slices.Contains(ops[:i], op) {
			return fmt.Errorf("%q listed twice", op)
		}
	}
	if slices.Contains(ops, resourceapi.SkipNodeOperationNodePrepareResources) &&
		!slices.Contains(ops, resourceapi.SkipNodeOperationNodeUnprepareResources) &&
		!slices.Contains(ops, resourceapi.SkipNodeOperationAll) {
		return errors.New("NodePrepareResources cannot be skipped unless NodeUnprepareResources is also skipped")
	}
	return nil
}

// ResourceSlice checks a ResourceSlice's spec against the API server's rules for creating one:
// the per-slice rules (driver, pool, node selection, device and counter-set counts, the 64-device
// limit for slices whose devices have taints, consume counters or have list attributes, sharedCounters and devices
// never in one slice, partitionTypeAttribute) and Device for each device. Object metadata is
// not checked. The e2e test e2e/apivalidation compares its verdict with a real API server's.
func ResourceSlice(spec *resourceapi.ResourceSliceSpec) error {
	if err := apirules.DriverName(spec.Driver); err != nil {
		return fmt.Errorf("driver: %w", err)
	}
	if spec.Pool.Name == "" {
		return errors.New("pool.name: required")
	}
	if err := apirules.PoolName(spec.Pool.Name); err != nil {
		return fmt.Errorf("pool.name: %w", err)
	}
	if spec.Pool.ResourceSliceCount <= 0 {
		return errors.New("pool.resourceSliceCount: must be greater than zero")
	}
	if spec.Pool.Generation < 0 {
		return errors.New("pool.generation: must not be negative")
	}
	if err := nodeSelection(spec); err != nil {
		return err
	}
	// Empty lists and absent ones are the same on the wire (omitempty).
	if len(spec.SharedCounters) > 0 && len(spec.Devices) > 0 {
		return errors.New("only one of sharedCounters or devices is allowed in a slice")
	}
	maxDevices := resourceapi.ResourceSliceMaxDevices
	advanced := false
	for i := range spec.Devices {
		advanced = advanced || apirules.LowersSliceLimit(&spec.Devices[i])
	}
	if advanced {
		maxDevices = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	}
	if len(spec.Devices) > maxDevices {
		return fmt.Errorf("%d devices, at most %d allowed (64 if a device has taints, consumes counters or has list attributes)", len(spec.Devices), maxDevices)
	}
	perDevice := spec.PerDeviceNodeSelection != nil && *spec.PerDeviceNodeSelection
	names := make(map[string]bool, len(spec.Devices))
	for i := range spec.Devices {
		d := &spec.Devices[i]
		if names[d.Name] {
			return fmt.Errorf("devices[%d]: duplicate device name %q", i, d.Name)
		}
		names[d.Name] = true
		if err := Device(d); err != nil {
			return fmt.Errorf("devices[%d]: %w", i, err)
		}
		if err := deviceNodeSelection(d, perDevice); err != nil {
			return fmt.Errorf("devices[%d]: %w", i, err)
		}
	}
	if len(spec.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
		return fmt.Errorf("%d sharedCounters, at most %d allowed", len(spec.SharedCounters), resourceapi.ResourceSliceMaxCounterSets)
	}
	sets := map[string]bool{}
	for i, cs := range spec.SharedCounters {
		if err := apirules.CounterSet(cs); err != nil {
			return fmt.Errorf("sharedCounters[%d]: %w", i, err)
		}
		if sets[cs.Name] {
			return fmt.Errorf("sharedCounters[%d]: duplicate counter set %q", i, cs.Name)
		}
		sets[cs.Name] = true
	}
	if spec.PartitionTypeAttribute != nil {
		if err := partitionTypeAttribute(spec); err != nil {
			return fmt.Errorf("partitionTypeAttribute: %w", err)
		}
	}
	if err := SkipNodeOperations(spec.SkipNodeOperations); err != nil {
		return fmt.Errorf("skipNodeOperations: %w", err)
	}
	return nil
}

func nodeSelection(spec *resourceapi.ResourceSliceSpec) error {
	set := 0
	if spec.NodeName != nil {
		if *spec.NodeName == "" {
			return errors.New("nodeName: must be either unset or set to a non-empty string")
		}
		if msgs := validation.IsDNS1123Subdomain(*spec.NodeName); len(msgs) > 0 {
			return fmt.Errorf("nodeName %q: %s", *spec.NodeName, strings.Join(msgs, "; "))
		}
		set++
	}
	if spec.NodeSelector != nil {
		if len(spec.NodeSelector.NodeSelectorTerms) != 1 {
			return errors.New("nodeSelector: must have exactly one node selector term")
		}
		set++
	}
	for _, b := range []*bool{spec.AllNodes, spec.PerDeviceNodeSelection} {
		if b != nil {
			if !*b {
				return errors.New("allNodes and perDeviceNodeSelection must be either unset or true")
			}
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required, %d are set", set)
	}
	return nil
}

func deviceNodeSelection(d *resourceapi.Device, perDevice bool) error {
	set := 0
	if d.NodeName != nil {
		if *d.NodeName == "" {
			return errors.New("nodeName: must not be empty")
		}
		set++
	}
	if d.NodeSelector != nil {
		set++
	}
	if d.AllNodes != nil {
		if !*d.AllNodes {
			return errors.New("allNodes: must be either unset or true")
		}
		set++
	}
	switch {
	case !perDevice && set > 0:
		return errors.New("nodeName, nodeSelector and allNodes can only be set if the slice has perDeviceNodeSelection")
	case perDevice && set != 1:
		return errors.New("exactly one of nodeName, nodeSelector and allNodes is required with perDeviceNodeSelection")
	}
	return nil
}

func partitionTypeAttribute(spec *resourceapi.ResourceSliceSpec) error {
	name := string(*spec.PartitionTypeAttribute)
	consumes := false
	for _, d := range spec.Devices {
		if len(d.ConsumesCounters) > 0 {
			consumes = true
		}
	}
	if !consumes {
		return errors.New("may only be set on a slice which declares devices that consume counters")
	}
	if err := apirules.FullyQualifiedName(name); err != nil {
		return err
	}
	bare, _ := strings.CutPrefix(name, spec.Driver+"/")
	for _, d := range spec.Devices {
		if len(d.ConsumesCounters) == 0 {
			continue
		}
		a, ok := d.Attributes[resourceapi.QualifiedName(name)]
		if !ok {
			a, ok = d.Attributes[resourceapi.QualifiedName(bare)]
		}
		if !ok || a.StringValue == nil {
			return fmt.Errorf("device %q consumes counters but has no string attribute %q", d.Name, name)
		}
	}
	return nil
}
