package serverfeatures

import (
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// full is a device with every gated field set; each case below drops one of them the way
// v1.37.1's dropDisabledFields does with the case's gate off.
func full() resourceapi.Device {
	return resourceapi.Device{
		Name: "gpu-0",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"uuid":  {StringValue: ptr.To("GPU-0")},
			"links": {StringValues: []string{"gpu-1", "gpu-2"}},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("80Gi"), RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("1Gi"))}},
		},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
			CounterSet: "gpu-0-counters", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("10Gi")}},
			CompatibilityGroups: []string{"g"},
		}},
		AllNodes:                 ptr.To(true),
		Taints:                   []resourceapi.DeviceTaint{{Key: "gpu.accel-dra.io/lost", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		BindsToNode:              ptr.To(true),
		BindingConditions:        []string{"ready"},
		BindingFailureConditions: []string{"failed"},
		AllowMultipleAllocations: ptr.To(true),
		NodeAllocatableResources: map[corev1.ResourceName]resourceapi.NodeAllocatableResource{"memory": {}},
	}
}

func TestCompareSliceDevice(t *testing.T) {
	for name, tc := range map[string]struct {
		drop  func(d *resourceapi.Device)
		gate  string
		field string
	}{
		"taints": {func(d *resourceapi.Device) { d.Taints = nil }, "DRADeviceTaints", "spec.devices[].taints"},
		"consumesCounters": {func(d *resourceapi.Device) { d.ConsumesCounters = nil },
			"DRAPartitionableDevices", "spec.devices[].consumesCounters"},
		"allNodes": {func(d *resourceapi.Device) { d.AllNodes = nil }, "DRAPartitionableDevices", "spec.devices[].allNodes"},
		"compatibilityGroups": {func(d *resourceapi.Device) { d.ConsumesCounters[0].CompatibilityGroups = nil },
			"DRADeviceCompatibilityGroups", "spec.devices[].consumesCounters[].compatibilityGroups"},
		"bindingConditions": {func(d *resourceapi.Device) { d.BindingConditions = nil },
			"DRADeviceBindingConditions", "spec.devices[].bindingConditions"},
		"bindingFailureConditions": {func(d *resourceapi.Device) { d.BindingFailureConditions = nil },
			"DRADeviceBindingConditions", "spec.devices[].bindingFailureConditions"},
		"bindsToNode": {func(d *resourceapi.Device) { d.BindsToNode = nil }, "DRADeviceBindingConditions", "spec.devices[].bindsToNode"},
		"allowMultipleAllocations": {func(d *resourceapi.Device) { d.AllowMultipleAllocations = nil },
			"DRAConsumableCapacity", "spec.devices[].allowMultipleAllocations"},
		"requestPolicy": {func(d *resourceapi.Device) {
			c := d.Capacity["memory"]
			c.RequestPolicy = nil
			d.Capacity["memory"] = c
		}, "DRAConsumableCapacity", "spec.devices[].capacity[].requestPolicy"},
		"nodeAllocatableResources": {func(d *resourceapi.Device) { d.NodeAllocatableResources = nil },
			"DRANodeAllocatableResources", "spec.devices[].nodeAllocatableResources"},
		"list attribute": {func(d *resourceapi.Device) { d.Attributes["links"] = resourceapi.DeviceAttribute{} },
			"DRAListTypeAttributes", "spec.devices[].attributes[].{bools,ints,strings,versions}"},
	} {
		t.Run(name, func(t *testing.T) {
			stored := full()
			stored.ConsumesCounters = slices.Clone(stored.ConsumesCounters)
			stored.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": stored.Capacity["memory"]}
			stored.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": stored.Attributes["uuid"], "links": stored.Attributes["links"]}
			tc.drop(&stored)
			got := CompareSlice("node-1", &resourceslice.Slice{Devices: []resourceapi.Device{full()}}, &resourceslice.Slice{Devices: []resourceapi.Device{stored}})
			want := []Drop{{Gate: tc.gate, Field: tc.field, Where: "node-1/gpu-0"}}
			for i := range got {
				got[i].Feature = ""
			}
			if !slices.Equal(got, want) {
				t.Errorf("drops:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestCompareSliceKept(t *testing.T) {
	desired := full()
	stored := full()
	// The server fills in a taint's timeAdded; a changed value is not a dropped field.
	stored.Taints[0].TimeAdded = &metav1.Time{}
	want := resourceslice.Slice{Devices: []resourceapi.Device{desired}, PerDeviceNodeSelection: ptr.To(true)}
	got := resourceslice.Slice{Devices: []resourceapi.Device{stored, {Name: "gpu-9"}}, PerDeviceNodeSelection: ptr.To(true)}
	if drops := CompareSlice("node-1", &want, &got); len(drops) != 0 {
		t.Errorf("drops of a slice the server kept whole: %+v", drops)
	}
}

func TestCompareSliceFields(t *testing.T) {
	desired := resourceslice.Slice{
		SharedCounters:         []resourceapi.CounterSet{{Name: "gpu-0-counters"}},
		PerDeviceNodeSelection: ptr.To(true),
		PartitionTypeAttribute: ptr.To(resourceapi.FullyQualifiedName("gpu.accel-dra.io/profile")),
		SkipNodeOperations:     []resourceapi.SkipNodeOperation{"Prepare"},
	}
	for name, tc := range map[string]struct {
		drop  func(s *resourceslice.Slice)
		gate  string
		field string
	}{
		"sharedCounters":         {func(s *resourceslice.Slice) { s.SharedCounters = nil }, "DRAPartitionableDevices", "spec.sharedCounters"},
		"perDeviceNodeSelection": {func(s *resourceslice.Slice) { s.PerDeviceNodeSelection = nil }, "DRAPartitionableDevices", "spec.perDeviceNodeSelection"},
		"partitionTypeAttribute": {func(s *resourceslice.Slice) { s.PartitionTypeAttribute = nil }, "DRAPartitionableDevicesType", "spec.partitionTypeAttribute"},
		"skipNodeOperations":     {func(s *resourceslice.Slice) { s.SkipNodeOperations = nil }, "DRAOptionalNodeOperations", "spec.skipNodeOperations"},
	} {
		t.Run(name, func(t *testing.T) {
			stored := desired
			tc.drop(&stored)
			got := CompareSlice("node-1", &desired, &stored)
			if len(got) != 1 || got[0].Gate != tc.gate || got[0].Field != tc.field || got[0].Where != "node-1" {
				t.Errorf("drops: got %+v, want one of %s at %s", got, tc.gate, tc.field)
			}
		})
	}
}

func apiSlice(pool string, generation int64, s resourceslice.Slice) resourceapi.ResourceSlice {
	return resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
		Pool:           resourceapi.ResourcePool{Name: pool, Generation: generation},
		Devices:        s.Devices,
		SharedCounters: s.SharedCounters,
	}}
}

// TestComparePools follows dynamic MIG's layout (pkg/slices/mig.go): a counters slice and a
// devices slice per GPU in one pool.
func TestComparePools(t *testing.T) {
	counters := resourceslice.Slice{SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0-counters"}}}
	migDev := resourceapi.Device{Name: "gpu-0-mig-1g", ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-counters"}}}
	devices := resourceslice.Slice{Devices: []resourceapi.Device{migDev}}
	desired := map[string]resourceslice.Pool{"node-1": {Slices: []resourceslice.Slice{counters, devices}}}
	dropped := resourceslice.Slice{Devices: []resourceapi.Device{{Name: "gpu-0-mig-1g"}}}

	for name, tc := range map[string]struct {
		stored        []resourceapi.ResourceSlice
		wantGates     []string
		wantPublished bool
	}{
		"nothing yet": {wantPublished: false},
		"one of two slices": {
			stored:        []resourceapi.ResourceSlice{apiSlice("node-1", 1, devices)},
			wantPublished: false,
		},
		"kept": {
			stored:        []resourceapi.ResourceSlice{apiSlice("node-1", 1, devices), apiSlice("node-1", 1, counters)},
			wantPublished: true,
		},
		"gate off": {
			// Counters slice stored empty, devices without consumesCounters.
			stored:        []resourceapi.ResourceSlice{apiSlice("node-1", 1, dropped), apiSlice("node-1", 1, resourceslice.Slice{})},
			wantGates:     []string{"DRAPartitionableDevices", "DRAPartitionableDevices"},
			wantPublished: true,
		},
		"old generation ignored": {
			stored: []resourceapi.ResourceSlice{
				apiSlice("node-1", 1, dropped), apiSlice("node-1", 1, resourceslice.Slice{}),
				apiSlice("node-1", 2, devices), apiSlice("node-1", 2, counters),
				apiSlice("other", 1, dropped),
			},
			wantPublished: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			drops, published := ComparePools(desired, tc.stored)
			var gates []string
			for _, d := range drops {
				gates = append(gates, d.Gate)
			}
			if published != tc.wantPublished || !slices.Equal(gates, tc.wantGates) {
				t.Errorf("got gates %v published %v, want %v %v", gates, published, tc.wantGates, tc.wantPublished)
			}
		})
	}
}

func TestDroppedErrorMessage(t *testing.T) {
	err := &DroppedError{Drops: []Drop{
		{Gate: "DRAPartitionableDevices", Feature: "partitionable devices (shared counters)", Field: "spec.sharedCounters", Where: "node-1"},
		{Gate: "DRAConsumableCapacity", Feature: "consumable capacity (shared devices)", Field: "spec.devices[].allowMultipleAllocations", Where: "node-1/gpu-1"},
		{Gate: "DRAConsumableCapacity", Feature: "consumable capacity (shared devices)", Field: "spec.devices[].allowMultipleAllocations", Where: "node-1/gpu-0"},
	}}
	msg := err.Error()
	for _, want := range []string{
		"feature gate DRAConsumableCapacity is off: consumable capacity (shared devices) dropped (spec.devices[].allowMultipleAllocations, 2 time(s), first at node-1/gpu-0)",
		"feature gate DRAPartitionableDevices is off: partitionable devices (shared counters) dropped (spec.sharedCounters, 1 time(s), first at node-1)",
		"enable DRAConsumableCapacity, DRAPartitionableDevices on kube-apiserver",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if got := err.Gates(); !slices.Equal(got, []string{"DRAConsumableCapacity", "DRAPartitionableDevices"}) {
		t.Errorf("gates: %v", got)
	}
}

// TestDocsListEveryField: docs/versions.md's gate table names every gate and field checked
// here, so that a field added to the check is documented.
func TestDocsListEveryField(t *testing.T) {
	data, err := os.ReadFile("../../docs/versions.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 6 {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = cells[6]
		}
	}
	check := func(gate, field string) {
		row, ok := rows[gate]
		last := field[strings.LastIndex(field, ".")+1:]
		if !ok || !strings.Contains(row, last) {
			t.Errorf("docs/versions.md: no row for %s naming %s (%s)", gate, last, field)
		}
	}
	for _, f := range deviceFields {
		check(f.gate, f.field)
	}
	for _, f := range sliceFields {
		check(f.gate, f.field)
	}
}
