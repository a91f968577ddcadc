package metrics

import (
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// sum adds a counter's value over the plugins, as sum() over the pods of a node does.
func sum(get func(*Plugin) prometheus.Collector, plugins ...*Plugin) float64 {
	var s float64
	for _, p := range plugins {
		s += testutil.ToFloat64(get(p))
	}
	return s
}

// TestNodeEventsCountedOnceDuringSurge runs the two plugin processes of a rolling update with
// surge on one node: both see every hardware event, and each event must count once over both.
// Once the old one exits, the new one counts.
func TestNodeEventsCountedOnceDuringSurge(t *testing.T) {
	lock := filepath.Join(t.TempDir(), ReporterFile)
	oldR, newR := NewReporter(lock), NewReporter(lock)
	old, new := NewPlugin("gpu.accel-dra.io"), NewPlugin("gpu.accel-dra.io")
	old.SetReporter(oldR) // the old pod was there first
	new.SetReporter(newR)
	both := []*Plugin{old, new}

	xid := func(p *Plugin) prometheus.Collector { return p.XIDEvents.WithLabelValues("GPU-1", "48") }
	ecc := func(p *Plugin) prometheus.Collector { return p.ECCEvents.WithLabelValues("GPU-1") }
	drv := func(p *Plugin) prometheus.Collector { return p.DriverChanges }
	event := func() {
		for _, p := range both {
			p.CountXID("GPU-1", 48)
			p.CountECC("GPU-1")
			p.CountDriverChange()
		}
	}

	event()
	for name, get := range map[string]func(*Plugin) prometheus.Collector{"xid": xid, "ecc": ecc, "driver change": drv} {
		if got := sum(get, both...); got != 1 {
			t.Errorf("%s: one event counted %v times over the two processes", name, got)
		}
		if got := testutil.ToFloat64(get(old)); got != 1 {
			t.Errorf("%s: the process that was first counted %v, want 1", name, got)
		}
	}
	if o, n := testutil.ToFloat64(old.NodeReporter), testutil.ToFloat64(new.NodeReporter); o != 1 || n != 0 {
		t.Errorf("accel_dra_node_reporter old %v new %v, want 1 and 0", o, n)
	}

	// The old pod stops: its lock goes with it, and the new pod counts the next event.
	oldR.Close()
	both = both[1:]
	new.RefreshReporter()
	if n := testutil.ToFloat64(new.NodeReporter); n != 1 {
		t.Errorf("accel_dra_node_reporter of the remaining process %v, want 1", n)
	}
	event()
	for name, get := range map[string]func(*Plugin) prometheus.Collector{"xid": xid, "ecc": ecc, "driver change": drv} {
		if got := testutil.ToFloat64(get(new)); got != 1 {
			t.Errorf("%s: the remaining process counted %v, want 1", name, got)
		}
	}
}

// A lock that cannot be taken at all must not silence the counters.
func TestReporterWithoutLockFileCounts(t *testing.T) {
	p := NewPlugin("gpu.accel-dra.io")
	p.SetReporter(NewReporter("/proc/no-such-dir/" + ReporterFile))
	p.CountXID("GPU-1", 79)
	if got := testutil.ToFloat64(p.XIDEvents.WithLabelValues("GPU-1", "79")); got != 1 {
		t.Errorf("XID counted %v times, want 1", got)
	}
}

func numa(n int64) *int64 { return &n }

// TestDeviceInfoFollowsDevices: one series per device given, with the identity labels; a device
// no longer given loses its series.
func TestDeviceInfoFollowsDevices(t *testing.T) {
	p := NewPlugin("gpu.accel-dra.io")
	gpu0 := device.Device{Name: "gpu-0", UUID: "GPU-0", PCIBusID: "0000:17:00.0", ProductName: "NVIDIA H100 80GB HBM3", NUMANode: numa(0)}
	gpu1 := device.Device{Name: "gpu-1", UUID: "GPU-1", PCIBusID: "0000:2a:00.0", ProductName: "NVIDIA H100 80GB HBM3"}
	mig := device.Device{Name: "gpu-1-mig-1g10gb-0", PCIBusID: "0000:2a:00.0", ProductName: "NVIDIA H100 80GB HBM3", NUMANode: numa(1),
		MIG: &device.MIG{ParentUUID: "GPU-1", Dynamic: true}}
	p.SetDevices([][]string{DeviceInfoOf("node-a", gpu0), DeviceInfoOf("node-a", gpu1), DeviceInfoOf("node-a", mig)})
	want := `
# HELP accel_dra_device_info 1 for each device published in this node's ResourceSlices, with its identity: join on uuid with other exporters (DCGM's UUID).
# TYPE accel_dra_device_info gauge
accel_dra_device_info{device="gpu-0",driver="gpu.accel-dra.io",numa_node="0",parent_uuid="",pci_bus_id="0000:17:00.0",pool="node-a",product="NVIDIA H100 80GB HBM3",uuid="GPU-0"} 1
accel_dra_device_info{device="gpu-1",driver="gpu.accel-dra.io",numa_node="",parent_uuid="",pci_bus_id="0000:2a:00.0",pool="node-a",product="NVIDIA H100 80GB HBM3",uuid="GPU-1"} 1
accel_dra_device_info{device="gpu-1-mig-1g10gb-0",driver="gpu.accel-dra.io",numa_node="1",parent_uuid="GPU-1",pci_bus_id="0000:2a:00.0",pool="node-a",product="NVIDIA H100 80GB HBM3",uuid=""} 1
`
	if err := testutil.GatherAndCompare(p.Registry, strings.NewReader(want), "accel_dra_device_info"); err != nil {
		t.Error(err)
	}
	p.SetDevices([][]string{DeviceInfoOf("node-a", gpu1)})
	if n := testutil.CollectAndCount(p.DeviceInfo); n != 1 {
		t.Errorf("%d series after two devices went, want 1", n)
	}
	if got := testutil.ToFloat64(p.DeviceInfo.WithLabelValues(DeviceInfoOf("node-a", gpu1)...)); got != 1 {
		t.Errorf("remaining device's series %v, want 1", got)
	}
}

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewBuildInfo())
	want := `
# HELP accel_dra_build_info A metric with a constant '1' value labelled by the version, revision and Go version of the binary.
# TYPE accel_dra_build_info gauge
accel_dra_build_info{goversion="` + runtime.Version() + `",revision="unknown",version="dev"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// Names lists the metrics of vectors that have no series yet, which Gather leaves out.
func TestNames(t *testing.T) {
	names := Names(NewPlugin("gpu.accel-dra.io").Registry)
	for _, n := range []string{"accel_dra_xid_events_total", "accel_dra_device_info", "accel_dra_prepare_duration_seconds", "accel_dra_build_info", "go_goroutines"} {
		if !slices.Contains(names, n) {
			t.Errorf("Names lacks %s: %v", n, names)
		}
	}
	if diff := cmp.Diff(slices.Compact(slices.Clone(names)), names); diff != "" {
		t.Errorf("Names has duplicates:\n%s", diff)
	}
}
