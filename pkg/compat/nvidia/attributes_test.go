package nvidia

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

func TestAttributes(t *testing.T) {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	ver := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{VersionValue: &s} }
	for name, tc := range map[string]struct {
		dev  device.Device
		want map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	}{
		"Ada GPU": {
			dev:  device.Device{Kind: device.KindGPU, Architecture: "Ada", Brand: "Nvidia", CUDADriverVersion: "12.8"},
			want: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"architecture": str("Ada Lovelace"), "brand": str("Nvidia"), "cudaDriverVersion": ver("12.8.0")},
		},
		"Hopper GPU keeps its architecture": {
			dev:  device.Device{Kind: device.KindGPU, Architecture: "Hopper", Brand: "Tesla", CUDADriverVersion: "13.0"},
			want: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"brand": str("Tesla"), "cudaDriverVersion": ver("13.0.0")},
		},
		"nothing known": {
			dev:  device.Device{Kind: device.KindGPU},
			want: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{},
		},
		"a CUDA version that cannot be semver is left out": {
			dev:  device.Device{Kind: device.KindGPU, Brand: "Nvidia", CUDADriverVersion: "r12"},
			want: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"brand": str("Nvidia")},
		},
		"NPU": {
			dev:  device.Device{Kind: device.KindNPU, Architecture: "Ada", Brand: "x"},
			want: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Attributes(&tc.dev)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestAttributesPublish: on the mock's inventories (whole GPUs, static MIG devices), every
// device the plain build publishes is still published with NVIDIA's attributes, which are
// there, so none goes over the API's limits.
func TestAttributesPublish(t *testing.T) {
	for _, profile := range []string{"mig-mixed", "h100-8x-2numa", "a100-8x-mig"} {
		t.Run(profile, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "backend", "nvmlmock", "testdata", profile+".golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			var inv device.Inventory
			if err := json.Unmarshal(raw, &inv); err != nil {
				t.Fatal(err)
			}
			plain := slices.Build(&inv, "node")
			compat := slices.Build(&inv, "node", slices.WithAttributes(Attributes))
			if len(compat.Rejected) != 0 || !cmp.Equal(plain.Published, compat.Published) {
				t.Fatalf("published %v, rejected %v; without NVIDIA's attributes %v", compat.Published, compat.Rejected, plain.Published)
			}
			most := 0
			for _, s := range compat.Resources.Pools["node"].Slices {
				for _, d := range s.Devices {
					if d.Attributes[AttrBrand].StringValue == nil || d.Attributes[AttrCUDADriverVersion].VersionValue == nil {
						t.Errorf("%s: no brand or cudaDriverVersion: %v", d.Name, d.Attributes)
					}
					if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
						t.Errorf("%s: %d attributes and capacities", d.Name, n)
					} else if n > most {
						most = n
						t.Logf("%s: %d attributes, %d capacities", d.Name, len(d.Attributes), len(d.Capacity))
					}
				}
			}
		})
	}
}
