package slices

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ValidateDevice checks a device against the rules the apiserver applies to a ResourceSlice
// device. The apiserver's own validation lives in k8s.io/kubernetes, which cannot be imported
// as a library, so the rules a driver can break are restated here; the e2e suite shows that
// what passes here is accepted by a real apiserver. Checking before publishing matters because
// the apiserver rejects a whole slice for one bad device.
func ValidateDevice(d *resourceapi.Device) error {
	var errs []error
	for _, msg := range validation.IsDNS1123Label(d.Name) {
		errs = append(errs, fmt.Errorf("name %q: %s", d.Name, msg))
	}
	if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		errs = append(errs, fmt.Errorf("%d attributes and capacities, more than the limit of %d", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice))
	}
	seen := map[string]resourceapi.QualifiedName{}
	for _, name := range sortedNames(d.Attributes) {
		if err := validateQualifiedName(name); err != nil {
			errs = append(errs, fmt.Errorf("attributes[%s]: %w", name, err))
		}
		if err := validateAttribute(d.Attributes[name]); err != nil {
			errs = append(errs, fmt.Errorf("attributes[%s]: %w", name, err))
		}
		seen[fullName(name)] = name
	}
	for name := range d.Capacity {
		if err := validateQualifiedName(name); err != nil {
			errs = append(errs, fmt.Errorf("capacity[%s]: %w", name, err))
		}
		if other, dup := seen[fullName(name)]; dup {
			errs = append(errs, fmt.Errorf("capacity[%s]: the same name as attribute %s", name, other))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("device %s: %w", d.Name, errors.Join(errs...))
	}
	return nil
}

func validateAttribute(a resourceapi.DeviceAttribute) error {
	set := 0
	if a.IntValue != nil {
		set++
	}
	if a.BoolValue != nil {
		set++
	}
	if a.StringValue != nil {
		set++
		if len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
			return fmt.Errorf("string value is %d bytes, longer than %d", len(*a.StringValue), resourceapi.DeviceAttributeMaxValueLength)
		}
	}
	if a.VersionValue != nil {
		set++
		if len(*a.VersionValue) > resourceapi.DeviceAttributeMaxValueLength {
			return fmt.Errorf("version value is %d bytes, longer than %d", len(*a.VersionValue), resourceapi.DeviceAttributeMaxValueLength)
		}
		if _, err := semver.Parse(*a.VersionValue); err != nil {
			return fmt.Errorf("version value %q is not semver: %w", *a.VersionValue, err)
		}
	}
	if set != 1 {
		return fmt.Errorf("exactly one value must be set, got %d", set)
	}
	return nil
}

// validateQualifiedName follows the API: an optional DNS-subdomain domain of at most 63
// characters, then a C identifier of at most 32.
func validateQualifiedName(name resourceapi.QualifiedName) error {
	domain, id, found := strings.Cut(string(name), "/")
	if !found {
		id, domain = domain, ""
	} else {
		if domain == "" {
			return errors.New("empty domain")
		}
		if len(domain) > resourceapi.DeviceMaxDomainLength {
			return fmt.Errorf("domain longer than %d", resourceapi.DeviceMaxDomainLength)
		}
		if msgs := validation.IsDNS1123Subdomain(domain); len(msgs) > 0 {
			return fmt.Errorf("domain %q: %s", domain, strings.Join(msgs, "; "))
		}
	}
	if len(id) > resourceapi.DeviceMaxIDLength {
		return fmt.Errorf("identifier longer than %d", resourceapi.DeviceMaxIDLength)
	}
	if msgs := validation.IsCIdentifier(id); len(msgs) > 0 {
		return fmt.Errorf("identifier %q: %s", id, strings.Join(msgs, "; "))
	}
	return nil
}

func fullName(n resourceapi.QualifiedName) string {
	if strings.Contains(string(n), "/") {
		return string(n)
	}
	return "/" + string(n)
}

func sortedNames[V any](m map[resourceapi.QualifiedName]V) []resourceapi.QualifiedName {
	names := make([]resourceapi.QualifiedName, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}
