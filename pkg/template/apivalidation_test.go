package template

import (
	"fmt"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
)

// validateAPI checks template-node slices the way the API server
// (k8s.io/kubernetes/pkg/apis/resource/validation, v1.37, which this module cannot import) and
// the allocator's pool gathering (k8s.io/dynamic-resource-allocation/resourceslice's unexported
// validatePool) would. It is written against the slices, independently of the package's own
// template validation, so that a disagreement shows up in the fuzz test. Not covered: the
// arithmetic of capacity requestPolicy ranges, which depends on feature gates.
func validateAPI(slices []*resourceapi.ResourceSlice, nodeName string) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	names := sets.New[string]()
	type poolKey struct{ driver, pool string }
	pools := map[poolKey][]*resourceapi.ResourceSlice{}
	for _, s := range slices {
		p := "slice " + s.Name
		for _, msg := range validation.IsDNS1123Subdomain(s.Name) {
			add("%s: name: %s", p, msg)
		}
		if names.Has(s.Name) {
			add("%s: duplicate name", p)
		}
		names.Insert(s.Name)
		if s.Namespace != "" || s.UID != "" || s.ResourceVersion != "" || len(s.OwnerReferences) > 0 || len(s.ManagedFields) > 0 {
			add("%s: object metadata other than the name is set", p)
		}
		errs = append(errs, apiValidateSpec(p, &s.Spec)...)
		if s.Spec.NodeName == nil || *s.Spec.NodeName != nodeName {
			add("%s: nodeName is not %q", p, nodeName)
		}
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		pools[k] = append(pools[k], s)
	}
	for k, ps := range pools {
		p := fmt.Sprintf("driver %s pool %s", k.driver, k.pool)
		counterSets := map[string]resourceapi.CounterSet{}
		for _, s := range ps {
			if s.Spec.Pool.ResourceSliceCount != int64(len(ps)) || s.Spec.Pool.Generation != ps[0].Spec.Pool.Generation {
				add("%s: slice %s: generation %d count %d, but the pool has %d slices", p, s.Name, s.Spec.Pool.Generation, s.Spec.Pool.ResourceSliceCount, len(ps))
			}
			for _, cs := range s.Spec.SharedCounters {
				if _, found := counterSets[cs.Name]; found {
					add("%s: duplicate counter set %q", p, cs.Name)
				}
				counterSets[cs.Name] = cs
			}
		}
		devices := sets.New[string]()
		for _, s := range ps {
			for _, d := range s.Spec.Devices {
				if devices.Has(d.Name) {
					add("%s: duplicate device %q", p, d.Name)
				}
				devices.Insert(d.Name)
				for _, dcc := range d.ConsumesCounters {
					cs, found := counterSets[dcc.CounterSet]
					if !found {
						add("%s: counter set %q of device %q not found", p, dcc.CounterSet, d.Name)
						continue
					}
					for c := range dcc.Counters {
						if _, found := cs.Counters[c]; !found {
							add("%s: counter %q of device %q not in set %q", p, c, d.Name, dcc.CounterSet)
						}
					}
				}
			}
		}
	}
	return errs
}

func apiValidateSpec(p string, spec *resourceapi.ResourceSliceSpec) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(p+": "+format, args...)) }
	if spec.Driver == "" || len(spec.Driver) > 63 || len(validation.IsDNS1123Subdomain(strings.ToLower(spec.Driver))) > 0 {
		add("invalid driver %q", spec.Driver)
	}
	if spec.Pool.Name == "" || len(spec.Pool.Name) > 253 {
		add("invalid pool name length")
	}
	for _, part := range strings.Split(spec.Pool.Name, "/") {
		if len(validation.IsDNS1123Subdomain(part)) > 0 {
			add("invalid pool name %q", spec.Pool.Name)
		}
	}
	if spec.Pool.ResourceSliceCount <= 0 || spec.Pool.Generation < 0 {
		add("invalid pool generation/count")
	}
	if spec.NodeName == nil || len(validation.IsDNS1123Subdomain(*spec.NodeName)) > 0 {
		add("nodeName must be a valid node name")
	}
	if spec.NodeSelector != nil || spec.AllNodes != nil || spec.PerDeviceNodeSelection != nil {
		add("only nodeName may be set")
	}
	if spec.SharedCounters != nil && spec.Devices != nil {
		add("only one of sharedCounters or devices is allowed")
	}
	maxDevices := 128
	for _, d := range spec.Devices {
		if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
			maxDevices = 64
		}
		for _, a := range d.Attributes {
			if a.BoolValues != nil || a.IntValues != nil || a.StringValues != nil || a.VersionValues != nil {
				maxDevices = 64
			}
		}
	}
	if len(spec.Devices) > maxDevices {
		add("%d devices, at most %d", len(spec.Devices), maxDevices)
	}
	names := sets.New[string]()
	for _, d := range spec.Devices {
		if names.Has(d.Name) {
			add("duplicate device %q", d.Name)
		}
		names.Insert(d.Name)
		for _, e := range apiValidateDevice(d) {
			add("device %q: %v", d.Name, e)
		}
	}
	if len(spec.SharedCounters) > 8 {
		add("%d counter sets, at most 8", len(spec.SharedCounters))
	}
	csNames := sets.New[string]()
	for _, cs := range spec.SharedCounters {
		if csNames.Has(cs.Name) {
			add("duplicate counter set %q", cs.Name)
		}
		csNames.Insert(cs.Name)
		if len(validation.IsDNS1123Label(cs.Name)) > 0 || len(cs.Counters) == 0 || len(cs.Counters) > 32 {
			add("invalid counter set %q", cs.Name)
		}
		for c := range cs.Counters {
			if len(validation.IsDNS1123Label(c)) > 0 {
				add("invalid counter name %q", c)
			}
		}
	}
	if pta := spec.PartitionTypeAttribute; pta != nil {
		consumers := false
		for _, d := range spec.Devices {
			if len(d.ConsumesCounters) == 0 {
				continue
			}
			consumers = true
			bare, _ := strings.CutPrefix(string(*pta), spec.Driver+"/")
			a, ok := d.Attributes[resourceapi.QualifiedName(*pta)]
			if !ok {
				a, ok = d.Attributes[resourceapi.QualifiedName(bare)]
			}
			if !ok || a.StringValue == nil {
				add("device %q lacks string partition type attribute", d.Name)
			}
		}
		if !consumers {
			add("partitionTypeAttribute without counter consumers")
		}
		if !strings.Contains(string(*pta), "/") || apiQualifiedName(string(*pta)) != nil {
			add("invalid partitionTypeAttribute %q", *pta)
		}
	}
	ops := sets.New(spec.SkipNodeOperations...)
	if ops.Len() != len(spec.SkipNodeOperations) {
		add("duplicate skipNodeOperations")
	}
	for op := range ops {
		if op != resourceapi.SkipNodeOperationAll && op != resourceapi.SkipNodeOperationNodePrepareResources && op != resourceapi.SkipNodeOperationNodeUnprepareResources {
			add("unknown skipNodeOperation %q", op)
		}
	}
	if ops.Has(resourceapi.SkipNodeOperationNodePrepareResources) && !ops.Has(resourceapi.SkipNodeOperationNodeUnprepareResources) && !ops.Has(resourceapi.SkipNodeOperationAll) {
		add("NodePrepareResources skipped without NodeUnprepareResources")
	}
	return errs
}

var apiSemver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

func apiValidateDevice(d resourceapi.Device) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(validation.IsDNS1123Label(d.Name)) > 0 {
		add("invalid name")
	}
	if len(d.Attributes)+len(d.Capacity) > 32 {
		add("too many attributes and capacities")
	}
	values := 0
	for name, a := range d.Attributes {
		if err := apiQualifiedName(string(name)); err != nil {
			add("attribute %q: %v", name, err)
		}
		n := 0
		strs := []string{}
		vers := []string{}
		if a.IntValue != nil {
			n++
		}
		if a.BoolValue != nil {
			n++
		}
		if a.StringValue != nil {
			n++
			strs = append(strs, *a.StringValue)
		}
		if a.VersionValue != nil {
			n++
			vers = append(vers, *a.VersionValue)
		}
		lists := [][]int{{len(a.IntValues), b2i(a.IntValues != nil)}, {len(a.BoolValues), b2i(a.BoolValues != nil)},
			{len(a.StringValues), b2i(a.StringValues != nil)}, {len(a.VersionValues), b2i(a.VersionValues != nil)}}
		listValues := 0
		for _, l := range lists {
			if l[1] == 1 {
				n++
				if l[0] == 0 {
					add("attribute %q: empty list", name)
				}
			}
			listValues += l[0]
		}
		strs = append(strs, a.StringValues...)
		vers = append(vers, a.VersionValues...)
		if n != 1 {
			add("attribute %q: exactly one value must be set", name)
		}
		if listValues == 0 {
			values++
		} else {
			values += listValues
		}
		for _, s := range append(strs, vers...) {
			if len(s) > 64 {
				add("attribute %q: value too long", name)
			}
		}
		for _, v := range vers {
			if !apiSemver.MatchString(v) {
				add("attribute %q: %q not semver", name, v)
			}
		}
	}
	if values > 48 {
		add("too many attribute values")
	}
	multi := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
	for name, c := range d.Capacity {
		if err := apiQualifiedName(string(name)); err != nil {
			add("capacity %q: %v", name, err)
		}
		if c.RequestPolicy != nil && !multi {
			add("capacity %q: requestPolicy without allowMultipleAllocations", name)
		}
	}
	if len(d.Taints) > 16 {
		add("too many taints")
	}
	for _, t := range d.Taints {
		if len(validation.IsQualifiedName(t.Key)) > 0 || len(validation.IsValidLabelValue(t.Value)) > 0 ||
			!sets.New(resourceapi.DeviceTaintEffectNone, resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute).Has(t.Effect) {
			add("invalid taint %v", t)
		}
	}
	if len(d.ConsumesCounters) > 2 {
		add("too many consumesCounters")
	}
	sets_ := sets.New[string]()
	for _, cc := range d.ConsumesCounters {
		if sets_.Has(cc.CounterSet) {
			add("duplicate counterSet %q", cc.CounterSet)
		}
		sets_.Insert(cc.CounterSet)
		if len(validation.IsDNS1123Label(cc.CounterSet)) > 0 || len(cc.Counters) == 0 || len(cc.Counters) > 32 {
			add("invalid consumesCounters %q", cc.CounterSet)
		}
		for c := range cc.Counters {
			if len(validation.IsDNS1123Label(c)) > 0 {
				add("invalid counter %q", c)
			}
		}
		if len(cc.CompatibilityGroups) > 2 || sets.New(cc.CompatibilityGroups...).Len() != len(cc.CompatibilityGroups) {
			add("invalid compatibilityGroups")
		}
		for _, g := range cc.CompatibilityGroups {
			if len(validation.IsDNS1123Label(g)) > 0 {
				add("invalid compatibility group %q", g)
			}
		}
	}
	if d.NodeName != nil || d.NodeSelector != nil || d.AllNodes != nil {
		add("per-device node selection without perDeviceNodeSelection")
	}
	bc, bfc := d.BindingConditions, d.BindingFailureConditions
	if len(bc) > 4 || len(bfc) > 4 || (len(bc) == 0) != (len(bfc) == 0) {
		add("invalid binding conditions")
	}
	all := append(append([]string{}, bc...), bfc...)
	if sets.New(all...).Len() != len(all) {
		add("duplicate binding conditions")
	}
	for _, c := range all {
		if len(validation.IsQualifiedName(c)) > 0 {
			add("invalid binding condition %q", c)
		}
	}
	for name, r := range d.NodeAllocatableResources {
		if name != "cpu" && name != "memory" && !strings.HasPrefix(string(name), "hugepages-") {
			add("nodeAllocatableResources %q: not node allocatable", name)
		}
		if r.Mapping == nil && r.Overhead == nil {
			add("nodeAllocatableResources %q: empty", name)
		}
		if m := r.Mapping; m != nil {
			if m.CapacityKey != nil {
				if _, ok := d.Capacity[*m.CapacityKey]; !ok {
					add("nodeAllocatableResources %q: unknown capacityKey", name)
				}
				if m.CapacityMultiplier == nil || m.CapacityMultiplier.Sign() <= 0 {
					add("nodeAllocatableResources %q: capacityMultiplier", name)
				}
			} else if m.CapacityMultiplier != nil {
				add("nodeAllocatableResources %q: capacityMultiplier without capacityKey", name)
			}
			if m.DeviceMultiplier != nil && m.DeviceMultiplier.Sign() <= 0 {
				add("nodeAllocatableResources %q: deviceMultiplier", name)
			}
		}
		if o := r.Overhead; o != nil {
			if o.PerPod == nil && o.PerContainer == nil ||
				o.PerPod != nil && o.PerPod.Sign() < 0 || o.PerContainer != nil && o.PerContainer.Sign() < 0 {
				add("nodeAllocatableResources %q: invalid overhead", name)
			}
		}
	}
	return errs
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var apiCIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func apiQualifiedName(name string) error {
	parts := strings.Split(name, "/")
	id := parts[0]
	switch len(parts) {
	case 1:
	case 2:
		domain := parts[0]
		if domain == "" || len(domain) > 63 || len(validation.IsDNS1123Subdomain(strings.ToLower(domain))) > 0 {
			return fmt.Errorf("invalid domain %q", domain)
		}
		id = parts[1]
	default:
		return fmt.Errorf("more than one slash")
	}
	if len(id) > 32 || !apiCIdentifier.MatchString(id) {
		return fmt.Errorf("invalid identifier %q", id)
	}
	return nil
}
