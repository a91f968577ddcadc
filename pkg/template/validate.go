package template

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// validate checks that every ResourceSlice the template produces would pass the API server's
// validation (for any valid node name), that cross-references inside each pool hold, and that
// the template is within the format's limits. The checks follow
// k8s.io/kubernetes/pkg/apis/resource/validation (v1.37); what they leave out is listed in
// docs/template-format.md.
func (t *Template) validate() error {
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
		if err := validateFullyQualifiedName(string(fq)); err != nil {
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
	if err := validateDriverName(d.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	// Any valid node name is a DNS subdomain ending in an alphanumeric character; "a" stands
	// for it here, the full pool name is checked again by ResourceSlices.
	if err := validatePoolName("a" + d.PoolSuffix); err != nil {
		return fmt.Errorf("poolSuffix: %w", err)
	}
	if len(d.PoolSuffix) > resourceapi.PoolNameMaxLength-1 {
		return fmt.Errorf("poolSuffix: longer than %d characters", resourceapi.PoolNameMaxLength-1)
	}
	if err := validateSkipNodeOperations(d.SkipNodeOperations); err != nil {
		return fmt.Errorf("skipNodeOperations: %w", err)
	}

	counters := map[string]map[string]bool{}
	for i, cs := range d.SharedCounters {
		if err := validateCounterSet(cs); err != nil {
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
		if err := validateFullyQualifiedName(string(*p)); err != nil {
			return fmt.Errorf("partitionTypeAttribute: %w", err)
		}
		if !consumers {
			return errors.New("partitionTypeAttribute: set, but no device consumes counters")
		}
	}
	return nil
}

func validateDevice(driver string, dev *resourceapi.Device, identity map[string]bool) error {
	if err := dnsLabel(dev.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if n := len(dev.Attributes) + len(dev.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		return fmt.Errorf("%d attributes and capacities, at most %d allowed", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	values := 0
	for name, a := range dev.Attributes {
		if err := validateQualifiedName(string(name)); err != nil {
			return fmt.Errorf("attribute %q: %w", name, err)
		}
		n, err := validateAttribute(a)
		if err != nil {
			return fmt.Errorf("attribute %q: %w", name, err)
		}
		values += n
		if identity[qualify(driver, name)] {
			if err := validatePlaceholder(a); err != nil {
				return fmt.Errorf("identity attribute %q: %w", name, err)
			}
		}
	}
	if values > resourceapi.ResourceSliceMaxAttributeValuesPerDevice {
		return fmt.Errorf("%d attribute values, at most %d allowed", values, resourceapi.ResourceSliceMaxAttributeValuesPerDevice)
	}
	multi := dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations
	for name, c := range dev.Capacity {
		if err := validateQualifiedName(string(name)); err != nil {
			return fmt.Errorf("capacity %q: %w", name, err)
		}
		if p := c.RequestPolicy; p != nil {
			if !multi {
				return fmt.Errorf("capacity %q: requestPolicy needs allowMultipleAllocations", name)
			}
			if len(p.ValidValues) > 0 && p.ValidRange != nil {
				return fmt.Errorf("capacity %q: requestPolicy has both validValues and validRange", name)
			}
		}
	}
	if len(dev.Taints) > resourceapi.DeviceTaintsMaxLength {
		return fmt.Errorf("%d taints, at most %d allowed", len(dev.Taints), resourceapi.DeviceTaintsMaxLength)
	}
	for i, taint := range dev.Taints {
		if err := validateTaint(taint); err != nil {
			return fmt.Errorf("taints[%d]: %w", i, err)
		}
	}
	if len(dev.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
		return fmt.Errorf("%d consumesCounters, at most %d allowed", len(dev.ConsumesCounters), resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
	}
	sets := map[string]bool{}
	for i, cc := range dev.ConsumesCounters {
		if err := validateCounterConsumption(cc); err != nil {
			return fmt.Errorf("consumesCounters[%d]: %w", i, err)
		}
		if sets[cc.CounterSet] {
			return fmt.Errorf("consumesCounters[%d]: counter set %q listed twice", i, cc.CounterSet)
		}
		sets[cc.CounterSet] = true
	}
	if dev.NodeName != nil || dev.NodeSelector != nil || dev.AllNodes != nil {
		return errors.New("per-device node selection (nodeName, nodeSelector, allNodes) is not supported")
	}
	if err := validateBindingConditions(dev.BindingConditions, dev.BindingFailureConditions); err != nil {
		return err
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

var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
	`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

// validateAttribute checks one attribute and returns how many values it counts for.
func validateAttribute(a resourceapi.DeviceAttribute) (int, error) {
	set, values := 0, 1
	str := func(v string) error {
		if len(v) > resourceapi.DeviceAttributeMaxValueLength {
			return fmt.Errorf("value longer than %d characters", resourceapi.DeviceAttributeMaxValueLength)
		}
		return nil
	}
	ver := func(v string) error {
		if !semverRE.MatchString(v) {
			return fmt.Errorf("version %q is not semver 2.0.0", v)
		}
		return str(v)
	}
	list := func(n int) error {
		set++
		values = n
		if n == 0 {
			return errors.New("list value must not be empty")
		}
		return nil
	}
	var errs []error
	if a.IntValue != nil {
		set++
	}
	if a.BoolValue != nil {
		set++
	}
	if a.StringValue != nil {
		set++
		errs = append(errs, str(*a.StringValue))
	}
	if a.VersionValue != nil {
		set++
		errs = append(errs, ver(*a.VersionValue))
	}
	if a.IntValues != nil {
		errs = append(errs, list(len(a.IntValues)))
	}
	if a.BoolValues != nil {
		errs = append(errs, list(len(a.BoolValues)))
	}
	if a.StringValues != nil {
		errs = append(errs, list(len(a.StringValues)))
		for _, v := range a.StringValues {
			errs = append(errs, str(v))
		}
	}
	if a.VersionValues != nil {
		errs = append(errs, list(len(a.VersionValues)))
		for _, v := range a.VersionValues {
			errs = append(errs, ver(v))
		}
	}
	if set != 1 {
		return 0, errors.New("exactly one value must be specified")
	}
	return values, errors.Join(errs...)
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

func validateTaint(t resourceapi.DeviceTaint) error {
	if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
		return fmt.Errorf("key %q: %s", t.Key, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
		return fmt.Errorf("value %q: %s", t.Value, strings.Join(msgs, "; "))
	}
	switch t.Effect {
	case resourceapi.DeviceTaintEffectNone, resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute:
	default:
		return fmt.Errorf("effect %q not supported", t.Effect)
	}
	if t.TimeAdded != nil {
		return errors.New("timeAdded is node state and must not be in a template")
	}
	return nil
}

func validateCounterSet(cs resourceapi.CounterSet) error {
	if err := dnsLabel(cs.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	return validateCounters(cs.Counters, resourceapi.ResourceSliceMaxCountersPerCounterSet)
}

func validateCounterConsumption(cc resourceapi.DeviceCounterConsumption) error {
	if err := dnsLabel(cc.CounterSet); err != nil {
		return fmt.Errorf("counterSet: %w", err)
	}
	if err := validateCounters(cc.Counters, resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption); err != nil {
		return err
	}
	if len(cc.CompatibilityGroups) > resourceapi.DeviceCompatibilityGroupsMaxSize {
		return fmt.Errorf("%d compatibilityGroups, at most %d allowed", len(cc.CompatibilityGroups), resourceapi.DeviceCompatibilityGroupsMaxSize)
	}
	for i, g := range cc.CompatibilityGroups {
		if err := dnsLabel(g); err != nil {
			return fmt.Errorf("compatibilityGroups[%d]: %w", i, err)
		}
		if slices.Contains(cc.CompatibilityGroups[:i], g) {
			return fmt.Errorf("compatibilityGroups[%d]: %q listed twice", i, g)
		}
	}
	return nil
}

func validateCounters(counters map[string]resourceapi.Counter, maxCounters int) error {
	if len(counters) == 0 {
		return errors.New("counters must not be empty")
	}
	if len(counters) > maxCounters {
		return fmt.Errorf("%d counters, at most %d allowed", len(counters), maxCounters)
	}
	for name := range counters {
		if err := dnsLabel(name); err != nil {
			return fmt.Errorf("counter %q: %w", name, err)
		}
	}
	return nil
}

func validateBindingConditions(conds, failure []string) error {
	if len(conds) > resourceapi.BindingConditionsMaxSize || len(failure) > resourceapi.BindingFailureConditionsMaxSize {
		return fmt.Errorf("at most %d bindingConditions and %d bindingFailureConditions allowed",
			resourceapi.BindingConditionsMaxSize, resourceapi.BindingFailureConditionsMaxSize)
	}
	if (len(conds) == 0) != (len(failure) == 0) {
		return errors.New("bindingConditions and bindingFailureConditions must be set together")
	}
	all := slices.Concat(conds, failure)
	for i, c := range all {
		if msgs := validation.IsQualifiedName(c); len(msgs) > 0 {
			return fmt.Errorf("binding condition %q: %s", c, strings.Join(msgs, "; "))
		}
		if slices.Contains(all[:i], c) {
			return fmt.Errorf("binding condition %q listed twice", c)
		}
	}
	return nil
}

func validateSkipNodeOperations(ops []resourceapi.SkipNodeOperation) error {
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

func validateDriverName(name string) error {
	if name == "" {
		return errors.New("must not be empty")
	}
	if len(name) > resourceapi.DriverNameMaxLength {
		return fmt.Errorf("longer than %d characters", resourceapi.DriverNameMaxLength)
	}
	if msgs := validation.IsDNS1123Subdomain(strings.ToLower(name)); len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

func validatePoolName(name string) error {
	if len(name) > resourceapi.PoolNameMaxLength {
		return fmt.Errorf("pool name longer than %d characters", resourceapi.PoolNameMaxLength)
	}
	for part := range strings.SplitSeq(name, "/") {
		if msgs := validation.IsDNS1123Subdomain(part); len(msgs) > 0 {
			return fmt.Errorf("pool name %q: %s", name, strings.Join(msgs, "; "))
		}
	}
	return nil
}

func dnsLabel(s string) error {
	if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
		return fmt.Errorf("%q: %s", s, strings.Join(msgs, "; "))
	}
	return nil
}

func validateQualifiedName(name string) error {
	domain, id, found := strings.Cut(name, "/")
	if !found {
		return validateCIdentifier(domain)
	}
	if strings.Contains(id, "/") {
		// The API server lets "a/b/c" through (a known gap); the allocator cannot use it.
		return errors.New("more than one slash")
	}
	if domain == "" {
		return errors.New("the domain must not be empty")
	}
	if err := validateDriverName(domain); err != nil {
		return fmt.Errorf("domain: %w", err)
	}
	return validateCIdentifier(id)
}

func validateFullyQualifiedName(name string) error {
	if !strings.Contains(name, "/") {
		return errors.New("a fully qualified name must be a domain and a name separated by a slash")
	}
	return validateQualifiedName(name)
}

func validateCIdentifier(id string) error {
	if len(id) > resourceapi.DeviceMaxIDLength {
		return fmt.Errorf("identifier longer than %d characters", resourceapi.DeviceMaxIDLength)
	}
	// By hand rather than with a regular expression: this runs for every attribute of every
	// device and was a tenth of Build's time.
	for i, c := range []byte(id) {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("%q is not a C identifier", id)
		}
	}
	if id == "" {
		return errors.New("identifier must not be empty")
	}
	return nil
}
