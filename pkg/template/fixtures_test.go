package template

import (
	"fmt"
	"math/rand/v2"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	gpuDriver = "gpu.accel-dra.io"
	nicDriver = "nic.example.com"
)

// node describes the per-node identity of a fixture node. Nodes of one group differ only here.
type node struct {
	name string
	seed uint64
}

// h100Slices returns the slices an 8-GPU H100-like node publishes: two NUMA nodes, four PCIe
// roots with two GPUs each, published (as a driver might) in two slices of pool generation 3,
// with the metadata the API server adds.
func h100Slices(n node) []resourceapi.ResourceSlice {
	r := rand.New(rand.NewPCG(n.seed, n.seed^0x9e3779b97f4a7c15))
	// Bus numbers and roots are random but keep the topology: GPUs 2k and 2k+1 share a root.
	roots := make([]string, 4)
	for i := range roots {
		roots[i] = fmt.Sprintf("pci0000:%02x", r.IntN(256))
	}
	var devices []resourceapi.Device
	for i := range 8 {
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":                            {StringValue: new("gpu")},
				"uuid":                            {StringValue: new(fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.IntN(1<<16), r.IntN(1<<16), r.IntN(1<<16), r.Uint64()&(1<<48-1)))},
				"productName":                     {StringValue: new("NVIDIA H100 80GB HBM3")},
				"architecture":                    {StringValue: new("Hopper")},
				"index":                           {IntValue: new(int64(i))},
				"driverVersion":                   {VersionValue: new("570.124.6")},
				"cudaComputeCapability":           {VersionValue: new("9.0.0")},
				"resource.kubernetes.io/pciBusID": {StringValue: new(fmt.Sprintf("0000:%02x:00.0", r.IntN(256)))},
				"resource.kubernetes.io/pcieRoot": {StringValue: new(roots[i/2])},
				"numaNode":                        {IntValue: new(int64(i / 4))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: resource.MustParse("80Gi")},
			},
		})
	}
	// The driver lists devices in discovery order, not name order.
	r.Shuffle(len(devices), func(i, j int) { devices[i], devices[j] = devices[j], devices[i] })
	return []resourceapi.ResourceSlice{
		slice(n, gpuDriver, n.name, 0, 2, devices[:5]),
		slice(n, gpuDriver, n.name, 1, 2, devices[5:]),
	}
}

// nicSlices returns a NIC driver's slice whose devices sit on the same PCIe roots as the GPUs of
// h100Slices, for matchAttribute across drivers.
func nicSlices(n node, gpuSlices []resourceapi.ResourceSlice) []resourceapi.ResourceSlice {
	roots := map[string]string{}
	for _, s := range gpuSlices {
		for _, d := range s.Spec.Devices {
			roots[d.Name] = *d.Attributes["resource.kubernetes.io/pcieRoot"].StringValue
		}
	}
	var devices []resourceapi.Device
	for i := range 4 {
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("nic-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"resource.kubernetes.io/pcieRoot": {StringValue: new(roots[fmt.Sprintf("gpu-%d", 2*i)])},
				"serial":                          {StringValue: new(fmt.Sprintf("MT%s%02d", n.name, i))},
				"linkSpeedGbps":                   {IntValue: new(int64(400))},
			},
		})
	}
	return []resourceapi.ResourceSlice{slice(n, nicDriver, n.name, 0, 1, devices)}
}

// migSlices returns a partitionable GPU driver's pool: two counter sets and, per GPU, the
// whole device and two halves consuming its counters, with a list attribute and a taint.
func migSlices(n node) []resourceapi.ResourceSlice {
	counters := []resourceapi.CounterSet{}
	var devices []resourceapi.Device
	for g := range 2 {
		set := fmt.Sprintf("gpu-%d-counters", g)
		counters = append(counters, resourceapi.CounterSet{
			Name: set,
			Counters: map[string]resourceapi.Counter{
				"memory": {Value: resource.MustParse("80Gi")},
				"slices": {Value: resource.MustParse("2")},
			},
		})
		for _, part := range []struct {
			name, profile string
			slices        int64
		}{{"full", "Full", 2}, {"half-0", "Half", 1}, {"half-1", "Half", 1}} {
			devices = append(devices, resourceapi.Device{
				Name: fmt.Sprintf("gpu-%d-%s", g, part.name),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"profile":    {StringValue: new(part.profile)},
					"uuid":       {StringValue: new(fmt.Sprintf("MIG-%s-%d-%s", n.name, g, part.name))},
					"memorySlot": {IntValues: []int64{0, part.slices}},
				},
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
					CounterSet: set,
					Counters: map[string]resourceapi.Counter{
						"memory": {Value: resource.MustParse(fmt.Sprintf("%dGi", 40*part.slices))},
						"slices": {Value: *resource.NewQuantity(part.slices, resource.DecimalSI)},
					},
				}},
				Taints: []resourceapi.DeviceTaint{{Key: "example.com/beta", Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &metav1.Time{}}},
			})
		}
	}
	pta := resourceapi.FullyQualifiedName("mig.accel-dra.io/profile")
	counterSlice := slice(n, "mig.accel-dra.io", n.name, 0, 2, nil)
	counterSlice.Spec.SharedCounters = counters
	deviceSlice := slice(n, "mig.accel-dra.io", n.name, 1, 2, devices)
	deviceSlice.Spec.PartitionTypeAttribute = &pta
	return []resourceapi.ResourceSlice{counterSlice, deviceSlice}
}

func slice(n node, driver, pool string, i, count int, devices []resourceapi.Device) resourceapi.ResourceSlice {
	r := rand.New(rand.NewPCG(n.seed, uint64(i)))
	return resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            fmt.Sprintf("%s-%s-%05x", n.name, driver, r.IntN(1<<20)),
			UID:             types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", r.Uint32(), r.Uint64()&(1<<48-1))),
			ResourceVersion: fmt.Sprint(r.IntN(100000)),
			Generation:      7,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.name, UID: types.UID(fmt.Sprint(n.seed))}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet-plugin", Operation: metav1.ManagedFieldsOperationApply}},
		},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			NodeName: new(n.name),
			Pool:     resourceapi.ResourcePool{Name: pool, Generation: 3, ResourceSliceCount: int64(count)},
			Devices:  devices,
		},
	}
}

// wideSlices returns one driver's node-local pool of n devices with 3+extra attributes; unique
// makes the extra attribute values differ per device so they compress badly.
func wideSlices(nodeName, driver string, n, extra int, unique bool) []resourceapi.ResourceSlice {
	nd := node{name: nodeName, seed: 1}
	var devices []resourceapi.Device
	for i := range n {
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"uuid":                            {StringValue: new(fmt.Sprintf("GPU-%s-%d", nodeName, i))},
			"resource.kubernetes.io/pcieRoot": {StringValue: new(fmt.Sprintf("pci0000:%02x", i/8))},
			"index":                           {IntValue: new(int64(i))},
		}
		for a := range extra {
			v := fmt.Sprintf("value-of-attribute-%d", a)
			if unique {
				v = fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
			}
			attrs[resourceapi.QualifiedName(fmt.Sprintf("attribute%d", a))] = resourceapi.DeviceAttribute{StringValue: new(v)}
		}
		devices = append(devices, resourceapi.Device{
			Name:       fmt.Sprintf("dev-%d", i),
			Attributes: attrs,
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		})
	}
	var out []resourceapi.ResourceSlice
	count := (n + 99) / 100
	for i := 0; i < count; i++ {
		out = append(out, slice(nd, driver, nodeName, i, count, devices[i*100:min(n, (i+1)*100)]))
	}
	return out
}
