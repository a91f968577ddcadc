package template

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/api/template/apirules"
)

// Validate checks what a reader relies on: the format's limits; names the template node's
// slices are built from (driver, pool, device and counter names); that each attribute has
// exactly one valid value and identity placeholders can be made node-specific; that consumed
// counters exist in the pool; capacity request policies; taints and binding conditions. The
// API server's rules (k8s.io/kubernetes/pkg/apis/resource/validation) for the fields every
// supported k8s.io/api release has are apirules', which accel-dra's plugin and writer apply
// too. Rules for fields that only newer releases have (for example a device's
// nodeAllocatableResources) are the writer's to check: a reader whose API has such a field
// passes it through to the allocator, one whose API lacks it has refused the document in
// Decode already.
func (t *Template) Validate() error {
	if t.APIVersion != APIVersion {
		return fmt.Errorf("unsupported apiVersion %q, want %q", t.APIVersion, APIVersion)
	}
	if t.Kind != Kind {
		return fmt.Errorf("unsupported kind %q, want %q", t.Kind, Kind)
	}
	if len(t.IdentityAttributes) > MaxIdentityAttributes {
		return fmt.Errorf("identityAttributes: %d entries, at most %d allowed", len(t.IdentityAttributes), MaxIdentityAttributes)
	}
	identity := map[string]bool{}
	for _, fq := range t.IdentityAttributes {
		if err := apirules.FullyQualifiedName(string(fq)); err != nil {
			return fmt.Errorf("identityAttributes %q: %w", fq, err)
		}
		identity[string(fq)] = true
	}
	if len(t.Drivers) > MaxPools {
		return fmt.Errorf("drivers: %d entries, at most %d allowed", len(t.Drivers), MaxPools)
	}
	devices, counterSets := 0, 0
	seen := map[[2]string]bool{}
	for i := range t.Drivers {
		d := &t.Drivers[i]
		devices += len(d.Devices)
		counterSets += len(d.SharedCounters)
		// Checked before the entries are looked at, so that a hostile document costs little.
		if devices > MaxDevices {
			return fmt.Errorf("more than %d devices", MaxDevices)
		}
		if counterSets > MaxCounterSets {
			return fmt.Errorf("more than %d shared counter sets", MaxCounterSets)
		}
		k := [2]string{d.Name, d.PoolSuffix}
		if seen[k] {
			return fmt.Errorf("driver %s pool suffix %q: listed twice", d.Name, d.PoolSuffix)
		}
		seen[k] = true
		if err := d.validate(identity); err != nil {
			return fmt.Errorf("driver %s pool suffix %q: %w", d.Name, d.PoolSuffix, err)
		}
	}
	return nil
}

func (d *Driver) validate(identity map[string]bool) error {
	if err := apirules.DriverName(d.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	// Any valid node name is a DNS subdomain ending in an alphanumeric character; "a" stands
	// for it here, the full pool name is checked again by ResourceSlices.
	if err := apirules.PoolName("a" + d.PoolSuffix); err != nil {
		return fmt.Errorf("poolSuffix: %w", err)
	}
	if len(d.PoolSuffix) > resourceapi.PoolNameMaxLength-1 {
		return fmt.Errorf("poolSuffix: longer than %d characters", resourceapi.PoolNameMaxLength-1)
	}
	if len(d.SkipNodeOperations) > 0 && !specFieldSupported()["skipNodeOperations"] {
		return errors.New("skipNodeOperations: this reader's k8s.io/api has no ResourceSlice spec.skipNodeOperations")
	}
	if err := skipNodeOperations(d.SkipNodeOperations); err != nil {
		return fmt.Errorf("skipNodeOperations: %w", err)
	}

	counters := map[string]map[string]bool{}
	for i, cs := range d.SharedCounters {
		if err := apirules.CounterSet(cs); err != nil {
			return fmt.Errorf("sharedCounters[%d]: %w", i, err)
		}
		if counters[cs.Name] != nil {
			return fmt.Errorf("sharedCounters[%d]: duplicate counter set %q", i, cs.Name)
		}
		counters[cs.Name] = map[string]bool{}
		for name := range cs.Counters {
			counters[cs.Name][name] = true
		}
	}

	names := map[string]bool{}
	consumers := false
	for i := range d.Devices {
		dev := &d.Devices[i]
		if err := validateDevice(d.Name, dev, identity); err != nil {
			return fmt.Errorf("device %q: %w", dev.Name, err)
		}
		if names[dev.Name] {
			return fmt.Errorf("device %q: listed twice", dev.Name)
		}
		names[dev.Name] = true
		for _, cc := range dev.ConsumesCounters {
			set := counters[cc.CounterSet]
			if set == nil {
				return fmt.Errorf("device %q: counter set %q not found", dev.Name, cc.CounterSet)
			}
			for name := range cc.Counters {
				if !set[name] {
					return fmt.Errorf("device %q: counter %q not found in counter set %q", dev.Name, name, cc.CounterSet)
				}
			}
		}
		if len(dev.ConsumesCounters) > 0 {
			consumers = true
			if d.PartitionTypeAttribute != nil {
				name := string(*d.PartitionTypeAttribute)
				a, ok := dev.Attributes[resourceapi.QualifiedName(name)]
				if bare, cut := strings.CutPrefix(name, d.Name+"/"); !ok && cut {
					a, ok = dev.Attributes[resourceapi.QualifiedName(bare)]
				}
				if !ok || a.StringValue == nil {
					return fmt.Errorf("device %q: consumes counters, so it needs the partitionTypeAttribute %q as a string", dev.Name, name)
				}
			}
		}
	}
	if p := d.PartitionTypeAttribute; p != nil {
		if !specFieldSupported()["partitionTypeAttribute"] {
			return errors.New("partitionTypeAttribute: this reader's k8s.io/api has no ResourceSlice spec.partitionTypeAttribute")
		}
		if err := apirules.FullyQualifiedName(string(*p)); err != nil {
			return fmt.Errorf("partitionTypeAttribute: %w", err)
		}
		if !consumers {
			return errors.New("partitionTypeAttribute: set, but no device consumes counters")
		}
	}
	return nil
}

func validateDevice(driver string, dev *resourceapi.Device, identity map[string]bool) error {
	if err := apirules.Device(dev); err != nil {
		return err
	}
	// Node selection belongs to the node a template is instantiated for, not to the template.
	if dev.NodeName != nil || dev.NodeSelector != nil || dev.AllNodes != nil {
		return errors.New("per-device node selection (nodeName, nodeSelector, allNodes) is not supported")
	}
	for name, a := range dev.Attributes {
		if identity[Qualify(driver, name)] {
			if err := validatePlaceholder(a); err != nil {
				return fmt.Errorf("identity attribute %q: %w", name, err)
			}
		}
	}
	for i, taint := range dev.Taints {
		if taint.TimeAdded != nil {
			return fmt.Errorf("taints[%d]: timeAdded is node state and must not be in a template", i)
		}
	}
	return nil
}

// validatePlaceholder checks that ResourceSlices can make the value node-specific.
func validatePlaceholder(a resourceapi.DeviceAttribute) error {
	var strs, vers []string
	if a.StringValue != nil {
		strs = append(strs, *a.StringValue)
	}
	strs = append(strs, a.StringValues...)
	if a.VersionValue != nil {
		vers = append(vers, *a.VersionValue)
	}
	vers = append(vers, a.VersionValues...)
	for _, v := range slices.Concat(strs, vers) {
		if len(v) > MaxPlaceholderLength {
			return fmt.Errorf("placeholder %q longer than %d characters", v, MaxPlaceholderLength)
		}
	}
	for _, v := range vers {
		if strings.Contains(v, "+") {
			return fmt.Errorf("version placeholder %q must not have build metadata", v)
		}
	}
	return nil
}

// Values of ResourceSlice spec.skipNodeOperations (Kubernetes 1.37), as strings because older
// k8s.io/api releases do not have them.
const (
	skipNodePrepare   = "NodePrepareResources"
	skipNodeUnprepare = "NodeUnprepareResources"
	skipAll           = "All"
)

func skipNodeOperations(ops []string) error {
	for i, op := range ops {
		switch op {
		case skipNodePrepare, skipNodeUnprepare, skipAll:
		default:
			return fmt.Errorf("%q not supported", op)
		}
		if slices.Contains(ops[:i], op) {
			return fmt.Errorf("%q listed twice", op)
		}
	}
	if slices.Contains(ops, skipNodePrepare) && !slices.Contains(ops, skipNodeUnprepare) && !slices.Contains(ops, skipAll) {
		return errors.New("NodePrepareResources cannot be skipped unless NodeUnprepareResources is also skipped")
	}
	return nil
}
