package apivalidation

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestDevice(t *testing.T) {
	s := func(v string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &v} }
	ver := func(v string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{VersionValue: &v} }
	i := int64(1)
	for _, tc := range []struct {
		name string
		dev  resourceapi.Device
		err  string
	}{
		{"ok", resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": s("gpu"), "resource.kubernetes.io/numaNode": {IntValue: &i}}}, ""},
		{"bad name", resourceapi.Device{Name: "GPU_0"}, "name"},
		{"two values", resourceapi.Device{Name: "g", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"x": {IntValue: &i, StringValue: new(string)}}}, "exactly one value"},
		{"no value", resourceapi.Device{Name: "g", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"x": {}}}, "exactly one value"},
		{"long string", resourceapi.Device{Name: "g", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"x": s(strings.Repeat("a", 65))}}, "64"},
		{"bad version", resourceapi.Device{Name: "g", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"v": ver("1.02.3")}}, "not semver"},
		{"bad attr name", resourceapi.Device{Name: "g", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"9lives": s("x")}}, "identifier"},
		{"bad domain", resourceapi.Device{Name: "g", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"Bad_Domain/x": s("x")}}, "domain"},
		{"too many", func() resourceapi.Device {
			d := resourceapi.Device{Name: "g", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
			for n := 0; n < 33; n++ {
				d.Attributes[resourceapi.QualifiedName("a"+strings.Repeat("b", n))] = s("x")
			}
			return d
		}(), "at most 32 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Device(&tc.dev)
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
