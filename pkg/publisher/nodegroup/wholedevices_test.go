package nodegroup

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/mig"
	kslices "github.com/accel-dra/accel-dra/pkg/slices"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// TestDRAOfMockNodes: gpu-count of the template of a node as the plugin publishes it counts what
// a claim for whole devices can get there, not the partitions (issue: 208 on an 8×H100
// dynamic-MIG node made stock autoscalers scale up for 9-GPU claims), and names the driver of
// the node's devices with the publisher's default preference (the GPU driver): an NPU node's
// template names the NPU driver.
func TestDRAOfMockNodes(t *testing.T) {
	const gpu, npu = "gpu.accel-dra.io", "npu.accel-dra.io"
	for name, tc := range map[string]struct {
		driver, profile string
		dynamicMIG      bool
		devices         int // published, to show what the old count was
		want            map[string]string
	}{
		"whole H100s": {driver: gpu, profile: "h100-8x-2numa", devices: 8,
			want: map[string]string{DRADriverKey: gpu, GPUCountKey: "8", DRAPoolKey: gpu}},
		// Every GPU in MIG mode: published whole beside its partitions, but as type
		// mig-parent, which no claim for a GPU gets (CUDA cannot use it whole), so none counts.
		"dynamic MIG H100s": {driver: gpu, profile: "h100-8x-mig", dynamicMIG: true, devices: 208, want: map[string]string{}},
		// Static MIG, every GPU in MIG mode: no whole GPU, so a stock autoscaler must expect none.
		"static MIG, only partitions": {driver: gpu, profile: "mig-mixed-only", devices: 4, want: map[string]string{}},
		// gpu-0's four instances and two whole GPUs (gpu-1 and gpu-2 are in MIG mode, empty).
		"static MIG beside whole GPUs": {driver: gpu, profile: "mig-mixed", devices: 6,
			want: map[string]string{DRADriverKey: gpu, GPUCountKey: "2", DRAPoolKey: gpu}},
		"Ascend 910B": {driver: npu, profile: "ascend910b-8x", devices: 8,
			want: map[string]string{DRADriverKey: npu, GPUCountKey: "8", DRAPoolKey: npu}},
	} {
		t.Run(name, func(t *testing.T) {
			tmpl, n := mockTemplate(t, tc.driver, tc.profile, tc.dynamicMIG)
			if n != tc.devices {
				t.Fatalf("%s publishes %d devices, want %d", tc.profile, n, tc.devices)
			}
			if diff := cmp.Diff(tc.want, DRA(tmpl, DefaultGPUDriver)); diff != "" {
				t.Errorf("DRA (-want +got):\n%s", diff)
			}
		})
	}
}

// mockTemplate is the template of a node running the plugin on a mock profile, made from the
// slices the plugin builds, and the number of devices in them. mig-mixed-only is mig-mixed
// without its GPUs outside MIG mode.
func mockTemplate(t *testing.T, driver, profile string, dynamicMIG bool) (*template.Template, int) {
	t.Helper()
	objs, n := mockSlices(t, driver, profile, dynamicMIG)
	tmpl, err := template.Build(objs, template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl, n
}

// mockSlices are the ResourceSlices the plugin publishes on node n1 running a mock profile, and
// the number of devices in them.
func mockSlices(t *testing.T, driver, profile string, dynamicMIG bool) ([]resourceapi.ResourceSlice, int) {
	t.Helper()
	ctx := context.Background()
	var be device.Backend
	if driver == "npu.accel-dra.io" {
		b, err := npumock.New(t.TempDir(), profile, "n1")
		if err != nil {
			t.Fatal(err)
		}
		be = b
	} else {
		p := profile
		if p == "mig-mixed-only" {
			p = "mig-mixed"
		}
		s, err := nvmlmock.NewServer(p, "n1")
		if err != nil {
			t.Fatal(err)
		}
		be = s.Backend()
	}
	inv, err := be.Enumerate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if profile == "mig-mixed-only" {
		var keep []device.Device
		for _, d := range inv.Devices {
			if d.MIG != nil {
				keep = append(keep, d)
			}
		}
		inv.Devices = keep
	}
	if dynamicMIG {
		if inv, err = mig.Dynamic(inv); err != nil {
			t.Fatal(err)
		}
	}
	var objs []resourceapi.ResourceSlice
	n := 0
	for i, s := range kslices.Build(inv, "n1").Resources.Pools["n1"].Slices {
		objs = append(objs, resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "n1-" + string(rune('a'+i))},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: new("n1"), Devices: s.Devices, SharedCounters: s.SharedCounters,
				Pool: resourceapi.ResourcePool{Name: "n1", Generation: 1}},
		})
		n += len(s.Devices)
	}
	for i := range objs {
		objs[i].Spec.Pool.ResourceSliceCount = int64(len(objs))
	}
	return objs, n
}
