package slices

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/pkg/apivalidation"
	"github.com/accel-dra/accel-dra/pkg/device"
)

func TestBuildSplitsSlicesWithTaints(t *testing.T) {
	taint := []resourceapi.DeviceTaint{{Key: "gpu.accel-dra.io/xid", Value: "48", Effect: resourceapi.DeviceTaintEffectNoSchedule,
		TimeAdded: &metav1.Time{Time: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)}}}
	tests := map[string]struct {
		devices int
		tainted []int
		want    []int
	}{
		"no taints":                        {devices: 300, want: []int{128, 128, 44}},
		"first device tainted":             {devices: 300, tainted: []int{0}, want: []int{64, 128, 108}},
		"taint in the second slice":        {devices: 300, tainted: []int{200}, want: []int{128, 72, 64, 36}},
		"taint after 100 clean devices":    {devices: 130, tainted: []int{100}, want: []int{100, 30}},
		"every device tainted":             {devices: 130, tainted: seq(130), want: []int{64, 64, 2}},
		"small node with a tainted device": {devices: 8, tainted: []int{3}, want: []int{8}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inv := &device.Inventory{Kind: device.KindGPU}
			taints := map[string][]resourceapi.DeviceTaint{}
			for i := 0; i < tc.devices; i++ {
				inv.Devices = append(inv.Devices, gpu(i))
			}
			for _, i := range tc.tainted {
				taints[fmt.Sprintf("gpu-%d", i)] = taint
			}
			pool := Build(inv, "node-a", WithTaints(taints)).Resources.Pools["node-a"]
			var sizes []int
			next := 0
			for _, s := range pool.Slices {
				sizes = append(sizes, len(s.Devices))
				spec := resourceapi.ResourceSliceSpec{Driver: "gpu.accel-dra.io", NodeName: ptr("node-a"),
					Pool: resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: int64(len(pool.Slices))}, Devices: s.Devices}
				if err := apivalidation.ResourceSlice(&spec); err != nil {
					t.Errorf("slice of %d devices is invalid: %v", len(s.Devices), err)
				}
				for _, d := range s.Devices {
					if d.Name != fmt.Sprintf("gpu-%d", next) {
						t.Fatalf("device %s out of order, want gpu-%d", d.Name, next)
					}
					if want := taints[d.Name]; !reflect.DeepEqual(d.Taints, want) {
						t.Errorf("%s taints = %v, want %v", d.Name, d.Taints, want)
					}
					next++
				}
			}
			if !reflect.DeepEqual(sizes, tc.want) {
				t.Errorf("slice sizes %v, want %v", sizes, tc.want)
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
