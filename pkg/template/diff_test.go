package template

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestDiff(t *testing.T) {
	build := func(t *testing.T, n node, change func([]resourceapi.ResourceSlice)) *Template {
		t.Helper()
		s := h100Slices(n)
		if change != nil {
			change(s)
		}
		tmpl, err := Build(s, BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	device := func(s []resourceapi.ResourceSlice, name string) *resourceapi.Device {
		for i := range s {
			for j := range s[i].Spec.Devices {
				if s[i].Spec.Devices[j].Name == name {
					return &s[i].Spec.Devices[j]
				}
			}
		}
		panic(name)
	}
	for name, tc := range map[string]struct {
		change func([]resourceapi.ResourceSlice)
		want   []Difference
	}{
		"same shape, other node": {},
		"memory": {
			change: func(s []resourceapi.ResourceSlice) {
				for _, d := range []string{"gpu-0", "gpu-5"} {
					device(s, d).Capacity["memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse("40Gi")}
				}
			},
			want: []Difference{
				{Pool: gpuDriver, Device: "gpu-0", What: "capacity memory", Template: "80Gi", Node: "40Gi"},
				{Pool: gpuDriver, Device: "gpu-5", What: "capacity memory", Template: "80Gi", Node: "40Gi"},
			},
		},
		"product and a new attribute": {
			change: func(s []resourceapi.ResourceSlice) {
				d := device(s, "gpu-3")
				d.Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: new("NVIDIA H200")}
				d.Attributes["eccEnabled"] = resourceapi.DeviceAttribute{BoolValue: new(true)}
			},
			want: []Difference{
				{Pool: gpuDriver, Device: "gpu-3", What: "attribute eccEnabled", Template: "<none>", Node: "true"},
				{Pool: gpuDriver, Device: "gpu-3", What: "attribute productName", Template: "NVIDIA H100 80GB HBM3", Node: "NVIDIA H200"},
			},
		},
		"fewer devices": {
			change: func(s []resourceapi.ResourceSlice) {
				for i := range s {
					s[i].Spec.Devices = slices.DeleteFunc(s[i].Spec.Devices, func(d resourceapi.Device) bool { return d.Name == "gpu-7" })
				}
			},
			want: []Difference{{Pool: gpuDriver, Device: "gpu-7", What: "device", Template: "present", Node: "<none>"}},
		},
		"consumable": {
			change: func(s []resourceapi.ResourceSlice) { device(s, "gpu-1").AllowMultipleAllocations = new(true) },
			want:   []Difference{{Pool: gpuDriver, Device: "gpu-1", What: "fields", Template: `{"name":"gpu-1"}`, Node: `{"name":"gpu-1","allowMultipleAllocations":true}`}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tmpl := build(t, node{"a", 1}, nil)
			other := build(t, node{"b", 2}, tc.change)
			if diff := cmp.Diff(tc.want, Diff(tmpl, other)); diff != "" {
				t.Errorf("Diff (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFormatDifferences(t *testing.T) {
	d := Difference{Pool: gpuDriver, Device: "gpu-0", What: "capacity memory", Template: "80Gi", Node: "40Gi"}
	one := "gpu.accel-dra.io device gpu-0 capacity memory: template 80Gi, node 40Gi"
	if got := FormatDifferences([]Difference{d}, 200); got != one {
		t.Errorf("one: %q", got)
	}
	many := make([]Difference, 10)
	for i := range many {
		many[i] = d
	}
	got := FormatDifferences(many, 200)
	if len(got) > 200 || !strings.HasPrefix(got, one+"; "+one) || !strings.HasSuffix(got, "; and 8 more") {
		t.Errorf("many (%d bytes): %q", len(got), got)
	}
	if got := FormatDifferences(many, 10); got != one+"; and 9 more" {
		t.Errorf("tiny budget: %q", got)
	}
	if long := short(strings.Repeat("x", 100)); len([]rune(long)) != maxValue {
		t.Errorf("short gave %d runes", len([]rune(long)))
	}
}
