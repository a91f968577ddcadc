package checkpoint

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// fieldSince is the apiVersion that introduced each field of a record's claim, by JSON path. A
// field added to the types without a line here fails TestEveryFieldHasAVersion: a new field is a
// new apiVersion (package comment), so that no older reader takes the records that carry it for
// its own.
var fieldSince = map[string]string{
	"uid": APIVersionV1, "namespace": APIVersionV1, "name": APIVersionV1, "state": APIVersionV1,
	"env": APIVersionV1, "devices": APIVersionV1, "devices.request": APIVersionV1, "devices.pool": APIVersionV1,
	"devices.device": APIVersionV1, "devices.cdiDeviceIDs": APIVersionV1,

	"owner": APIVersion, "devices.uuid": APIVersion, "devices.adminAccess": APIVersion,
	"devices.nodes": APIVersion, "devices.nodes.path": APIVersion, "devices.nodes.hostPath": APIVersion,
	"devices.nodes.type": APIVersion, "devices.nodes.major": APIVersion, "devices.nodes.minor": APIVersion,
	// Added to v2 after it was released (e47d56b and 5bdff57) without a new apiVersion, so that
	// the plugins of 94642e0 and e47d56b move records carrying them aside: the mistake this
	// table is here to catch. v2 is what 83431c1 reads.
	"devices.mig": APIVersion, "devices.mig.parentUUID": APIVersion, "devices.mig.profile": APIVersion,
	"devices.mig.profileID": APIVersion, "devices.mig.start": APIVersion, "devices.mig.size": APIVersion,
	"devices.mig.gi": APIVersion, "devices.mig.ci": APIVersion,
	"devices.shareID": APIVersion, "devices.consumedCapacity": APIVersion,
	"sharing": APIVersion, "sharing.strategy": APIVersion, "sharing.interval": APIVersion,
	"sharing.activeThreadPercentage": APIVersion, "sharing.pinnedMemoryMiB": APIVersion,
}

// TestEveryFieldHasAVersion: every field of the record has the apiVersion that introduced it, and
// a record that sets it is written with that apiVersion (or v2, the oldest this plugin writes),
// and read back as this plugin's own.
func TestEveryFieldHasAVersion(t *testing.T) {
	var paths []string
	jsonPaths(reflect.TypeFor[Claim](), "", &paths)
	for _, p := range paths {
		if _, ok := fieldSince[p]; !ok {
			t.Errorf("field %q has no apiVersion: a new field needs a new apiVersion (pkg/checkpoint's package comment), in fieldSince and in apiVersionOf", p)
		}
	}
	for p := range fieldSince {
		if !slices.Contains(paths, p) {
			t.Errorf("fieldSince names %q, which the record does not have: a field's meaning stays once written, so a field is never removed", p)
		}
	}

	for _, p := range paths {
		since, ok := fieldSince[p]
		if !ok {
			continue
		}
		c := Claim{UID: uid(1), State: StatePrepareCompleted}
		setPath(reflect.ValueOf(&c).Elem(), strings.Split(p, "."))
		data, err := encodeRecord(thisBoot, &c)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		var head struct{ APIVersion string }
		if err := json.Unmarshal(data, &head); err != nil {
			t.Fatal(err)
		}
		if want := laterOf(since, APIVersion); head.APIVersion != want {
			t.Errorf("a record setting %s is written as %s, want %s", p, head.APIVersion, want)
		}
		if _, got, err := decodeRecord(data); err != nil || got.Foreign != nil {
			t.Errorf("a record setting %s does not read back as this plugin's own: %v, %+v", p, err, got.Foreign)
		}
	}
}

// jsonPaths lists the JSON paths of t's fields, nested ones joined with ".", sorted.
func jsonPaths(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.Implements(reflect.TypeFor[json.Marshaler]()) {
		return
	}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		p := prefix + name
		*out = append(*out, p)
		jsonPaths(f.Type, p+".", out)
	}
	sort.Strings(*out)
}

// setPath gives the field at path a value that encodes, creating what leads to it.
func setPath(v reflect.Value, path []string) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Slice {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
			continue
		}
		if v.Len() == 0 {
			v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
		}
		v = v.Index(0)
	}
	if len(path) == 0 {
		setNonZero(v)
		return
	}
	for i := range v.NumField() {
		if name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); name == path[0] {
			setPath(v.Field(i), path[1:])
			return
		}
	}
	panic("no field " + path[0] + " in " + v.Type().String())
}

func setNonZero(v reflect.Value) {
	if !v.IsZero() {
		return // uid and state are set, and valid
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		val := reflect.New(v.Type().Elem()).Elem()
		if q, ok := val.Addr().Interface().(*resource.Quantity); ok {
			*q = resource.MustParse("1")
		} else {
			setNonZero(val)
		}
		m.SetMapIndex(reflect.ValueOf("x"), val)
		v.Set(m)
	case reflect.Struct:
		// A struct (a device, a MIG record, a node) exists once its parent holds it.
	default:
		panic("setNonZero: " + v.Type().String())
	}
}

// laterOf is the later of two apiVersions of this format.
func laterOf(a, b string) string {
	n := func(v string) int {
		i, err := strconv.Atoi(strings.TrimPrefix(v, apiVersionPrefix))
		if err != nil {
			panic(v)
		}
		return i
	}
	if n(a) > n(b) {
		return a
	}
	return b
}
