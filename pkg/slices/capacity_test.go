package slices

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/accel-dra/accel-dra/pkg/apivalidation"
	"github.com/accel-dra/accel-dra/pkg/device"
)

func TestBuildWithConsumableMemory(t *testing.T) {
	for name, tc := range map[string]struct {
		memory  int64
		wantMin string
	}{
		"80 GiB GPU":           {memory: 80 << 30, wantMin: "1Gi"},
		"real H100 (81559 Mi)": {memory: 81559 << 20, wantMin: "1Gi"},
		"tiny device":          {memory: 512 << 20, wantMin: "512Mi"},
	} {
		t.Run(name, func(t *testing.T) {
			inv := &device.Inventory{Kind: device.KindGPU, Devices: []device.Device{gpu(0, func(d *device.Device) { d.MemoryBytes = tc.memory })}}
			res := Build(inv, "node-a", WithConsumableMemory())
			if len(res.Rejected) > 0 {
				t.Fatalf("rejected: %v", res.Rejected)
			}
			dev := res.Resources.Pools["node-a"].Slices[0].Devices[0]
			if dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
				t.Fatal("allowMultipleAllocations not set")
			}
			c := dev.Capacity[CapacityMemory]
			p := c.RequestPolicy
			if p == nil || p.Default == nil || p.ValidRange == nil || p.ValidRange.Min == nil {
				t.Fatalf("request policy %+v, want default and validRange.min", p)
			}
			if p.Default.Cmp(*resource.NewQuantity(tc.memory, resource.BinarySI)) != 0 {
				t.Errorf("default %s, want the whole memory", p.Default.String())
			}
			if p.ValidRange.Min.Cmp(resource.MustParse(tc.wantMin)) != 0 {
				t.Errorf("min %s, want %s", p.ValidRange.Min.String(), tc.wantMin)
			}
			if err := apivalidation.Device(&dev); err != nil {
				t.Errorf("device fails API validation: %v", err)
			}
		})
	}
	// Without the option nothing changes: exclusive devices, no policy.
	inv := &device.Inventory{Kind: device.KindGPU, Devices: []device.Device{gpu(0)}}
	dev := Build(inv, "node-a").Resources.Pools["node-a"].Slices[0].Devices[0]
	if dev.AllowMultipleAllocations != nil || dev.Capacity[CapacityMemory].RequestPolicy != nil {
		t.Errorf("default build publishes a shared device: %+v", dev)
	}
}
