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

// Validate checks what a reader relies on: the format's limits; names the template node's
// slices are built from (driver, pool, device and counter names); that each attribute has
// exactly one valid value and identity placeholders can be made node-specific; that consumed
// counters exist in the pool; taints and binding conditions. These restate the API server's
// rules (k8s.io/kubernetes/pkg/apis/resource/validation) for the fields every supported
// k8s.io/api release has. Rules for fields that only newer releases have (for example a
// device's nodeAllocatableResources) are the writer's to check: a reader whose API has such a
// field passes it through to the allocator, one whose API lacks it has refused the document in
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
		if err := fullyQualifiedName(string(fq)); err != nil {
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
	if err := driverName(d.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	// Any valid node name is a DNS subdomain ending in an alphanumeric character; "a" stands
	// for it here, the full pool name is checked again by ResourceSlices.
	if err := poolName("a" + d.PoolSuffix); err != nil {
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
		if err := counterSet(cs); err != nil {
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
		if err := fullyQualifiedName(string(*p)); err != nil {
			return fmt.Errorf("partitionTypeAttribute: %w", err)
		}
		if !consumers {
			return errors.New("partitionTypeAttribute: set, but no device consumes counters")
		}
	}
	return nil
}

func validateDevice(driver string, dev *resourceapi.Device, identity map[string]bool) error {
	if err := device(dev); err != nil {
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

// device checks one device against the API server's rules for the fields all supported
// k8s.io/api releases have.
func device(dev *resourceapi.Device) error {
	if err := dnsLabel(dev.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if n := len(dev.Attributes) + len(dev.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		return fmt.Errorf("%d attributes and capacities, at most %d allowed", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	values := 0
	for name, a := range dev.Attributes {
		if err := qualifiedName(string(name)); err != nil {
			return fmt.Errorf("attribute %q: %w", name, err)
		}
		n, err := attribute(a)
		if err != nil {
			return fmt.Errorf("attribute %q: %w", name, err)
		}
		values += n
	}
	if values > resourceapi.ResourceSliceMaxAttributeValuesPerDevice {
		return fmt.Errorf("%d attribute values, at most %d allowed", values, resourceapi.ResourceSliceMaxAttributeValuesPerDevice)
	}
	multi := dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations
	for name, c := range dev.Capacity {
		if err := qualifiedName(string(name)); err != nil {
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
		if err := deviceTaint(taint); err != nil {
			return fmt.Errorf("taints[%d]: %w", i, err)
		}
	}
	if len(dev.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
		return fmt.Errorf("%d consumesCounters, at most %d allowed", len(dev.ConsumesCounters), resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
	}
	sets := map[string]bool{}
	for i, cc := range dev.ConsumesCounters {
		if err := dnsLabel(cc.CounterSet); err != nil {
			return fmt.Errorf("consumesCounters[%d]: counterSet: %w", i, err)
		}
		if err := counters(cc.Counters, resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption); err != nil {
			return fmt.Errorf("consumesCounters[%d]: %w", i, err)
		}
		if sets[cc.CounterSet] {
			return fmt.Errorf("consumesCounters[%d]: counter set %q listed twice", i, cc.CounterSet)
		}
		sets[cc.CounterSet] = true
	}
	return bindingConditions(dev.BindingConditions, dev.BindingFailureConditions)
}

var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
	`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

// attribute checks one attribute and returns how many values it counts for.
func attribute(a resourceapi.DeviceAttribute) (int, error) {
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

func deviceTaint(t resourceapi.DeviceTaint) error {
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
	return nil
}

func counterSet(cs resourceapi.CounterSet) error {
	if err := dnsLabel(cs.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	return counters(cs.Counters, resourceapi.ResourceSliceMaxCountersPerCounterSet)
}

func counters(cs map[string]resourceapi.Counter, maxCounters int) error {
	if len(cs) == 0 {
		return errors.New("counters must not be empty")
	}
	if len(cs) > maxCounters {
		return fmt.Errorf("%d counters, at most %d allowed", len(cs), maxCounters)
	}
	for name := range cs {
		if err := dnsLabel(name); err != nil {
			return fmt.Errorf("counter %q: %w", name, err)
		}
	}
	return nil
}

func bindingConditions(conds, failure []string) error {
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

func driverName(name string) error {
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

func poolName(name string) error {
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

// qualifiedName checks an attribute or capacity name: a C identifier, optionally after a
// driver-like domain and a slash.
func qualifiedName(name string) error {
	domain, id, found := strings.Cut(name, "/")
	if !found {
		return cIdentifier(domain)
	}
	if strings.Contains(id, "/") {
		// The API server lets "a/b/c" through (a known gap); the allocator cannot use it.
		return errors.New("more than one slash")
	}
	if domain == "" {
		return errors.New("the domain must not be empty")
	}
	if err := driverName(domain); err != nil {
		return fmt.Errorf("domain: %w", err)
	}
	return cIdentifier(id)
}

func fullyQualifiedName(name string) error {
	if !strings.Contains(name, "/") {
		return errors.New("a fully qualified name must be a domain and a name separated by a slash")
	}
	return qualifiedName(name)
}

func cIdentifier(id string) error {
	if len(id) > resourceapi.DeviceMaxIDLength {
		return fmt.Errorf("identifier longer than %d characters", resourceapi.DeviceMaxIDLength)
	}
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
