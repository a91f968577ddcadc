package slices

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/apivalidation"
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

// TestNormalizeVersion covers versions real drivers report. Each normalised value must also be
// accepted by the API's semver rule and compare with the others as the vendor's releases do.
func TestNormalizeVersion(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		// NVIDIA driver versions: leading zeros in the patch.
		{in: "535.54.03", want: "535.54.3"},
		{in: "570.124.06", want: "570.124.6"},
		{in: "550.163.01", want: "550.163.1"},
		{in: "470.256.02", want: "470.256.2"},
		{in: "390.157", want: "390.157.0"},
		{in: "580.65.06", want: "580.65.6"},
		// CUDA compute capabilities.
		{in: "9.0", want: "9.0.0"},
		{in: "12.0", want: "12.0.0"},
		{in: "535", want: "535.0.0"},
		{in: " 1.2.3 ", want: "1.2.3"},
		{in: "570.124.06-beta", want: "570.124.6-beta"},
		{in: "1.2.3+build.7", want: "1.2.3+build.7"},
		// Ascend driver (version.info) and CANN versions.
		{in: "23.0.0", want: "23.0.0"},
		{in: "24.1.rc2", want: "24.1.0-rc2"},
		{in: "24.1.RC3", want: "24.1.0-RC3"},
		{in: "24.1.0.RC1", want: "24.1.0-RC1"},
		{in: "24.1.rc2.1", want: "24.1.0-rc2.1"},
		{in: "23.0.rc3.b070", want: "23.0.0-rc3.b070"},
		{in: "23.0.RC3.B070", want: "23.0.0-RC3.B070"},
		{in: "8.0.RC3", want: "8.0.0-RC3"},
		{in: "8.0.RC3.alpha003", want: "8.0.0-RC3.alpha003"},
		{in: "7.0.0.alpha001", want: "7.0.0-alpha001"},
		{in: "24.1.rc2.01", want: "24.1.0-rc2.1"},
		{in: "25.0.0.1", want: "25.0.0+1"},
		{in: "23.0.2.1", want: "23.0.2+1"},
		{in: "1.2.3.4.5", want: "1.2.3+4.5"},
		{in: "25.0.0.1+hotfix", want: "25.0.0+1.hotfix"},
		// Not versions.
		{in: "24.rc2", err: "MAJOR.MINOR"},
		{in: "r570", err: "does not start with a number"},
		{in: "bad-version", err: "does not start with a number"},
		{in: "570.124.06-", err: "not a semantic version"},
		{in: "1.2.3-be ta", err: "not a semantic version"},
		{in: "23.0.rc3_b070", err: "not a semantic version"},
		{in: "24.1.rc2-1", err: "dotted and a hyphenated"},
		{in: "1..2", err: "MAJOR.MINOR"},
		{in: "", err: "does not start with a number"},
		{in: "abc", err: "does not start with a number"},
		{in: "99999999999999999999.1", err: "out of range"},
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
			if _, err := apivalidation.Attribute(resourceapi.DeviceAttribute{VersionValue: &got}); err != nil {
				t.Errorf("API rejects %q: %v", got, err)
			}
		})
	}
}

// TestNormalizeVersionOrder checks that normalising keeps the vendors' release order.
func TestNormalizeVersionOrder(t *testing.T) {
	for _, order := range [][]string{
		{"23.0.rc1", "23.0.rc2", "23.0.rc3", "23.0.rc3.b070", "23.0.0", "23.0.1"},
		{"24.1.rc2", "24.1.rc2.1", "24.1.rc3", "24.1.0"},
		{"535.54.03", "535.104.05", "550.54.15", "570.124.06"},
	} {
		var prev semver.Version
		for i, raw := range order {
			n, err := NormalizeVersion(raw)
			if err != nil {
				t.Fatal(err)
			}
			v := semver.MustParse(n)
			if i > 0 && !v.GT(prev) {
				t.Errorf("%s (%s) is not after %s (%s)", raw, n, order[i-1], prev)
			}
			prev = v
		}
	}
	// A fourth number is build metadata: equal in precedence, never before its base release.
	a, b := semver.MustParse(must(NormalizeVersion("25.0.0"))), semver.MustParse(must(NormalizeVersion("25.0.0.1")))
	if a.Compare(b) != 0 {
		t.Errorf("25.0.0 and 25.0.0.1 compare %d, want 0", a.Compare(b))
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

func TestToAPIAttributes(t *testing.T) {
	d := gpu(5)
	api, omitted, _, err := ToAPI(&d)
	if err != nil || len(omitted) > 0 {
		t.Fatal(err, omitted)
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
	api, omitted, _, err := ToAPI(&d)
	if err != nil || len(omitted) > 0 {
		t.Fatal(err, omitted)
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
		gpu(5, func(d *device.Device) { d.DriverVersion = "1.2.3-" + strings.Repeat("a", 60) }),
		gpu(6, func(d *device.Device) { d.CUDAComputeCapability = "sm_90" }),
	}}
	res := Build(inv, "node-a")
	if got, want := strings.Join(res.Published, ","), "gpu-0,gpu-1,gpu-3,gpu-5,gpu-6"; got != want {
		t.Fatalf("published %s, want %s", got, want)
	}
	reasons := map[string]string{}
	for _, r := range res.Rejected {
		reasons[r.Device] = r.Reason
		if !strings.Contains(r.Err.Error(), r.Device) {
			t.Errorf("error %q does not name device %s", r.Err, r.Device)
		}
	}
	want := map[string]string{"gpu-2": "invalid", "gpu-4": "pci-bus-id"}
	if !maps.Equal(reasons, want) {
		t.Errorf("rejected %v, want %v", reasons, want)
	}
	var omitted []string
	for _, o := range res.Omitted {
		omitted = append(omitted, o.Device+"/"+string(o.Attribute))
		if !strings.Contains(o.Err.Error(), o.Device) || !strings.Contains(o.Err.Error(), string(o.Attribute)) {
			t.Errorf("error %q does not name device %s and attribute %s", o.Err, o.Device, o.Attribute)
		}
	}
	if got, want := strings.Join(omitted, ","), "gpu-1/driverVersion,gpu-5/driverVersion,gpu-6/cudaComputeCapability"; got != want {
		t.Errorf("omitted %s, want %s", got, want)
	}
	pool := res.Resources.Pools["node-a"]
	if len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 5 || pool.Slices[0].Devices[0].Name != "gpu-0" {
		t.Fatalf("unexpected pool %+v", pool)
	}
	for _, d := range pool.Slices[0].Devices {
		_, hasVersion := d.Attributes[AttrDriverVersion]
		_, hasCC := d.Attributes[AttrCUDAComputeCapability]
		if hasVersion == (d.Name == "gpu-1" || d.Name == "gpu-5") || hasCC == (d.Name == "gpu-6") {
			t.Errorf("%s: driverVersion published %v, cudaComputeCapability published %v", d.Name, hasVersion, hasCC)
		}
		if _, ok := d.Attributes[AttrUUID]; !ok {
			t.Errorf("%s lost its other attributes", d.Name)
		}
	}
}

// TestBuildSortsByNumber: devices are published in node-number order, not in the order (or by
// the index) the library enumerated them.
func TestBuildSortsByNumber(t *testing.T) {
	inv := &device.Inventory{Kind: device.KindGPU}
	for i, minor := range []int{3, 1, 0, 2} {
		inv.Devices = append(inv.Devices, gpu(i, func(d *device.Device) { d.Number, d.Name = minor, device.NameFor(device.KindGPU, minor) }))
	}
	res := Build(inv, "n")
	if got := strings.Join(res.Published, ","); got != "gpu-0,gpu-1,gpu-2,gpu-3" {
		t.Errorf("published %s", got)
	}
	var names []string
	for _, d := range res.Resources.Pools["n"].Slices[0].Devices {
		names = append(names, fmt.Sprintf("%s@%d", d.Name, *d.Attributes[AttrIndex].IntValue))
	}
	if got := strings.Join(names, ","); got != "gpu-0@2,gpu-1@1,gpu-2@3,gpu-3@0" {
		t.Errorf("devices %s", got)
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
