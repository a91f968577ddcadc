package nvmlmock

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/health/healthtest"
	"github.com/accel-dra/accel-dra/pkg/mig"
)

// TestHealthFromFaultFiles runs the real NVML health source against the mock machine and drives
// it only through fault files, as the e2e tests and users do.
func TestHealthFromFaultFiles(t *testing.T) {
	testHealthFromFaultFiles(t, 50*time.Millisecond, false)
}

// TestHealthQuickReset: a reset right after the XID, with polls far apart, still recovers the
// GPU. (Whether a poll happened to fall between the XID and the reset is up to timing, so this
// does not pin that the action is read with the event; the e2e test, whose reset follows within
// a second, failed without it.)
func TestHealthQuickReset(t *testing.T) {
	testHealthFromFaultFiles(t, 2*time.Second, true)
}

func testHealthFromFaultFiles(t *testing.T, poll time.Duration, quick bool) {
	dir := t.TempDir()
	be, err := New("h100-8x-2numa", "node-a", WithFaultDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv, err := be.Enumerate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tr, done := healthtest.Watch(ctx, t, be.(health.Watcher).HealthSource(inv.Devices, health.SourceConfig{PollInterval: poll}), inv.Devices)
	expect := func(what, dev string, want health.State, cause health.Cause, msg string) {
		t.Helper()
		var last health.DeviceHealth
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			for _, h := range tr.Snapshot() {
				if h.Device == dev {
					last = h
				}
			}
			if last.State != want {
				return false, nil
			}
			if cause == "" {
				return len(last.Conditions) == 0, nil
			}
			return len(last.Conditions) == 1 && last.Conditions[0].Cause == cause && strings.Contains(last.Conditions[0].Message, msg), nil
		})
		if err != nil {
			t.Fatalf("%s: %s is %+v, want %s %s %q", what, dev, last, want, cause, msg)
		}
	}
	inject := func(dev, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, dev), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reset := func(dev string) {
		t.Helper()
		if err := os.Remove(filepath.Join(dir, dev)); err != nil {
			t.Fatal(err)
		}
	}

	expect("start", "gpu-3", health.Healthy, "", "")
	if quick {
		inject("gpu-5", "xid 48\n")
		expect("xid", "gpu-5", health.Unhealthy, health.CauseXID, "XID 48")
		reset("gpu-5")
		expect("quick reset", "gpu-5", health.Healthy, "", "")
		cancel()
		<-done
		return
	}
	inject("gpu-3", "xid 48\n")
	expect("xid", "gpu-3", health.Unhealthy, health.CauseXID, "XID 48")
	inject("gpu-1", "xid 13\n")
	inject("gpu-0", "ecc\n")
	expect("ecc", "gpu-0", health.Unhealthy, health.CauseECC, "ECC")
	// The application XID was delivered before the ECC error (name order) and ignored.
	expect("application xid", "gpu-1", health.Healthy, "", "")
	reset("gpu-3")
	expect("recovered xid", "gpu-3", health.Healthy, "", "")
	reset("gpu-0")
	expect("recovered ecc", "gpu-0", health.Healthy, "", "")
	inject("gpu-2", "lost\n")
	expect("lost", "gpu-2", health.Unhealthy, health.CauseLost, "GPU_IS_LOST")
	// A bad file keeps what the device had.
	inject("gpu-2", "not a fault\n")
	time.Sleep(300 * time.Millisecond)
	expect("bad file", "gpu-2", health.Unhealthy, health.CauseLost, "GPU_IS_LOST")
	reset("gpu-2")
	expect("answers again", "gpu-2", health.Healthy, "", "")
	inject("gpu-4", "xid 79\n")
	expect("fallen off the bus", "gpu-4", health.Unhealthy, health.CauseLost, "XID 79")

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestHealthOfMIGDevices: a fault on a GPU in MIG mode reaches every device published on it
// (its static MIG devices, or its dynamic partitions and the whole-GPU device), and only them.
func TestHealthOfMIGDevices(t *testing.T) {
	for _, dynamic := range []bool{false, true} {
		t.Run(fmt.Sprintf("dynamic=%v", dynamic), func(t *testing.T) {
			dir := t.TempDir()
			be, err := New("mig-mixed", "node-a", WithFaultDir(dir), WithStateDir(t.TempDir()))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			inv, err := be.Enumerate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if dynamic {
				if inv, err = mig.Dynamic(inv); err != nil {
					t.Fatal(err)
				}
			}
			onGPU0 := map[string]bool{}
			for _, d := range inv.Devices {
				if d.Name == "gpu-0" || d.MIG != nil && d.MIG.Parent == "gpu-0" {
					onGPU0[d.Name] = true
				}
			}
			if len(onGPU0) < 2 {
				t.Fatalf("devices on gpu-0: %v; the fixture needs several", onGPU0)
			}
			tr, done := healthtest.Watch(ctx, t, be.(health.Watcher).HealthSource(inv.Devices, health.SourceConfig{PollInterval: 50 * time.Millisecond}), inv.Devices)
			unhealthy := func() map[string]bool {
				out := map[string]bool{}
				for _, h := range tr.Snapshot() {
					if h.State == health.Unhealthy {
						out[h.Device] = true
					}
				}
				return out
			}
			if err := os.WriteFile(filepath.Join(dir, "gpu-0"), []byte("xid 48\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var got map[string]bool
			if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				got = unhealthy()
				return len(got) >= len(onGPU0), nil
			}); err != nil || !maps.Equal(got, onGPU0) {
				t.Errorf("unhealthy after an XID on gpu-0: %v, want exactly %v", got, onGPU0)
			}
			if err := os.Remove(filepath.Join(dir, "gpu-0")); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return len(unhealthy()) == 0, nil
			}); err != nil {
				t.Errorf("still unhealthy after recovery: %v", unhealthy())
			}
			cancel()
			<-done
		})
	}
}
