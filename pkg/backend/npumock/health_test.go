package npumock

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/pkg/backend/npu"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/health/healthtest"
)

// TestNPUHealth runs the NPU backend's health source on a generated tree with fault files, and
// on the same tree without them (a real node: no health source, every NPU Unknown).
func TestNPUHealth(t *testing.T) {
	dir := t.TempDir()
	be, err := New(dir, "ascend910b-8x", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv, err := be.Enumerate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run := func(src health.Source) *health.Tracker {
		tr, _ := healthtest.Watch(ctx, t, src, inv.Devices)
		return tr
	}
	faults := filepath.Join(dir, health.FaultDir)
	if err := os.MkdirAll(faults, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := run(be.(health.Watcher).HealthSource(inv.Devices, health.SourceConfig{PollInterval: 20 * time.Millisecond}))
	expect := func(what, dev string, want health.State, code string) {
		t.Helper()
		var last health.DeviceHealth
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			for _, h := range tr.Snapshot() {
				if h.Device == dev {
					last = h
				}
			}
			return last.State == want && (code == "" || len(last.Conditions) == 1 && last.Conditions[0].Code == code), nil
		})
		if err != nil {
			t.Fatalf("%s: %s is %+v, want %s %s", what, dev, last, want, code)
		}
	}
	expect("start", "npu-2", health.Healthy, "")
	if err := os.WriteFile(filepath.Join(faults, "npu-2"), []byte("fault 0x80E01801\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("fault", "npu-2", health.Unhealthy, "0x80E01801")
	if h := tr.Snapshot()[2]; h.Conditions[0].Cause != health.CauseFault {
		t.Errorf("cause = %s", h.Conditions[0].Cause)
	}
	if err := os.WriteFile(filepath.Join(faults, "npu-2"), []byte("fault nonsense\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	expect("bad file keeps the fault", "npu-2", health.Unhealthy, "0x80E01801")
	if err := os.Remove(filepath.Join(faults, "npu-2")); err != nil {
		t.Fatal(err)
	}
	expect("recovered", "npu-2", health.Healthy, "")

	// The same tree read as a real node: no fault directory, no health source.
	p, err := generate(dir, "ascend910b-8x", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	real, err := npu.New(npu.Config{SysRoot: p.SysRoot, DevRoot: p.DevRoot, NodeName: "node-a", DriverVersionFile: p.DriverVersionFile})
	if err != nil {
		t.Fatal(err)
	}
	tr = run(real.HealthSource(inv.Devices, health.SourceConfig{}))
	time.Sleep(100 * time.Millisecond)
	for _, h := range tr.Snapshot() {
		if h.State != health.Unknown {
			t.Errorf("real node: %s is %s, want Unknown", h.Device, h.State)
		}
	}
}
