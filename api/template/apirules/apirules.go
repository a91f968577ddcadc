// Package apirules is the API server's validation of ResourceSlice device content
// (k8s.io/kubernetes/pkg/apis/resource/validation, v1.37), for the fields that every k8s.io/api
// release the template reader supports has. It is the one statement of those rules: the
// template reader (package template of this module, which the Cluster Autoscaler vendors with
// its own, older k8s.io/api) checks decoded templates with it, and the node plugin's
// pkg/apivalidation builds on it, adding the rules of fields only newer releases have. It
// depends only on k8s.io/api and k8s.io/apimachinery; e2e/apivalidation compares its verdicts,
// through pkg/apivalidation, with a real API server's.
package apirules

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Device checks one device of a ResourceSlice against the API server's rules for the fields
// every supported k8s.io/api release has: name, attributes, capacities and their request
// policies, taints, counter consumption (without compatibility groups) and binding conditions.
// Node selection is the slice's (its rules depend on the slice) and is not checked here.
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
		if err := DNSLabel(cc.CounterSet); err != nil {
			return fmt.Errorf("consumesCounters[%d]: counterSet: %w", i, err)
		}
		if err := Counters(cc.Counters, resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption); err != nil {
			return fmt.Errorf("consumesCounters[%d]: %w", i, err)
		}
		if sets[cc.CounterSet] {
			return fmt.Errorf("consumesCounters[%d]: counter set %q listed twice", i, cc.CounterSet)
		}
		sets[cc.CounterSet] = true
	}
	return BindingConditions(dev.BindingConditions, dev.BindingFailureConditions)
}

var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
	`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

// LowersSliceLimit reports whether a device uses a feature that lowers its slice's device limit
// from ResourceSliceMaxDevices to ResourceSliceMaxDevicesWithAdvancedFeatures: taints, counter
// consumption or list-type attributes (ResourceSliceMaxDevicesWithAdvancedFeatures' comment in
// k8s.io/api names all three).
func LowersSliceLimit(d *resourceapi.Device) bool {
	if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
		return true
	}
	for _, a := range d.Attributes {
		if a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil {
			return true
		}
	}
	return false
}

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
	return Counters(cs.Counters, resourceapi.ResourceSliceMaxCountersPerCounterSet)
}

// Counters checks the counters of a counter set or of a device's consumption of one.
func Counters(cs map[string]resourceapi.Counter, maxCounters int) error {
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

// RequestPolicy checks the request policy of a consumable capacity whose total is value, as the
// API server does (validateRequestPolicy, v1.37, with DRAFractionalCapacityRange off as a
// 1.37 API server has it: quantities are compared as whole numbers, Quantity.Value(), which
// rounds up): at most one of validValues and validRange; either needs a default that it allows;
// validValues are at most 10, ascending, distinct and no larger than the capacity; a range's
// min, max and step fit the capacity and default and max are min plus whole steps.
func RequestPolicy(value resource.Quantity, p *resourceapi.CapacityRequestPolicy) error {
	switch {
	case len(p.ValidValues) > 0 && p.ValidRange != nil:
		return errors.New(`exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time`)
	case len(p.ValidValues) > 0:
		if p.Default == nil {
			return errors.New("default: required when validValues is defined")
		}
		return validValues(*p.Default, value, p.ValidValues)
	case p.ValidRange != nil:
		if p.Default == nil {
			return errors.New("default: required when validRange is defined")
		}
		return validRange(*p.Default, value, *p.ValidRange)
	}
	return nil
}

func validValues(def, capacity resource.Quantity, values []resource.Quantity) error {
	if len(values) > capacityRequestPolicyDiscreteMaxOptions {
		return fmt.Errorf("validValues: %d values, at most %d allowed", len(values), capacityRequestPolicyDiscreteMaxOptions)
	}
	seen := map[int64]bool{}
	found := false
	for i, v := range values {
		if i > 0 && values[i-1].Cmp(v) > 0 {
			return fmt.Errorf("validValues[%d]: %s: values must be sorted in ascending order", i, v.String())
		}
		if v.Cmp(capacity) > 0 {
			return fmt.Errorf("validValues[%d]: %s is larger than the capacity value %s", i, v.String(), capacity.String())
		}
		key := v.Value()
		if seen[key] {
			return fmt.Errorf("validValues[%d]: duplicate value %s", i, v.String())
		}
		seen[key] = true
		found = found || v.Cmp(def) == 0
	}
	if !found {
		return fmt.Errorf("validValues: default %s is not one of the valid values", def.String())
	}
	return nil
}

func validRange(def, capacity resource.Quantity, r resourceapi.CapacityRequestPolicyRange) error {
	if r.Min == nil {
		return errors.New("validRange.min: required when validRange is defined")
	}
	if r.Min.Cmp(capacity) > 0 {
		return fmt.Errorf("validRange.min: %s is larger than the capacity value %s", r.Min.String(), capacity.String())
	}
	if def.Cmp(*r.Min) < 0 {
		return fmt.Errorf("validRange.default: %s is less than min %s", def.String(), r.Min.String())
	}
	if r.Max != nil {
		switch {
		case r.Min.Cmp(*r.Max) > 0:
			return fmt.Errorf("validRange.max: min %s is larger than max %s", r.Min.String(), r.Max.String())
		case r.Max.Cmp(capacity) > 0:
			return fmt.Errorf("validRange.max: %s is larger than the capacity value %s", r.Max.String(), capacity.String())
		case def.Cmp(*r.Max) > 0:
			return fmt.Errorf("validRange.default: %s is more than max %s", def.String(), r.Max.String())
		}
	}
	named := []struct {
		q    *resource.Quantity
		name string
	}{{&def, "default"}, {r.Min, "min"}, {r.Max, "max"}, {r.Step, "step"}}
	if r.Step == nil {
		return nil
	}
	if r.Step.Sign() <= 0 {
		return fmt.Errorf("validRange.step: %s must be greater than zero", r.Step.String())
	}
	one := r.Min.DeepCopy()
	one.Add(*r.Step)
	if one.Cmp(capacity) > 0 {
		return fmt.Errorf("validRange.step: one step %s is larger than the capacity value %s", one.String(), capacity.String())
	}
	for _, n := range named {
		if n.q != nil && (n.q.Sign() < 0 || n.q.CmpInt64(math.MaxInt64) > 0) {
			return fmt.Errorf("validRange.%s: %s must be between 0 and %d", n.name, n.q.String(), int64(math.MaxInt64))
		}
	}
	for _, v := range []*resource.Quantity{&def, r.Max} {
		if v != nil && (v.Value()-r.Min.Value())%r.Step.Value() != 0 {
			return fmt.Errorf("validRange.step: %s is not min %s plus a multiple of step %s", v.String(), r.Min.String(), r.Step.String())
		}
	}
	return nil
}

// capacityRequestPolicyDiscreteMaxOptions is the API server's limit on validValues (an internal
// constant there, not in k8s.io/api).
const capacityRequestPolicyDiscreteMaxOptions = 10
