package publisher

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unique"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	apitemplate "github.com/accel-dra/accel-dra/api/template"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// What the publisher keeps of a ResourceSlice. At fleet scale the slices are almost all of
// the cache (a dynamic-MIG node publishes 208 devices in 186 KB of JSON), yet the nodes of a
// group publish the same devices and differ only in the values of identity attributes (UUIDs,
// PCI addresses), which a template replaces with placeholders anyway. So the informer's
// transform (sliceStripper.transform) folds each slice of a served driver into:
//   - its shape: the spec with every identity value replaced by a token (its index in the
//     slice's identity table) and without driver, node and pool, as JSON interned with
//     package unique, so that the slices of all nodes of one shape share one string;
//   - the shape's hash and the slice's identity table (the values the tokens stand for);
//
// kept in annotations of the cached object (annotations no real slice has: the transform
// drops the slice's own), next to the driver, node and pool in the spec. Slices of drivers
// the publisher does not serve keep only what names them. expandSlice gives back the slice
// Build would have seen, value for value.
const (
	shapeAnnotation     = "publisher.accel-dra.io/shape"
	shapeHashAnnotation = "publisher.accel-dra.io/shape-hash"
	identityAnnotation  = "publisher.accel-dra.io/identity"
)

// identityValue is one entry of a slice's identity table.
type identityValue struct {
	// Attr is the attribute's fully qualified name, Kind its value's type (string, version,
	// int), Value the value (an int in decimal).
	Attr  string `json:"a"`
	Kind  string `json:"k"`
	Value string `json:"v"`
}

// sliceStripper compacts ResourceSlices for the cache (see above).
type sliceStripper struct {
	drivers    sets.Set[string]
	identity   func(driver string, name resourceapi.QualifiedName) bool
	keepTaints bool
}

func newSliceStripper(drivers []string, opts template.BuildOptions) *sliceStripper {
	return &sliceStripper{drivers: sets.New(drivers...), identity: opts.IdentityMatcher(), keepTaints: opts.KeepDeviceTaints}
}

// transform is the cache transform of ResourceSlices: it may change the object it is given,
// which the informer decoded for it alone.
func (s *sliceStripper) transform(obj any) (any, error) {
	sl, ok := obj.(*resourceapi.ResourceSlice)
	if !ok || compacted(sl) {
		// An informer may hand the transform an object it already transformed (client-go's
		// FIFO transforms on Replace as well as on the deltas it queued); compacting a compacted
		// slice would leave a shape without devices.
		return obj, nil
	}
	return s.compact(sl)
}

// compacted reports whether a slice is as the transform leaves it.
func compacted(sl *resourceapi.ResourceSlice) bool {
	_, ok := sl.Annotations[shapeHashAnnotation]
	return ok
}

// compact returns what the cache keeps of sl, reusing (and changing) sl's spec.
func (s *sliceStripper) compact(sl *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error) {
	out := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: sl.Name, UID: sl.UID, ResourceVersion: sl.ResourceVersion},
		Spec:       resourceapi.ResourceSliceSpec{Driver: sl.Spec.Driver, NodeName: sl.Spec.NodeName, Pool: sl.Spec.Pool},
	}
	if !s.drivers.Has(sl.Spec.Driver) {
		return out, nil
	}
	spec := &sl.Spec
	spec.Driver, spec.NodeName, spec.Pool = "", nil, resourceapi.ResourcePool{}
	tokens := map[identityValue]int{}
	var table []identityValue
	token := func(attr, kind, v string) int {
		k := identityValue{attr, kind, v}
		n, ok := tokens[k]
		if !ok {
			n = len(table)
			tokens[k] = n
			table = append(table, k)
		}
		return n
	}
	for i := range spec.Devices {
		d := &spec.Devices[i]
		if !s.keepTaints {
			// Build drops them; a taint's timeAdded would make every node's shape its own.
			d.Taints = nil
		}
		// Sorted, so that nodes of one shape number their values alike and share the shape.
		for _, name := range slices.Sorted(maps.Keys(d.Attributes)) {
			if !s.identity(out.Spec.Driver, name) {
				continue
			}
			fq := apitemplate.Qualify(out.Spec.Driver, name)
			a := d.Attributes[name]
			str := func(v string) string { return strconv.Itoa(token(fq, "string", v)) }
			ver := func(v string) string { return strconv.Itoa(token(fq, "version", v)) }
			num := func(v int64) int64 { return int64(token(fq, "int", strconv.FormatInt(v, 10))) }
			d.Attributes[name], _ = template.MapAttributeValues(a, str, ver, num)
		}
	}
	shape, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("resourceslice %s: %w", sl.Name, err)
	}
	ids, err := json.Marshal(table)
	if err != nil {
		return nil, fmt.Errorf("resourceslice %s: %w", sl.Name, err)
	}
	sum := sha256.Sum256(shape)
	out.Annotations = map[string]string{
		shapeAnnotation:     unique.Make(string(shape)).Value(),
		shapeHashAnnotation: unique.Make(hex.EncodeToString(sum[:])).Value(),
		identityAnnotation:  string(ids),
	}
	return out, nil
}

// expandSlice returns the slice a compacted one was made of, as far as Build reads it: name,
// driver, node, pool and spec, identity values restored.
func (s *sliceStripper) expandSlice(c *resourceapi.ResourceSlice) (resourceapi.ResourceSlice, error) {
	out := resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion}}
	var table []identityValue
	if err := json.Unmarshal([]byte(c.Annotations[shapeAnnotation]), &out.Spec); err != nil {
		return out, fmt.Errorf("resourceslice %s: shape: %w", c.Name, err)
	}
	if err := json.Unmarshal([]byte(c.Annotations[identityAnnotation]), &table); err != nil {
		return out, fmt.Errorf("resourceslice %s: identity: %w", c.Name, err)
	}
	out.Spec.Driver, out.Spec.NodeName, out.Spec.Pool = c.Spec.Driver, c.Spec.NodeName, c.Spec.Pool
	var bad error
	value := func(tok string) string {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n >= len(table) {
			bad = fmt.Errorf("resourceslice %s: identity token %q out of range", c.Name, tok)
			return tok
		}
		return table[n].Value
	}
	num := func(tok int64) int64 {
		v, err := strconv.ParseInt(value(strconv.FormatInt(tok, 10)), 10, 64)
		if err != nil && bad == nil {
			bad = err
		}
		return v
	}
	for i := range out.Spec.Devices {
		d := &out.Spec.Devices[i]
		for name, a := range d.Attributes {
			if !s.identity(c.Spec.Driver, name) {
				continue
			}
			d.Attributes[name], _ = template.MapAttributeValues(a, value, value, num)
		}
	}
	return out, bad
}

// shapeKey says which nodes give the same template without building it: two nodes whose
// current slices (the newest generation of each pool, in name order) have the same shapes,
// pools (relative to the node name), slice counts, and identity values that are equal in the
// same places give byte-identical templates, because Build numbers each attribute's values in
// order of first appearance and otherwise never looks at them. A pool whose newest generation
// lacks slices gives template.ErrIncompletePool, as Build would. cs are compacted slices of
// served drivers of node.
func shapeKey(node string, cs []*resourceapi.ResourceSlice) (string, error) {
	type poolKey struct{ driver, pool string }
	newest := map[poolKey]int64{}
	for _, s := range cs {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		newest[k] = max(newest[k], s.Spec.Pool.Generation)
	}
	var current []*resourceapi.ResourceSlice
	seen := map[poolKey]int64{}
	for _, s := range cs {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		if s.Spec.Pool.Generation == newest[k] {
			current = append(current, s)
			seen[k]++
		}
	}
	slices.SortFunc(current, func(a, b *resourceapi.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })
	h := sha256.New()
	tables := map[[2]string]map[string]int{}
	for _, s := range current {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		if s.Spec.Pool.ResourceSliceCount != seen[k] {
			return "", fmt.Errorf("driver %s pool %s generation %d: %d slices seen, %d announced: %w",
				k.driver, k.pool, newest[k], seen[k], s.Spec.Pool.ResourceSliceCount, template.ErrIncompletePool)
		}
		pool := "=" + k.pool
		if suffix, ok := strings.CutPrefix(k.pool, node); ok {
			pool = "~" + suffix
		}
		var table []identityValue
		if err := json.Unmarshal([]byte(s.Annotations[identityAnnotation]), &table); err != nil {
			return "", fmt.Errorf("resourceslice %s: identity: %w", s.Name, err)
		}
		_, _ = fmt.Fprintf(h, "%q %q %d %s", k.driver, pool, s.Spec.Pool.ResourceSliceCount, s.Annotations[shapeHashAnnotation])
		for _, v := range table {
			t := tables[[2]string{v.Attr, v.Kind}]
			if t == nil {
				t = map[string]int{}
				tables[[2]string{v.Attr, v.Kind}] = t
			}
			n, ok := t[v.Value]
			if !ok {
				n = len(t)
				t[v.Value] = n
			}
			_, _ = fmt.Fprintf(h, " %q/%s=%d", v.Attr, v.Kind, n)
		}
		_, _ = h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
