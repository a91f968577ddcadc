package apivalidation

import (
	"errors"
	"fmt"
	"math"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

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
