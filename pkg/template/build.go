package template

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	apitemplate "github.com/accel-dra/accel-dra/api/template"
)

// ErrIncompletePool is returned by Build when a pool of the node is being updated: its newest
// generation does not have all the ResourceSlices it announces. Try again later.
var ErrIncompletePool = errors.New("pool is incomplete")

// BuildOptions tune Build. The zero value is the documented default.
type BuildOptions struct {
	// IdentityAttributes names the device attributes whose values identify a particular
	// piece of hardware, and so differ between nodes of the same group. Their values are
	// replaced by placeholders. A name without a domain ("uuid") matches that identifier in any
	// domain, bare or qualified; a name with a domain matches exactly that attribute (also
	// written bare by a driver of that domain). Nil means DefaultIdentityAttributes().
	IdentityAttributes []string
	// KeepDeviceTaints keeps the taints a driver put on devices (their timeAdded cleared). By
	// default they are dropped: on the representative node they usually report a transient
	// state such as an unhealthy device, which a new node does not inherit.
	KeepDeviceTaints bool
}

// DefaultIdentityAttributes returns the attributes treated as node identity by default.
func DefaultIdentityAttributes() []string {
	return []string{
		"uuid",
		// A MIG device names its GPU by UUID; matchAttribute on it still works, as on pcieRoot.
		"parentUUID",
		"serial",
		"resource.kubernetes.io/pciBusID",
		"resource.kubernetes.io/pcieRoot",
		// NVLink and fabric IDs (docs/device-attributes.md): each names a set of GPUs of the
		// node by a digest of their PCI bus IDs, and the fabric clique names the node's NVL72
		// rack, so another node of the group has other values (other bus numbering, another
		// rack) while only which GPUs share a value matters to matchAttribute. As placeholders
		// they keep that, list values included (nvlinkCliques: which GPUs share a clique), and a
		// template node is in no real node's clique. Ascend's hccsGroup ("ring-0") is the same
		// on every node of a model and stays as it is.
		"nvlinkIsland",
		"nvlinkGroup2",
		"nvlinkGroup4",
		"nvlinkGroup8",
		"nvlinkCliques",
		"fabricClique",
	}
}

// Build makes the template of the node whose ResourceSlices are given: all slices published for
// that node by all drivers. It strips node identity (node and pool names, generations, slice
// counts, object metadata), merges each pool's slices, sorts everything, and replaces the values
// of identity attributes with placeholders.
//
// Placeholders are assigned in order of first appearance over the drivers sorted by name and
// pool suffix, their devices sorted by name, and each device's attributes sorted by name. The
// values of one attribute map to placeholders one to one, so devices that shared a value still
// share one, and two nodes of the same shape give byte-identical templates. String values become
// "<attribute-id>-<n>" (for example "pcie-root-0"), versions "0.0.<n>", integers <n>; booleans
// are kept. One numbering is used per fully qualified attribute name, across drivers, so that
// a matchAttribute constraint on resource.kubernetes.io/pcieRoot between a GPU and a NIC still
// works.
//
// Only node-local slices (spec.nodeName set) of a single node are accepted.
func Build(slices []resourceapi.ResourceSlice, opts BuildOptions) (*Template, error) {
	identity := opts.IdentityAttributes
	if identity == nil {
		identity = DefaultIdentityAttributes()
	}

	nodeName := ""
	type poolKey struct{ driver, pool string }
	pools := map[poolKey][]*resourceapi.ResourceSlice{}
	for i := range slices {
		s := &slices[i]
		switch {
		case s.Spec.NodeName == nil || *s.Spec.NodeName == "":
			return nil, fmt.Errorf("resourceslice %s: only node-local slices (spec.nodeName) can be templated", s.Name)
		case nodeName == "":
			nodeName = *s.Spec.NodeName
		case *s.Spec.NodeName != nodeName:
			return nil, fmt.Errorf("resourceslice %s: node %q, but other slices are of node %q", s.Name, *s.Spec.NodeName, nodeName)
		}
		if s.Spec.PerDeviceNodeSelection != nil || s.Spec.AllNodes != nil || s.Spec.NodeSelector != nil {
			return nil, fmt.Errorf("resourceslice %s: node selection other than spec.nodeName is not supported", s.Name)
		}
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		pools[k] = append(pools[k], s)
	}

	poolsOfDriver := map[string]int{}
	for k := range pools {
		poolsOfDriver[k.driver]++
	}

	t := &Template{APIVersion: APIVersion, Kind: Kind, Drivers: []Driver{}}
	for k, poolSlices := range pools {
		suffix := ""
		if poolsOfDriver[k.driver] > 1 {
			// A driver with several pools per node must name them after the node, so that
			// a template node gets distinct pools of the same shape.
			var ok bool
			suffix, ok = strings.CutPrefix(k.pool, nodeName)
			if !ok {
				return nil, fmt.Errorf("driver %s: pool %q of node %q does not start with the node name; cannot template several such pools", k.driver, k.pool, nodeName)
			}
		}
		d, err := mergePool(k.driver, k.pool, poolSlices, opts.KeepDeviceTaints)
		if err != nil {
			return nil, err
		}
		d.PoolSuffix = suffix
		t.Drivers = append(t.Drivers, *d)
	}
	t.normalize()
	t.IdentityAttributes = assignPlaceholders(t.Drivers, newIdentityMatcher(identity))

	if err := t.validate(); err != nil {
		return nil, fmt.Errorf("template of node %s: %w", nodeName, err)
	}
	return t, nil
}

// mergePool merges the newest generation of one pool's slices.
func mergePool(driver, pool string, poolSlices []*resourceapi.ResourceSlice, keepTaints bool) (*Driver, error) {
	gen := poolSlices[0].Spec.Pool.Generation
	for _, s := range poolSlices {
		gen = max(gen, s.Spec.Pool.Generation)
	}
	var current []*resourceapi.ResourceSlice
	for _, s := range poolSlices {
		if s.Spec.Pool.Generation == gen {
			current = append(current, s)
		}
	}
	for _, s := range current {
		if s.Spec.Pool.ResourceSliceCount != int64(len(current)) {
			return nil, fmt.Errorf("driver %s pool %s generation %d: %d slices seen, %d announced: %w",
				driver, pool, gen, len(current), s.Spec.Pool.ResourceSliceCount, ErrIncompletePool)
		}
	}
	// Map iteration gave the pools in random order and the API lists slices in name order;
	// sort so that errors and merged results do not depend on either.
	slices.SortFunc(current, func(a, b *resourceapi.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })

	d := &Driver{Name: driver}
	pta, skip := "", ""
	for _, s := range current {
		if len(s.Spec.Devices) > 0 {
			ops := make([]string, len(s.Spec.SkipNodeOperations))
			for i, op := range s.Spec.SkipNodeOperations {
				ops[i] = string(op)
			}
			slices.Sort(ops)
			// The slice-level fields are kept once per pool; a pool whose device slices
			// disagree cannot be merged without losing what the driver meant.
			joined := fmt.Sprint(ops)
			if skip == "" {
				skip = joined
				d.SkipNodeOperations = ops
			} else if joined != skip {
				return nil, fmt.Errorf("driver %s pool %s: slices differ in skipNodeOperations", driver, pool)
			}
		}
		if slices.ContainsFunc(s.Spec.Devices, func(dev resourceapi.Device) bool { return len(dev.ConsumesCounters) > 0 }) {
			v := "<none>"
			if s.Spec.PartitionTypeAttribute != nil {
				v = string(*s.Spec.PartitionTypeAttribute)
			}
			if pta == "" {
				pta = v
				if p := s.Spec.PartitionTypeAttribute; p != nil {
					d.PartitionTypeAttribute = new(*p)
				}
			} else if v != pta {
				return nil, fmt.Errorf("driver %s pool %s: slices differ in partitionTypeAttribute", driver, pool)
			}
		}
		for _, cs := range s.Spec.SharedCounters {
			d.SharedCounters = append(d.SharedCounters, *cs.DeepCopy())
		}
		for i := range s.Spec.Devices {
			dev := s.Spec.Devices[i].DeepCopy()
			if dev.NodeName != nil || dev.NodeSelector != nil || dev.AllNodes != nil {
				return nil, fmt.Errorf("driver %s pool %s device %s: per-device node selection is not supported", driver, pool, dev.Name)
			}
			if keepTaints {
				for j := range dev.Taints {
					dev.Taints[j].TimeAdded = nil
				}
			} else {
				dev.Taints = nil
			}
			d.Devices = append(d.Devices, *dev)
		}
	}
	if len(d.SkipNodeOperations) == 0 {
		d.SkipNodeOperations = nil
	}
	return d, nil
}

// normalize sorts everything whose order carries no meaning, so that equal templates encode
// to equal bytes: what the reader sorts, and the compatibility groups of counter consumptions,
// which only this module's k8s.io/api has. Order that does carry meaning (list attribute
// values, binding conditions) is kept.
func (t *Template) normalize() {
	t.api().Normalize()
	for i := range t.Drivers {
		for j := range t.Drivers[i].Devices {
			dev := &t.Drivers[i].Devices[j]
			for k := range dev.ConsumesCounters {
				slices.Sort(dev.ConsumesCounters[k].CompatibilityGroups)
			}
		}
	}
}

// identityMatcher decides whether an attribute is an identity attribute.
type identityMatcher struct {
	ids   map[string]bool // names without a domain: match the identifier in any domain
	exact map[string]bool // fully qualified names
}

func newIdentityMatcher(names []string) identityMatcher {
	m := identityMatcher{ids: map[string]bool{}, exact: map[string]bool{}}
	for _, n := range names {
		if strings.Contains(n, "/") {
			m.exact[n] = true
		} else {
			m.ids[n] = true
		}
	}
	return m
}

func (m identityMatcher) match(fq string) bool {
	_, id, _ := strings.Cut(fq, "/")
	return m.exact[fq] || m.ids[id]
}

// qualify returns the fully qualified name of an attribute of a device of the driver.
func qualify(driver string, name resourceapi.QualifiedName) string {
	return apitemplate.Qualify(driver, name)
}

// assignPlaceholders replaces identity attribute values in place and returns the fully
// qualified names of the attributes it replaced, sorted. drivers must be normalized.
func assignPlaceholders(drivers []Driver, m identityMatcher) []resourceapi.FullyQualifiedName {
	type tableKey struct{ attr, kind string }
	tables := map[tableKey]map[string]int{}
	lookup := func(attr, kind, value string) int {
		k := tableKey{attr, kind}
		tbl := tables[k]
		if tbl == nil {
			tbl = map[string]int{}
			tables[k] = tbl
		}
		n, ok := tbl[value]
		if !ok {
			n = len(tbl)
			tbl[value] = n
		}
		return n
	}
	used := map[resourceapi.FullyQualifiedName]bool{}
	for i := range drivers {
		d := &drivers[i]
		for j := range d.Devices {
			dev := &d.Devices[j]
			names := make([]resourceapi.QualifiedName, 0, len(dev.Attributes))
			for name := range dev.Attributes {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				fq := qualify(d.Name, name)
				if !m.match(fq) {
					continue
				}
				a := dev.Attributes[name]
				prefix := placeholderPrefix(fq)
				str := func(v string) string { return prefix + "-" + strconv.Itoa(lookup(fq, "string", v)) }
				ver := func(v string) string { return "0.0." + strconv.Itoa(lookup(fq, "version", v)) }
				num := func(v int64) int64 { return int64(lookup(fq, "int", strconv.FormatInt(v, 10))) }
				a, ok := MapAttributeValues(a, str, ver, num)
				if !ok {
					// Booleans cannot identify hardware; keep them.
					continue
				}
				dev.Attributes[name] = a
				used[resourceapi.FullyQualifiedName(fq)] = true
			}
		}
	}
	var out []resourceapi.FullyQualifiedName
	for fq := range used {
		out = append(out, fq)
	}
	slices.Sort(out)
	return out
}

// MapAttributeValues returns a with its value (or each of its values) mapped by the function of
// its type; ok is false for a boolean, which is returned as it is.
func MapAttributeValues(a resourceapi.DeviceAttribute, str, ver func(string) string, num func(int64) int64) (_ resourceapi.DeviceAttribute, ok bool) {
	switch {
	case a.StringValue != nil:
		a.StringValue = new(str(*a.StringValue))
	case a.VersionValue != nil:
		a.VersionValue = new(ver(*a.VersionValue))
	case a.IntValue != nil:
		a.IntValue = new(num(*a.IntValue))
	case a.StringValues != nil:
		a.StringValues = mapSlice(a.StringValues, str)
	case a.VersionValues != nil:
		a.VersionValues = mapSlice(a.VersionValues, ver)
	case a.IntValues != nil:
		a.IntValues = mapSlice(a.IntValues, num)
	default:
		return a, false
	}
	return a, true
}

func mapSlice[T any](in []T, f func(T) T) []T {
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// placeholderPrefix turns the identifier of an attribute into a readable prefix for its
// placeholders: "resource.kubernetes.io/pcieRoot" becomes "pcie-root", "pciBusID" "pci-bus-id".
// It is capped so that a placeholder stays within MaxPlaceholderLength.
func placeholderPrefix(fq string) string {
	_, id, _ := strings.Cut(fq, "/")
	var b strings.Builder
	runes := []rune(id)
	for i, r := range runes {
		lower := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		upper := r >= 'A' && r <= 'Z'
		switch {
		case upper:
			// A new word starts at an upper-case letter after a lower-case one, or at the
			// last upper-case letter of an acronym followed by a lower-case one ("PCIeRoot").
			prevLower := i > 0 && (runes[i-1] >= 'a' && runes[i-1] <= 'z' || runes[i-1] >= '0' && runes[i-1] <= '9')
			nextLower := i+1 < len(runes) && runes[i+1] >= 'a' && runes[i+1] <= 'z'
			prevUpper := i > 0 && runes[i-1] >= 'A' && runes[i-1] <= 'Z'
			if b.Len() > 0 && (prevLower || prevUpper && nextLower) {
				b.WriteByte('-')
			}
			b.WriteRune(r - 'A' + 'a')
		case lower:
			b.WriteRune(r)
		default: // '_' in a C identifier
			if b.Len() > 0 {
				b.WriteByte('-')
			}
		}
	}
	p := strings.Trim(b.String(), "-")
	// Room for "-" and a number of up to six digits.
	if len(p) > MaxPlaceholderLength-7 {
		p = strings.TrimRight(p[:MaxPlaceholderLength-7], "-")
	}
	if p == "" {
		p = "id"
	}
	return p
}

// IdentityMatcher returns what reports whether Build with opts replaces the values of a
// driver's attribute with placeholders (BuildOptions.IdentityAttributes).
func (opts BuildOptions) IdentityMatcher() func(driver string, name resourceapi.QualifiedName) bool {
	identity := opts.IdentityAttributes
	if identity == nil {
		identity = DefaultIdentityAttributes()
	}
	m := newIdentityMatcher(identity)
	return func(driver string, name resourceapi.QualifiedName) bool { return m.match(qualify(driver, name)) }
}
