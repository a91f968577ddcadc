package apivalidation

import (
	"strconv"
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

func TestResourceSlice(t *testing.T) {
	node := "node-a"
	devs := func(n int, mut func(i int, d *resourceapi.Device)) []resourceapi.Device {
		out := make([]resourceapi.Device, n)
		for i := range out {
			out[i].Name = "gpu-" + strconv.Itoa(i)
			if mut != nil {
				mut(i, &out[i])
			}
		}
		return out
	}
	taint := func(i int, d *resourceapi.Device) {
		if i == 0 {
			d.Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
	}
	consume := func(i int, d *resourceapi.Device) {
		if i == 0 {
			d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "s", Counters: map[string]resourceapi.Counter{"c": {}}}}
		}
	}
	// The NVLink cliques of a GPU (nvlinkCliques) are a list attribute; its island a string.
	list := func(i int, d *resourceapi.Device) {
		if i == 0 {
			d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"nvlinkCliques": {StringValues: []string{"nvl4-0d28f85f71d3"}}}
		}
	}
	scalar := func(i int, d *resourceapi.Device) {
		v := "nvl8-df25f300710f"
		d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"nvlinkIsland": {StringValue: &v}}
	}
	sets := func(n int) []resourceapi.CounterSet {
		out := make([]resourceapi.CounterSet, n)
		for i := range out {
			out[i] = resourceapi.CounterSet{Name: "s" + strconv.Itoa(i), Counters: map[string]resourceapi.Counter{"c": {}}}
		}
		return out
	}
	yes := true
	for _, tc := range []struct {
		name string
		mut  func(*resourceapi.ResourceSliceSpec)
		err  string
	}{
		{"ok", func(s *resourceapi.ResourceSliceSpec) {}, ""},
		{"128 devices", func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(128, nil) }, ""},
		{"129 devices", func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(129, nil) }, "at most 128"},
		{"64 tainted", func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(64, taint) }, ""},
		{"65 tainted", func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(65, taint) }, "at most 64"},
		{"65 consuming", func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(65, consume) }, "at most 64"},
		{"64 with a list attribute", func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(64, list) }, ""},
		{"65 with a list attribute", func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(65, list) }, "at most 64"},
		{"128 with a scalar attribute", func(s *resourceapi.ResourceSliceSpec) { s.Devices = devs(128, scalar) }, ""},
		{"counters and devices", func(s *resourceapi.ResourceSliceSpec) { s.SharedCounters = sets(1) }, "only one of sharedCounters or devices"},
		{"8 sets", func(s *resourceapi.ResourceSliceSpec) { s.Devices, s.SharedCounters = nil, sets(8) }, ""},
		{"9 sets", func(s *resourceapi.ResourceSliceSpec) { s.Devices, s.SharedCounters = nil, sets(9) }, "at most 8"},
		{"duplicate sets", func(s *resourceapi.ResourceSliceSpec) { s.Devices, s.SharedCounters = nil, append(sets(1), sets(1)...) }, "duplicate counter set"},
		{"duplicate devices", func(s *resourceapi.ResourceSliceSpec) { s.Devices = append(devs(1, nil), devs(1, nil)...) }, "duplicate device"},
		{"no node selection", func(s *resourceapi.ResourceSliceSpec) { s.NodeName = nil }, "exactly one of"},
		{"two node selections", func(s *resourceapi.ResourceSliceSpec) { s.AllNodes = &yes }, "exactly one of"},
		{"device node without per-device", func(s *resourceapi.ResourceSliceSpec) { s.Devices[0].NodeName = &node }, "perDeviceNodeSelection"},
		{"per-device", func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName, s.PerDeviceNodeSelection = nil, &yes
			s.Devices[0].NodeName = &node
		}, ""},
		{"zero slice count", func(s *resourceapi.ResourceSliceSpec) { s.Pool.ResourceSliceCount = 0 }, "resourceSliceCount"},
		{"bad device", func(s *resourceapi.ResourceSliceSpec) { s.Devices[0].Name = "GPU_0" }, "devices[0]: name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := resourceapi.ResourceSliceSpec{Driver: "gpu.accel-dra.io", NodeName: &node,
				Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: devs(1, nil)}
			tc.mut(&s)
			err := ResourceSlice(&s)
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
