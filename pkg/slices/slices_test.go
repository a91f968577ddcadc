package slices

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/device"
)

func gpu(i int, mut ...func(*device.Device)) device.Device {
	numa := int64(i / 4)
	d := device.Device{
		Name: device.NameFor(device.KindGPU, i), Kind: device.KindGPU, Index: i,
		UUID: "GPU-0000000" + string(rune('0'+i)), ProductName: "NVIDIA H100 80GB HBM3", Architecture: "Hopper",
		DriverVersion: "570.124.06", CUDAComputeCapability: "9.0",
		PCIBusID: "0000:1b:00.0", PCIeRoot: "pci0000:16", NUMANode: &numa, MemoryBytes: 80 << 30,
	}
	for _, m := range mut {
		m(&d)
	}
	return d
}

func TestNormalizeVersion(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "570.124.06", want: "570.124.6"},
		{in: "9.0", want: "9.0.0"},
		{in: "535", want: "535.0.0"},
		{in: " 1.2.3 ", want: "1.2.3"},
		{in: "570.124.06-beta", want: "570.124.6-beta"},
		{in: "24.1.rc2", want: "24.1.0-rc2"},
		{in: "24.1.0.RC1", want: "24.1.0-RC1"},
		{in: "24.rc2", err: "not a number"},
		{in: "570.124.06-", err: "not a semantic version"},
		{in: "1.2.3-be ta", err: "not a semantic version"},
		{in: "1.2.3.4", err: "at most three"},
		{in: "", err: "not a number"},
		{in: "abc", err: "not a number"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := NormalizeVersion(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("NormalizeVersion(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("NormalizeVersion(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestToAPIAttributes(t *testing.T) {
	d := gpu(5)
	api, _, err := ToAPI(&d)
	if err != nil {
		t.Fatal(err)
	}
	want := map[resourceapi.QualifiedName]string{
		"type": "gpu", "uuid": d.UUID, "productName": "NVIDIA H100 80GB HBM3", "architecture": "Hopper",
		"resource.kubernetes.io/pciBusID": "0000:1b:00.0", "resource.kubernetes.io/pcieRoot": "pci0000:16",
	}
	for name, v := range want {
		a, ok := api.Attributes[name]
		if !ok || a.StringValue == nil || *a.StringValue != v {
			t.Errorf("attribute %s = %+v, want string %q", name, a, v)
		}
	}
	if a := api.Attributes["driverVersion"]; a.VersionValue == nil || *a.VersionValue != "570.124.6" {
		t.Errorf("driverVersion = %+v", a)
	}
	if a := api.Attributes["cudaComputeCapability"]; a.VersionValue == nil || *a.VersionValue != "9.0.0" {
		t.Errorf("cudaComputeCapability = %+v", a)
	}
	if a := api.Attributes["index"]; a.IntValue == nil || *a.IntValue != 5 {
		t.Errorf("index = %+v", a)
	}
	if a := api.Attributes["resource.kubernetes.io/numaNode"]; a.IntValue == nil || *a.IntValue != 1 {
		t.Errorf("numaNode = %+v", a)
	}
	if c := api.Capacity["memory"]; c.Value.String() != "80Gi" {
		t.Errorf("memory = %s", c.Value.String())
	}
}

func TestToAPIOmitsUnknowns(t *testing.T) {
	d := gpu(0, func(d *device.Device) {
		d.NUMANode = nil
		d.PCIeRoot = ""
		d.Architecture = ""
		d.CUDAComputeCapability = ""
	})
	api, _, err := ToAPI(&d)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []resourceapi.QualifiedName{"resource.kubernetes.io/numaNode", "resource.kubernetes.io/pcieRoot", "architecture", "cudaComputeCapability"} {
		if _, ok := api.Attributes[name]; ok {
			t.Errorf("attribute %s published for a device that has none", name)
		}
	}
}

func TestBuildLeavesOutBadDevices(t *testing.T) {
	long := strings.Repeat("x", 65)
	inv := &device.Inventory{Kind: device.KindGPU, Devices: []device.Device{
		gpu(3),
		gpu(1, func(d *device.Device) { d.DriverVersion = "r570.124" }),
		gpu(0),
		gpu(2, func(d *device.Device) { d.ProductName = long }),
		gpu(4, func(d *device.Device) { d.PCIBusID = "00000000:1B:00.0" }),
	}}
	res := Build(inv, "node-a")
	if got, want := strings.Join(res.Published, ","), "gpu-0,gpu-3"; got != want {
		t.Fatalf("published %s, want %s", got, want)
	}
	reasons := map[string]string{}
	for _, r := range res.Rejected {
		reasons[r.Device] = r.Reason
		if !strings.Contains(r.Err.Error(), r.Device) {
			t.Errorf("error %q does not name device %s", r.Err, r.Device)
		}
	}
	want := map[string]string{"gpu-1": "driver-version", "gpu-2": "invalid", "gpu-4": "pci-bus-id"}
	for dev, reason := range want {
		if reasons[dev] != reason {
			t.Errorf("device %s rejected with reason %q, want %q", dev, reasons[dev], reason)
		}
	}
	pool := res.Resources.Pools["node-a"]
	if len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 2 || pool.Slices[0].Devices[0].Name != "gpu-0" {
		t.Fatalf("unexpected pool %+v", pool)
	}
}

func TestBuildSplitsLargeInventories(t *testing.T) {
	inv := &device.Inventory{Kind: device.KindGPU}
	for i := 300; i > 0; i-- {
		inv.Devices = append(inv.Devices, gpu(i-1))
	}
	res := Build(inv, "big")
	pool := res.Resources.Pools["big"]
	var sizes []int
	for _, s := range pool.Slices {
		sizes = append(sizes, len(s.Devices))
	}
	if len(sizes) != 3 || sizes[0] != 128 || sizes[1] != 128 || sizes[2] != 44 {
		t.Fatalf("slice sizes %v, want [128 128 44]", sizes)
	}
	if pool.Slices[1].Devices[0].Name != "gpu-128" {
		t.Fatalf("devices not sorted by index across slices: %s", pool.Slices[1].Devices[0].Name)
	}
}

func TestBuildEmptyInventoryPublishesEmptyPool(t *testing.T) {
	res := Build(&device.Inventory{Kind: device.KindNPU}, "n")
	if pool := res.Resources.Pools["n"]; len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 0 {
		t.Fatalf("want one empty slice, got %+v", pool)
	}
}

func TestValidateDeviceNamesTheDevice(t *testing.T) {
	err := ValidateDevice(&resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"x": {}}})
	if err == nil || !strings.Contains(err.Error(), "device gpu-0") || !strings.Contains(err.Error(), "exactly one value") {
		t.Fatalf("error %v", err)
	}
}
