package driver

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// TestFailedDeviceIsReported: a device the backend could not enumerate is reported like a
// rejected one, with its own reason, and the others are published.
func TestFailedDeviceIsReported(t *testing.T) {
	inv := inventory(3)
	inv.Devices = append(inv.Devices[:1], inv.Devices[2:]...)
	inv.Failed = []device.Failed{{Index: 1, Name: "gpu-1", PCIBusID: "0000:11:00.0", Err: errors.New("gpu index 1: nvml GetUUID: GPU is lost")}}
	e := newEnv(t, inv)
	pool := e.drv.Resources().Pools[nodeName]
	var names []string
	for _, d := range pool.Slices[0].Devices {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, ","); got != "gpu-0,gpu-2" {
		t.Fatalf("published %s, want gpu-0,gpu-2", got)
	}
	if len(e.events.msgs) != 1 {
		t.Fatalf("events %v, want one", e.events.msgs)
	}
	for _, want := range []string{"InvalidDevice", "gpu-1", "0000:11:00.0", "GetUUID", "GPU is lost"} {
		if !strings.Contains(e.events.msgs[0], want) {
			t.Errorf("event %q does not contain %q", e.events.msgs[0], want)
		}
	}
	if got := testutil.ToFloat64(e.metrics.RejectedDevices.WithLabelValues("enumeration")); got != 1 {
		t.Errorf("rejected_devices{reason=enumeration} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.metrics.PublishedDevices); got != 2 {
		t.Errorf("published_devices = %v, want 2", got)
	}
	if r := e.prepare(claim("u1", []result{{Device: "gpu-1"}})); r.Err == nil {
		t.Error("prepared a device that failed enumeration")
	}
	if r := e.prepare(claim("u2", []result{{Device: "gpu-2"}})); r.Err != nil {
		t.Errorf("prepare of a healthy device: %v", r.Err)
	}
}

// TestOmittedAttributeIsReported: a driver version that cannot be made semver costs the device
// that attribute, with a warning event and metric, not its place in the slice.
func TestOmittedAttributeIsReported(t *testing.T) {
	inv := inventory(2)
	inv.Devices[1].DriverVersion = "r570"
	e := newEnv(t, inv)
	pool := e.drv.Resources().Pools[nodeName]
	if n := len(pool.Slices[0].Devices); n != 2 {
		t.Fatalf("%d devices published, want 2", n)
	}
	if _, ok := pool.Slices[0].Devices[1].Attributes["driverVersion"]; ok {
		t.Error("gpu-1 published with driverVersion")
	}
	if len(e.events.msgs) != 1 || !strings.Contains(e.events.msgs[0], "InvalidDeviceAttribute") ||
		!strings.Contains(e.events.msgs[0], "gpu-1") || !strings.Contains(e.events.msgs[0], "r570") {
		t.Fatalf("events %v", e.events.msgs)
	}
	if got := testutil.ToFloat64(e.metrics.OmittedAttributes.WithLabelValues("driverVersion")); got != 1 {
		t.Errorf("omitted_attributes{attribute=driverVersion} = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(e.metrics.RejectedDevices); got != 0 {
		t.Errorf("%d rejected_devices series, want none", got)
	}
	if r := e.prepare(claim("u1", []result{{Device: "gpu-1"}})); r.Err != nil {
		t.Errorf("prepare of the device without driverVersion: %v", r.Err)
	}
}
