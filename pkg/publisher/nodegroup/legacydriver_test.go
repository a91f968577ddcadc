package nodegroup

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/template"
)

// TestDRADriverPerTemplate: dra-driver names the driver of the template's whole devices, not one
// driver for every group; the preference decides only between drivers that both have whole
// devices, and the choice does not depend on the order of the template's pools.
func TestDRADriverPerTemplate(t *testing.T) {
	const gpu, npu, other = "gpu.accel-dra.io", "npu.accel-dra.io", "acc.example.com"
	pool := func(driver, suffix, typ string, n int) template.Driver {
		d := template.Driver{Name: driver, PoolSuffix: suffix}
		for i := range n {
			d.Devices = append(d.Devices, resourceapi.Device{
				Name:       typ + "-" + string(rune('0'+i)),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: new(typ)}},
			})
		}
		return d
	}
	keys := func(driver, count, pool string) map[string]string {
		m := map[string]string{DRADriverKey: driver, GPUCountKey: count}
		if pool != "" {
			m[DRAPoolKey] = pool
		}
		return m
	}
	for name, tc := range map[string]struct {
		pools     []template.Driver
		preferred string
		want      map[string]string
	}{
		"GPUs, GPU preferred":  {pools: []template.Driver{pool(gpu, "", "gpu", 8)}, preferred: gpu, want: keys(gpu, "8", gpu)},
		"NPUs, GPU preferred":  {pools: []template.Driver{pool(npu, "", "npu", 8)}, preferred: gpu, want: keys(npu, "8", npu)},
		"NPUs, NPU preferred":  {pools: []template.Driver{pool(npu, "", "npu", 8)}, preferred: npu, want: keys(npu, "8", npu)},
		"another driver's GPU": {pools: []template.Driver{pool(other, "", "gpu", 2)}, preferred: gpu, want: keys(other, "2", other)},
		// Only partitions of the GPU driver: the NPUs are the whole devices.
		"MIG only beside NPUs": {pools: []template.Driver{pool(gpu, "/mig", "mig", 7), pool(npu, "", "npu", 2)}, preferred: gpu, want: keys(npu, "2", npu)},
		// Both drivers have whole devices: the preference wins, even with fewer.
		"GPUs and more NPUs, GPU preferred": {pools: []template.Driver{pool(gpu, "", "gpu", 2), pool(npu, "", "npu", 8)}, preferred: gpu, want: keys(gpu, "2", gpu)},
		"GPUs and more NPUs, NPU preferred": {pools: []template.Driver{pool(gpu, "", "gpu", 2), pool(npu, "", "npu", 8)}, preferred: npu, want: keys(npu, "8", npu)},
		// A preference for neither: the most whole devices, over all the driver's pools.
		"GPUs in two pools and NPUs, other preferred": {pools: []template.Driver{pool(gpu, "", "gpu", 3), pool(gpu, "/b", "gpu", 3), pool(npu, "", "npu", 5)}, preferred: other, want: keys(gpu, "6", "")},
		"NPUs and fewer GPUs, other preferred":        {pools: []template.Driver{pool(npu, "", "npu", 4), pool(gpu, "", "gpu", 2)}, preferred: other, want: keys(npu, "4", npu)},
		// Equal counts: the first by name, whichever pool comes first.
		"as many GPUs as NPUs":           {pools: []template.Driver{pool(gpu, "", "gpu", 4), pool(npu, "", "npu", 4)}, preferred: other, want: keys(gpu, "4", gpu)},
		"as many NPUs as GPUs, reversed": {pools: []template.Driver{pool(npu, "", "npu", 4), pool(gpu, "", "gpu", 4)}, preferred: other, want: keys(gpu, "4", gpu)},
		// An empty preference is the opt-out: no legacy keys at all.
		"no preference":     {pools: []template.Driver{pool(gpu, "", "gpu", 8)}, preferred: "", want: map[string]string{}},
		"no whole devices":  {pools: []template.Driver{pool(gpu, "/mig", "mig", 7)}, preferred: gpu, want: map[string]string{}},
		"no devices at all": {preferred: gpu, want: map[string]string{}},
	} {
		t.Run(name, func(t *testing.T) {
			tmpl := &template.Template{APIVersion: template.APIVersion, Kind: template.Kind, Drivers: tc.pools}
			if diff := cmp.Diff(tc.want, DRA(tmpl, tc.preferred)); diff != "" {
				t.Errorf("DRA (-want +got):\n%s", diff)
			}
		})
	}
}
