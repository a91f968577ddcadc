package accelctl

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/structured"
)

// schedulerVersion is the kube-scheduler whose feature gates simulate models. Its gates are
// evaluated as that binary evaluates them by default: emulation version 1.37 and minimum
// compatibility version 1.36 (component-base's compatibility.NewEffectiveVersion).
var schedulerVersion = version.MajorMinor(1, 37)

// The kube-scheduler feature gates that decide a field of structured.Features, with their
// versioned specs and dependencies as k8s.io/kubernetes v1.37.1 pkg/features/kube_features.go
// declares them (entries of later releases left out), and the two gates they depend on.
// Copied, not imported: k8s.io/kubernetes is not a library.
const (
	gateDRA                    featuregate.Feature = "DynamicResourceAllocation"
	gateNodeDeclaredFeatures   featuregate.Feature = "NodeDeclaredFeatures"
	gateAdminAccess            featuregate.Feature = "DRAAdminAccess"
	gateCompatibilityGroups    featuregate.Feature = "DRADeviceCompatibilityGroups"
	gateConsumableCapacity     featuregate.Feature = "DRAConsumableCapacity"
	gateDerivedAttributes      featuregate.Feature = "DRADerivedAttributes"
	gateDeviceBindingConds     featuregate.Feature = "DRADeviceBindingConditions"
	gateResourceClaimDevStatus featuregate.Feature = "DRAResourceClaimDeviceStatus"
	gateDeviceTaints           featuregate.Feature = "DRADeviceTaints"
	gateFractionalCapacity     featuregate.Feature = "DRAFractionalCapacityRange"
	gateListTypeAttributes     featuregate.Feature = "DRAListTypeAttributes"
	gateOptionalNodeOperations featuregate.Feature = "DRAOptionalNodeOperations"
	gatePartitionableDevices   featuregate.Feature = "DRAPartitionableDevices"
	gatePrioritizedList        featuregate.Feature = "DRAPrioritizedList"
)

var schedulerGates = map[featuregate.Feature]featuregate.VersionedSpecs{
	gateDRA: {
		{Version: version.MustParse("1.26"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.32"), Default: false, PreRelease: featuregate.Beta},
		{Version: version.MustParse("1.34"), Default: true, PreRelease: featuregate.GA},
		{Version: version.MustParse("1.35"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
		// TODO (https://github.com/kubernetes/kubernetes/issues/134459): remove completely in 1.38
	},
	gateNodeDeclaredFeatures: {
		{Version: version.MustParse("1.35"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta},
		{Version: version.MustParse("1.37"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
	},
	gateAdminAccess: {
		{Version: version.MustParse("1.32"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.34"), Default: true, PreRelease: featuregate.Beta},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.GA, LockToDefault: true}, // GA in 1.36; remove in 1.39
	},
	gateCompatibilityGroups: {
		{Version: version.MustParse("1.37"), Default: false, PreRelease: featuregate.Alpha},
	},
	gateConsumableCapacity: {
		{Version: version.MustParse("1.34"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta},
	},
	gateDerivedAttributes: {
		{Version: version.MustParse("1.37"), Default: false, PreRelease: featuregate.Alpha},
	},
	gateDeviceBindingConds: {
		{Version: version.MustParse("1.34"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta},
	},
	gateResourceClaimDevStatus: {
		{Version: version.MustParse("1.32"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.33"), Default: true, PreRelease: featuregate.Beta},
		{Version: version.MustParse("1.37"), Default: true, PreRelease: featuregate.GA, LockToDefault: true}, // remove in 1.40
	},
	gateDeviceTaints: {
		{Version: version.MustParse("1.33"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta},
		{Version: version.MustParse("1.37"), Default: true, PreRelease: featuregate.GA, LockToDefault: false}, // LockToDefault: true in 1.38; remove in 1.41
	},
	// Beta in 1.37 but on by default only where every component is at least 1.37 (minimum
	// compatibility version 1.37); a 1.37 scheduler's default minimum is 1.36, so it is off.
	// Measured on kube-scheduler v1.37.1: --feature-gates=DRAConsumableCapacity=false starts,
	// and with --min-compatibility-version=1.37 it fails "DRAFractionalCapacityRange is
	// enabled, but depends on features that are disabled: [DRAConsumableCapacity]".
	gateFractionalCapacity: {
		{Version: version.MustParse("1.37"), Default: false, PreRelease: featuregate.Beta},
		{Version: version.MustParse("1.37"), Default: true, PreRelease: featuregate.Beta, MinCompatibilityVersion: version.MustParse("1.37")},
	},
	gateListTypeAttributes: {
		{Version: version.MustParse("1.36"), Default: false, PreRelease: featuregate.Alpha},
	},
	gateOptionalNodeOperations: {
		{Version: version.MustParse("1.37"), Default: false, PreRelease: featuregate.Alpha},
	},
	gatePartitionableDevices: {
		{Version: version.MustParse("1.33"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta},
	},
	gatePrioritizedList: {
		{Version: version.MustParse("1.33"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.34"), Default: true, PreRelease: featuregate.Beta},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.GA},
		{Version: version.MustParse("1.37"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
		// Remove completely in 1.40.
	},
}

var schedulerGateDependencies = map[featuregate.Feature][]featuregate.Feature{
	gateAdminAccess:            {gateDRA},
	gateCompatibilityGroups:    {gateDRA, gatePartitionableDevices},
	gateConsumableCapacity:     {gateDRA},
	gateDerivedAttributes:      {gateDRA},
	gateDeviceBindingConds:     {gateDRA, gateResourceClaimDevStatus},
	gateDeviceTaints:           {gateDRA},
	gateFractionalCapacity:     {gateConsumableCapacity},
	gateListTypeAttributes:     {gateDRA},
	gateOptionalNodeOperations: {gateDRA, gateNodeDeclaredFeatures},
	gatePartitionableDevices:   {gateDRA},
	gatePrioritizedList:        {gateDRA},
	gateResourceClaimDevStatus: {},
}

// FeatureGates is a set of kube-scheduler feature gates as its --feature-gates flag takes them,
// limited to the gates that change what the DRA allocator does. Each command gets its own,
// so a bad flag changes nothing beyond the command it was given to.
type FeatureGates struct {
	gate featuregate.MutableVersionedFeatureGate
}

// NewFeatureGates returns the gates of kube-scheduler 1.37 at their defaults.
func NewFeatureGates() *FeatureGates {
	g := featuregate.NewVersionedFeatureGate(schedulerVersion)
	// Both fail only on a malformed table above, which the tests would catch.
	if err := g.AddVersioned(schedulerGates); err != nil {
		panic(fmt.Sprintf("kube-scheduler feature gates: %v", err))
	}
	if err := g.AddDependencies(schedulerGateDependencies); err != nil {
		panic(fmt.Sprintf("kube-scheduler feature gate dependencies: %v", err))
	}
	return &FeatureGates{gate: g}
}

// AddFlag adds --feature-gates to fs, with kube-scheduler's syntax, help and errors. It does
// not use featuregate's own AddFlag: that flag keeps the pairs of a refused value, so a gate
// refused once would be refused again on every later Set.
func (g *FeatureGates) AddFlag(fs *pflag.FlagSet) {
	fs.Var(g, "feature-gates", "A set of key=value pairs that describe the feature gates of the cluster's kube-scheduler "+
		"(its --feature-gates, at its default --emulated-version and --min-compatibility-version) that change the DRA allocator; "+
		"other gates are refused. GA gates are not listed: DRADeviceTaints (default true) can be set, "+
		"DRAAdminAccess, DRAPrioritizedList, DRAResourceClaimDeviceStatus and DynamicResourceAllocation are locked to true. "+
		"Options are:\n"+strings.Join(g.gate.KnownFeatures(), "\n"))
}

// String lists the gates set explicitly (pflag.Value).
func (g *FeatureGates) String() string { return g.gate.(fmt.Stringer).String() }

// Type is the flag's type as kube-scheduler's help shows it (pflag.Value).
func (g *FeatureGates) Type() string { return "mapStringBool" }

// Set applies "Gate=bool,Gate=bool" as kube-scheduler's --feature-gates does: an unknown gate,
// a value that is not a bool, a locked gate set against its default or a gate on whose
// dependency is off is an error, and leaves the gates as they were.
func (g *FeatureGates) Set(value string) error {
	next := g.gate.DeepCopy()
	if err := next.Set(value); err != nil {
		return err
	}
	g.gate = next
	return nil
}

// Features are the allocator features kube-scheduler derives from the gates
// (pkg/scheduler/framework/plugins/dynamicresources of v1.37.1, through its feature.Features).
func (g *FeatureGates) Features() structured.Features {
	on := g.gate.Enabled
	return structured.Features{
		AdminAccess:             on(gateAdminAccess),
		CompatibilityGroups:     on(gateCompatibilityGroups),
		ConsumableCapacity:      on(gateConsumableCapacity),
		DerivedAttributes:       on(gateDerivedAttributes),
		DeviceBindingAndStatus:  on(gateDeviceBindingConds) && on(gateResourceClaimDevStatus),
		DeviceTaints:            on(gateDeviceTaints),
		FractionalCapacityRange: on(gateFractionalCapacity),
		ListTypeAttributes:      on(gateListTypeAttributes),
		OptionalNodeOperations:  on(gateOptionalNodeOperations),
		PartitionableDevices:    on(gatePartitionableDevices),
		PrioritizedList:         on(gatePrioritizedList),
	}
}

// DefaultFeatures are the allocator features of kube-scheduler 1.37 with its default gates:
// DRAAdminAccess, DRAPrioritizedList, DRAResourceClaimDeviceStatus (locked), DRADeviceTaints,
// DRAPartitionableDevices, DRAConsumableCapacity and DRADeviceBindingConditions on;
// DRAFractionalCapacityRange and the alpha gates off.
func DefaultFeatures() structured.Features { return NewFeatureGates().Features() }

// ParseFeatureGates returns the allocator features of kube-scheduler 1.37 run with
// --feature-gates=value.
func ParseFeatureGates(value string) (structured.Features, error) {
	g := NewFeatureGates()
	if err := g.Set(value); err != nil {
		return structured.Features{}, err
	}
	return g.Features(), nil
}
