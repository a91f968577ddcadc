package accelctl

import (
	"strings"
	"testing"

	"k8s.io/dynamic-resource-allocation/structured"
)

// defaults137 are kube-scheduler 1.37.1's allocator features with its default gates, as
// k8s.io/kubernetes v1.37.1 pkg/features/kube_features.go declares the gates (GA and beta on,
// DRAFractionalCapacityRange on only from minimum compatibility version 1.37, alpha off).
var defaults137 = structured.Features{
	AdminAccess:            true,
	ConsumableCapacity:     true,
	DeviceBindingAndStatus: true,
	DeviceTaints:           true,
	PartitionableDevices:   true,
	PrioritizedList:        true,
}

func withFeatures(f func(*structured.Features)) structured.Features {
	out := defaults137
	f(&out)
	return out
}

func TestParseFeatureGates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value string
		want  structured.Features
		// wantErr is a part of kube-scheduler's error for the value.
		wantErr string
	}{
		{name: "none", value: "", want: defaults137},
		{name: "list attributes on", value: "DRAListTypeAttributes=true", want: withFeatures(func(f *structured.Features) { f.ListTypeAttributes = true })},
		{name: "taints off", value: "DRADeviceTaints=false", want: withFeatures(func(f *structured.Features) { f.DeviceTaints = false })},
		{name: "several, with spaces", value: "DRAListTypeAttributes=true, DRADeviceTaints = false,DRAFractionalCapacityRange=true",
			want: withFeatures(func(f *structured.Features) {
				f.ListTypeAttributes, f.DeviceTaints, f.FractionalCapacityRange = true, false, true
			})},
		{name: "last of a gate wins", value: "DRAListTypeAttributes=true,DRAListTypeAttributes=false", want: defaults137},
		// The scheduler derives one allocator feature from two gates.
		{name: "binding conditions off", value: "DRADeviceBindingConditions=false", want: withFeatures(func(f *structured.Features) { f.DeviceBindingAndStatus = false })},
		{name: "all alpha", value: "AllAlpha=true", want: withFeatures(func(f *structured.Features) {
			f.CompatibilityGroups, f.DerivedAttributes, f.ListTypeAttributes, f.OptionalNodeOperations = true, true, true, true
		})},
		{name: "beta off", value: "DRAPartitionableDevices=false,DRAConsumableCapacity=false", want: withFeatures(func(f *structured.Features) {
			f.PartitionableDevices, f.ConsumableCapacity = false, false
		})},
		{name: "locked gate at its default", value: "DRAPrioritizedList=true,DynamicResourceAllocation=true", want: defaults137},

		{name: "unknown gate", value: "DRAListTypeAttributes=true,DRAListAttributes=true", wantErr: "unrecognized feature gate: DRAListAttributes"},
		// A real kube-scheduler gate that does not change the allocator is not taken either:
		// accepting it would suggest that simulate models it.
		{name: "gate outside the allocator", value: "SchedulerAsyncPreemption=true", wantErr: "unrecognized feature gate: SchedulerAsyncPreemption"},
		{name: "not a bool", value: "DRAListTypeAttributes=yes", wantErr: "invalid value of DRAListTypeAttributes=yes"},
		{name: "no value", value: "DRAListTypeAttributes", wantErr: "missing bool value for DRAListTypeAttributes"},
		{name: "locked GA gate", value: "DRAPrioritizedList=false", wantErr: "cannot set feature gate DRAPrioritizedList to false, feature is locked to true"},
		{name: "locked GA gate 2", value: "DRAAdminAccess=false", wantErr: "cannot set feature gate DRAAdminAccess to false, feature is locked to true"},
		{name: "locked device status", value: "DRAResourceClaimDeviceStatus=false", wantErr: "cannot set feature gate DRAResourceClaimDeviceStatus to false, feature is locked to true"},
		{name: "dependency off", value: "DRAConsumableCapacity=false,DRAFractionalCapacityRange=true", wantErr: "DRAFractionalCapacityRange is enabled, but depends on features that are disabled: [DRAConsumableCapacity]"},
		{name: "dependency off by default gate", value: "DRAPartitionableDevices=false,DRADeviceCompatibilityGroups=true", wantErr: "DRADeviceCompatibilityGroups is enabled, but depends on features that are disabled: [DRAPartitionableDevices]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFeatureGates(tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFeatureGates(%q) = %+v, %v; want an error with %q", tc.value, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFeatureGates(%q): %v", tc.value, err)
			}
			if got != tc.want {
				t.Errorf("ParseFeatureGates(%q) = %+v, want %+v", tc.value, got, tc.want)
			}
		})
	}
}

func TestDefaultFeatures(t *testing.T) {
	if got := DefaultFeatures(); got != defaults137 {
		t.Errorf("DefaultFeatures() = %+v, want %+v", got, defaults137)
	}
}

// TestFeatureGatesRefusedValueKeepsState: a refused value changes none of the gates, and
// leaves nothing behind that refuses a later good value (featuregate's own Set keeps the pairs
// of a refused value and fails again on the next call).
func TestFeatureGatesRefusedValueKeepsState(t *testing.T) {
	g := NewFeatureGates()
	if err := g.Set("DRAListTypeAttributes=true"); err != nil {
		t.Fatal(err)
	}
	want := withFeatures(func(f *structured.Features) { f.ListTypeAttributes = true })
	for _, bad := range []string{"DRADeviceTaints=false,DRAFoo=true", "DRADeviceTaints=false,DRAPrioritizedList=false", "DRAListTypeAttributes=false,DRAConsumableCapacity=false,DRAFractionalCapacityRange=true"} {
		if err := g.Set(bad); err == nil {
			t.Fatalf("Set(%q) succeeded", bad)
		}
		if got := g.Features(); got != want {
			t.Errorf("after the refused %q: %+v, want %+v", bad, got, want)
		}
	}
	if err := g.Set("DRADeviceTaints=false"); err != nil {
		t.Fatalf("a good value after refused ones: %v", err)
	}
	want.DeviceTaints = false
	if got := g.Features(); got != want {
		t.Errorf("after DRADeviceTaints=false: %+v, want %+v", got, want)
	}
	if got, want := g.String(), "DRADeviceTaints=false,DRAListTypeAttributes=true"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
