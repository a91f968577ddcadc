package template

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// Difference is one way in which a node's template differs from another template (Diff).
type Difference struct {
	// Pool is the driver entry: the driver name, followed by its pool suffix if it has one.
	// Empty for a difference outside the devices (the node group's capacity keys, which the
	// publisher compares).
	Pool string
	// Device is the device's name; empty for a difference of the pool (a pool or counter set
	// that only one side has, or the pool's own fields).
	Device string
	// What differs: "pool", "device", "attribute <name>", "capacity <name>", "counter set
	// <name>", or "fields" for the device's or pool's other fields.
	What string
	// Template and Node are the two values; "<none>" where that side lacks it. Values are
	// shortened to maxValue characters.
	Template, Node string
}

func (d Difference) String() string {
	where := d.Pool
	if d.Device != "" {
		where += " device " + d.Device
	}
	if where == "" {
		return fmt.Sprintf("%s: template %s, node %s", d.What, d.Template, d.Node)
	}
	return fmt.Sprintf("%s %s: template %s, node %s", where, d.What, d.Template, d.Node)
}

const (
	absent = "<none>"
	// maxValue bounds each value in a Difference, so that a difference report (an event, an
	// annotation) stays small whatever a device carries.
	maxValue = 64
)

// Diff lists how the template of a node (node) differs from a template (t), modulo
// placeholders: the values of identity attributes of either template are not compared, since
// they are placeholders whose numbering depends on the node. Two templates of the same shape
// have no differences. Differences come in document order: pools, then their counter sets and
// devices by name, each device's attributes and capacities by name.
func Diff(t, node *Template) []Difference {
	identity := map[resourceapi.FullyQualifiedName]bool{}
	for _, a := range append(slices.Clone(t.IdentityAttributes), node.IdentityAttributes...) {
		identity[a] = true
	}
	pools := pair(t.Drivers, node.Drivers, func(d *Driver) string { return d.Name + d.PoolSuffix })
	var out []Difference
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		p := pools[name]
		if p[0] == nil || p[1] == nil {
			out = append(out, Difference{Pool: name, What: "pool", Template: presence(p[0] != nil), Node: presence(p[1] != nil)})
			continue
		}
		out = append(out, diffPool(name, p[0], p[1], identity)...)
	}
	return out
}

// pair matches the elements of a (the template's) and b (the node's) by key; an element only
// one side has gets nil on the other.
func pair[T any](a, b []T, key func(*T) string) map[string][2]*T {
	out := map[string][2]*T{}
	for side, list := range [2][]T{a, b} {
		for i := range list {
			p := out[key(&list[i])]
			p[side] = &list[i]
			out[key(&list[i])] = p
		}
	}
	return out
}

func presence(ok bool) string {
	if ok {
		return "present"
	}
	return absent
}

func diffPool(pool string, t, n *Driver, identity map[resourceapi.FullyQualifiedName]bool) []Difference {
	var out []Difference
	// The pool's own fields.
	tf, nf := *t, *n
	tf.SharedCounters, tf.Devices, nf.SharedCounters, nf.Devices = nil, nil, nil, nil
	if a, b := jsonString(tf), jsonString(nf); a != b {
		out = append(out, Difference{Pool: pool, What: "fields", Template: short(a), Node: short(b)})
	}
	sets := pair(t.SharedCounters, n.SharedCounters, func(c *resourceapi.CounterSet) string { return c.Name })
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		s := sets[name]
		a, b := absent, absent
		if s[0] != nil {
			a = jsonString(s[0].Counters)
		}
		if s[1] != nil {
			b = jsonString(s[1].Counters)
		}
		if a != b {
			out = append(out, Difference{Pool: pool, What: "counter set " + name, Template: short(a), Node: short(b)})
		}
	}
	devs := pair(t.Devices, n.Devices, func(d *resourceapi.Device) string { return d.Name })
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		d := devs[name]
		if d[0] == nil || d[1] == nil {
			out = append(out, Difference{Pool: pool, Device: name, What: "device", Template: presence(d[0] != nil), Node: presence(d[1] != nil)})
			continue
		}
		out = append(out, diffDevice(pool, t.Name, d[0], d[1], identity)...)
	}
	return out
}

func diffDevice(pool, driver string, t, n *resourceapi.Device, identity map[resourceapi.FullyQualifiedName]bool) []Difference {
	var out []Difference
	add := func(what, a, b string) {
		out = append(out, Difference{Pool: pool, Device: t.Name, What: what, Template: short(a), Node: short(b)})
	}
	names := slices.Sorted(maps.Keys(t.Attributes))
	for name := range n.Attributes {
		if _, ok := t.Attributes[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if identity[resourceapi.FullyQualifiedName(qualify(driver, name))] {
			continue
		}
		a, b := attributeString(t.Attributes, name), attributeString(n.Attributes, name)
		if a != b {
			add("attribute "+string(name), a, b)
		}
	}
	names = slices.Sorted(maps.Keys(t.Capacity))
	for name := range n.Capacity {
		if _, ok := t.Capacity[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		a, b := capacityString(t.Capacity, name), capacityString(n.Capacity, name)
		if a != b {
			add("capacity "+string(name), a, b)
		}
	}
	// Everything else (counter consumption, multiple allocations, taints, binding conditions)
	// as a whole: rarely different, and then the JSON says how.
	tr, nr := *t, *n
	tr.Attributes, tr.Capacity, nr.Attributes, nr.Capacity = nil, nil, nil, nil
	if a, b := jsonString(tr), jsonString(nr); a != b {
		add("fields", a, b)
	}
	return out
}

func attributeString(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name resourceapi.QualifiedName) string {
	a, ok := attrs[name]
	if !ok {
		return absent
	}
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return jsonString(a)
}

func capacityString(c map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, name resourceapi.QualifiedName) string {
	v, ok := c[name]
	if !ok {
		return absent
	}
	if v.RequestPolicy == nil {
		return v.Value.String()
	}
	return v.Value.String() + " " + jsonString(v.RequestPolicy)
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

func short(s string) string {
	if r := []rune(s); len(r) > maxValue {
		return string(r[:maxValue-1]) + "…"
	}
	return s
}

// FormatDifferences joins differences into one line of at most max bytes (at least the
// first difference, shortened): "a; b; c; and 5 more".
func FormatDifferences(diffs []Difference, max int) string {
	var b strings.Builder
	for i, d := range diffs {
		s := d.String()
		if i > 0 {
			s = "; " + s
		}
		rest := ""
		if left := len(diffs) - i - 1; left > 0 {
			rest = fmt.Sprintf("; and %d more", left)
		}
		if b.Len()+len(s)+len(rest) > max && i > 0 {
			fmt.Fprintf(&b, "; and %d more", len(diffs)-i)
			break
		}
		b.WriteString(s)
	}
	return b.String()
}
