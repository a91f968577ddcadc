package apirules

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestRequestPolicy(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	vals := func(ss ...string) []resource.Quantity {
		out := make([]resource.Quantity, len(ss))
		for i, s := range ss {
			out[i] = *q(s)
		}
		return out
	}
	rng := func(min, max, step *resource.Quantity) *resourceapi.CapacityRequestPolicyRange {
		return &resourceapi.CapacityRequestPolicyRange{Min: min, Max: max, Step: step}
	}
	for _, tc := range []struct {
		name string
		p    resourceapi.CapacityRequestPolicy
		err  string
	}{
		{"default only", resourceapi.CapacityRequestPolicy{Default: q("1Gi")}, ""},
		{"empty", resourceapi.CapacityRequestPolicy{}, ""},
		{"gpu memory range", resourceapi.CapacityRequestPolicy{Default: q("1Gi"), ValidRange: rng(q("1Gi"), nil, q("1Gi"))}, ""},
		{"range with max", resourceapi.CapacityRequestPolicy{Default: q("2Gi"), ValidRange: rng(q("1Gi"), q("80Gi"), q("1Gi"))}, ""},
		{"values", resourceapi.CapacityRequestPolicy{Default: q("10Gi"), ValidValues: vals("10Gi", "20Gi", "40Gi")}, ""},
		{"fractional step", resourceapi.CapacityRequestPolicy{Default: q("1500m"), ValidRange: rng(q("500m"), nil, q("500m"))}, ""},
		{"both", resourceapi.CapacityRequestPolicy{Default: q("10Gi"), ValidValues: vals("10Gi"), ValidRange: rng(q("1Gi"), nil, nil)}, "exactly one policy"},
		{"values without default", resourceapi.CapacityRequestPolicy{ValidValues: vals("10Gi")}, "default: required"},
		{"range without default", resourceapi.CapacityRequestPolicy{ValidRange: rng(q("1Gi"), nil, nil)}, "default: required"},
		{"default not a value", resourceapi.CapacityRequestPolicy{Default: q("5Gi"), ValidValues: vals("10Gi")}, "not one of the valid values"},
		{"values unsorted", resourceapi.CapacityRequestPolicy{Default: q("10Gi"), ValidValues: vals("20Gi", "10Gi")}, "ascending"},
		{"value too large", resourceapi.CapacityRequestPolicy{Default: q("10Gi"), ValidValues: vals("10Gi", "100Gi")}, "larger than the capacity"},
		{"duplicate value", resourceapi.CapacityRequestPolicy{Default: q("10Gi"), ValidValues: vals("10Gi", "10Gi")}, "duplicate"},
		{"11 values", resourceapi.CapacityRequestPolicy{Default: q("1Gi"), ValidValues: vals("1Gi", "2Gi", "3Gi", "4Gi", "5Gi", "6Gi", "7Gi", "8Gi", "9Gi", "10Gi", "11Gi")}, "at most 10"},
		{"no min", resourceapi.CapacityRequestPolicy{Default: q("1Gi"), ValidRange: rng(nil, nil, nil)}, "min: required"},
		{"min too large", resourceapi.CapacityRequestPolicy{Default: q("90Gi"), ValidRange: rng(q("90Gi"), nil, nil)}, "min: 90Gi is larger"},
		{"default below min", resourceapi.CapacityRequestPolicy{Default: q("1Gi"), ValidRange: rng(q("2Gi"), nil, nil)}, "less than min"},
		{"min above max", resourceapi.CapacityRequestPolicy{Default: q("2Gi"), ValidRange: rng(q("2Gi"), q("1Gi"), nil)}, "larger than max"},
		{"max too large", resourceapi.CapacityRequestPolicy{Default: q("2Gi"), ValidRange: rng(q("1Gi"), q("81Gi"), nil)}, "max: 81Gi is larger"},
		{"default above max", resourceapi.CapacityRequestPolicy{Default: q("3Gi"), ValidRange: rng(q("1Gi"), q("2Gi"), nil)}, "more than max"},
		{"zero step", resourceapi.CapacityRequestPolicy{Default: q("1Gi"), ValidRange: rng(q("1Gi"), nil, q("0"))}, "greater than zero"},
		{"step too large", resourceapi.CapacityRequestPolicy{Default: q("1Gi"), ValidRange: rng(q("1Gi"), nil, q("80Gi"))}, "one step"},
		{"default off step", resourceapi.CapacityRequestPolicy{Default: q("1536Mi"), ValidRange: rng(q("1Gi"), nil, q("1Gi"))}, "multiple of step"},
		{"max off step", resourceapi.CapacityRequestPolicy{Default: q("1Gi"), ValidRange: rng(q("1Gi"), q("1536Mi"), q("1Gi"))}, "multiple of step"},
		{"step below one rounds up", resourceapi.CapacityRequestPolicy{Default: q("1"), ValidRange: rng(q("1"), nil, q("1u"))}, ""},
		{"duplicate once rounded", resourceapi.CapacityRequestPolicy{Default: q("1"), ValidValues: vals("500m", "1")}, "duplicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := RequestPolicy(resource.MustParse("80Gi"), &tc.p)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}
