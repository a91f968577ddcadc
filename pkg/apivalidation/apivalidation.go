// Package apivalidation restates the API server's validation of ResourceSlice content
// (k8s.io/kubernetes/pkg/apis/resource/validation, v1.37), which cannot be imported as a library.
// The node plugin checks each device with it before publishing, because the API server rejects a
// whole slice for one bad device; the template format checks decoded templates with it. It
// depends only on k8s.io/api and k8s.io/apimachinery, so that an autoscaler provider adopting the
// template format can vendor it. The e2e suites show that what passes here is accepted by a real
// API server.
package apivalidation

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Device checks one device of a ResourceSlice against the API server's rules.
func Device(dev *resourceapi.Device) error {
	if err := DNSLabel(dev.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if n := len(dev.Attributes) + len(dev.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		return fmt.Errorf("%d attributes and capacities, at most %d allowed", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	values := 0
	for name, a := range dev.Attributes {
		if err := QualifiedName(string(name)); err != nil {
			return fmt.Errorf("attribute %q: %w", name, err)
		}
		n, err := Attribute(a)
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
		if err := QualifiedName(string(name)); err != nil {
			return fmt.Errorf("capacity %q: %w", name, err)
		}
		if p := c.RequestPolicy; p != nil {
			if !multi {
				return fmt.Errorf("capacity %q: requestPolicy needs allowMultipleAllocations", name)
			}
			if err := RequestPolicy(c.Value, p); err != nil {
				return fmt.Errorf("capacity %q: requestPolicy: %w", name, err)
			}
		}
	}
	if len(dev.Taints) > resourceapi.DeviceTaintsMaxLength {
		return fmt.Errorf("%d taints, at most %d allowed", len(dev.Taints), resourceapi.DeviceTaintsMaxLength)
	}
	for i, taint := range dev.Taints {
		if err := Taint(taint); err != nil {
			return fmt.Errorf("taints[%d]: %w", i, err)
		}
	}
	if len(dev.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
		return fmt.Errorf("%d consumesCounters, at most %d allowed", len(dev.ConsumesCounters), resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
	}
	sets := map[string]bool{}
	for i, cc := range dev.ConsumesCounters {
		if err := CounterConsumption(cc); err != nil {
			return fmt.Errorf("consumesCounters[%d]: %w", i, err)
		}
		if sets[cc.CounterSet] {
			return fmt.Errorf("consumesCounters[%d]: counter set %q listed twice", i, cc.CounterSet)
		}
		sets[cc.CounterSet] = true
	}
	if err := BindingConditions(dev.BindingConditions, dev.BindingFailureConditions); err != nil {
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

// Attribute checks one attribute and returns how many values it counts for.
func Attribute(a resourceapi.DeviceAttribute) (int, error) {
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

// Taint checks a device taint.
func Taint(t resourceapi.DeviceTaint) error {
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

// CounterSet checks a shared counter set.
func CounterSet(cs resourceapi.CounterSet) error {
	if err := DNSLabel(cs.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	return counters(cs.Counters, resourceapi.ResourceSliceMaxCountersPerCounterSet)
}

// CounterConsumption checks what a device consumes of one counter set.
func CounterConsumption(cc resourceapi.DeviceCounterConsumption) error {
	if err := DNSLabel(cc.CounterSet); err != nil {
		return fmt.Errorf("counterSet: %w", err)
	}
	if err := counters(cc.Counters, resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption); err != nil {
		return err
	}
	if len(cc.CompatibilityGroups) > resourceapi.DeviceCompatibilityGroupsMaxSize {
		return fmt.Errorf("%d compatibilityGroups, at most %d allowed", len(cc.CompatibilityGroups), resourceapi.DeviceCompatibilityGroupsMaxSize)
	}
	for i, g := range cc.CompatibilityGroups {
		if err := DNSLabel(g); err != nil {
			return fmt.Errorf("compatibilityGroups[%d]: %w", i, err)
		}
		if slices.Contains(cc.CompatibilityGroups[:i], g) {
			return fmt.Errorf("compatibilityGroups[%d]: %q listed twice", i, g)
		}
	}
	return nil
}

func counters(cs map[string]resourceapi.Counter, maxCounters int) error {
	if len(cs) == 0 {
		return errors.New("counters must not be empty")
	}
	if len(cs) > maxCounters {
		return fmt.Errorf("%d counters, at most %d allowed", len(cs), maxCounters)
	}
	for name := range cs {
		if err := DNSLabel(name); err != nil {
			return fmt.Errorf("counter %q: %w", name, err)
		}
	}
	return nil
}

// BindingConditions checks a device's binding conditions.
func BindingConditions(conds, failure []string) error {
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

// DriverName checks a DRA driver name (a DNS subdomain of at most 63 characters).
func DriverName(name string) error {
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

// PoolName checks a pool name.
func PoolName(name string) error {
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

// DNSLabel checks a DNS label (device, counter set and counter names).
func DNSLabel(s string) error {
	if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
		return fmt.Errorf("%q: %s", s, strings.Join(msgs, "; "))
	}
	return nil
}

// QualifiedName checks an attribute or capacity name: a C identifier, optionally after a
// driver-like domain and a slash.
func QualifiedName(name string) error {
	domain, id, found := strings.Cut(name, "/")
	if !found {
		return CIdentifier(domain)
	}
	if strings.Contains(id, "/") {
		// The API server lets "a/b/c" through (a known gap); the allocator cannot use it.
		return errors.New("more than one slash")
	}
	if domain == "" {
		return errors.New("the domain must not be empty")
	}
	if err := DriverName(domain); err != nil {
		return fmt.Errorf("domain: %w", err)
	}
	return CIdentifier(id)
}

// FullyQualifiedName checks a qualified name that must have a domain.
func FullyQualifiedName(name string) error {
	if !strings.Contains(name, "/") {
		return errors.New("a fully qualified name must be a domain and a name separated by a slash")
	}
	return QualifiedName(name)
}

// CIdentifier checks a C identifier of at most 32 characters.
func CIdentifier(id string) error {
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

// ResourceSlice checks a ResourceSlice's spec against the API server's rules for creating one:
// the per-slice rules (driver, pool, node selection, device and counter-set counts, the 64-device
// limit for slices whose devices have taints or consume counters, sharedCounters and devices
// never in one slice, partitionTypeAttribute) and Device for each device. Object metadata is
// not checked. The e2e test e2e/apivalidation compares its verdict with a real API server's.
func ResourceSlice(spec *resourceapi.ResourceSliceSpec) error {
	if err := DriverName(spec.Driver); err != nil {
		return fmt.Errorf("driver: %w", err)
	}
	if spec.Pool.Name == "" {
		return errors.New("pool.name: required")
	}
	if err := PoolName(spec.Pool.Name); err != nil {
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
	for _, d := range spec.Devices {
		if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
			advanced = true
		}
	}
	if advanced {
		maxDevices = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	}
	if len(spec.Devices) > maxDevices {
		return fmt.Errorf("%d devices, at most %d allowed (64 if a device has taints or consumes counters)", len(spec.Devices), maxDevices)
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
		if err := CounterSet(cs); err != nil {
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
	if err := FullyQualifiedName(name); err != nil {
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
