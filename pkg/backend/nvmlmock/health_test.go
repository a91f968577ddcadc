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

	"github.com/accel-dra/accel-dra/pkg/device"
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

// enumerated returns the real backend over a mock machine and its inventory.
func enumerated(t *testing.T, profile string, opts ...Option) (device.Backend, *device.Inventory) {
	t.Helper()
	be, err := New(profile, "node-a", opts...)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := be.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return be, inv
}

func testHealthFromFaultFiles(t *testing.T, poll time.Duration, quick bool) {
	dir := t.TempDir()
	be, inv := enumerated(t, "h100-8x-2numa", WithFaultDir(dir))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
			be, inv := enumerated(t, "mig-mixed", WithFaultDir(dir), WithStateDir(t.TempDir()))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if dynamic {
				var err error
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

// TestXIDRecoveryRule drives the real NVML health source through fault files, one case per row
// of the rule in docs/health.md ("How long a fault lasts").
func TestXIDRecoveryRule(t *testing.T) {
	// Far above the poll (50ms) and the mock's file reads (100ms), so that a poll within the
	// hold is certain to come.
	const hold = time.Second
	type step struct {
		write string // gpu-3's fault file; "-" removes it
		want  health.State
		code  string // the XID of the condition, when Unhealthy
		stays bool   // and the state lasts several holds
	}
	tests := map[string]struct {
		oldDriver bool // no recovery action field
		// persisted: gpu-3 was tainted with XID 48 before the plugin restarted.
		persisted bool
		atStart   string // gpu-3's fault file when the source starts
		steps     []step
	}{
		"XID 109 is ignored by default": {steps: []step{{write: "xid 109", want: health.Healthy, stays: true}}},
		"recovery action none: transient, clears while the line stays": {steps: []step{
			{write: "xid 94 none", want: health.Unhealthy, code: "94"},
			{want: health.Healthy, stays: true},
		}},
		"recovery action reset: until the reset": {steps: []step{
			{write: "xid 48", want: health.Unhealthy, code: "48", stays: true},
			{write: "-", want: health.Healthy},
		}},
		"recovery action turns to reset within the hold: until the reset": {steps: []step{
			{write: "xid 94 none", want: health.Unhealthy, code: "94"},
			{write: "xid 94 reset", want: health.Unhealthy, code: "94", stays: true},
			{write: "-", want: health.Healthy},
		}},
		"driver without the field: an XID the catalogue resets after stays until reboot": {oldDriver: true, steps: []step{
			{write: "xid 48", want: health.Unhealthy, code: "48"},
			{write: "-", want: health.Unhealthy, code: "48", stays: true},
		}},
		"driver without the field: an application XID is transient": {oldDriver: true, steps: []step{
			{write: "xid 94", want: health.Unhealthy, code: "94"},
			{want: health.Healthy, stays: true},
		}},
		"driver without the field: ECC stays until reboot": {oldDriver: true, steps: []step{
			{write: "ecc", want: health.Unhealthy},
			{write: "-", want: health.Unhealthy, stays: true},
		}},
		"restart: a fault whose GPU asks for no action any more clears": {persisted: true, steps: []step{
			{want: health.Healthy, stays: true},
		}},
		"restart: a fault whose GPU still asks for a reset stays until the reset": {persisted: true, atStart: "xid 48", steps: []step{
			{want: health.Unhealthy, code: "48", stays: true},
			{write: "-", want: health.Healthy},
		}},
		"restart, driver without the field: a fault from before stays": {oldDriver: true, persisted: true, steps: []step{
			{want: health.Unhealthy, code: "48", stays: true},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.atStart != "" {
				if err := os.WriteFile(filepath.Join(dir, "gpu-3"), []byte(tc.atStart+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			opts := []Option{WithFaultDir(dir)}
			if tc.oldDriver {
				opts = append(opts, WithoutRecoveryAction())
			}
			be, inv := enumerated(t, "h100-8x-2numa", opts...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			uuids := map[string]string{}
			for _, d := range inv.Devices {
				uuids[d.Name] = d.UUID
			}
			tr, err := health.NewTracker(health.TrackerOptions{Devices: uuids, Path: filepath.Join(t.TempDir(), "state.json"), BootID: "boot"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.persisted {
				ev, _ := health.NewClassifier(nil).Classify("gpu-3", 48)
				if _, _, err := tr.Apply(ev); err != nil {
					t.Fatal(err)
				}
			}
			src := be.(health.Watcher).HealthSource(inv.Devices, health.SourceConfig{PollInterval: 50 * time.Millisecond, TransientHold: hold})
			done := healthtest.WatchTracker(ctx, t, src, tr)
			state := func() health.DeviceHealth {
				for _, h := range tr.Snapshot() {
					if h.Device == "gpu-3" {
						return h
					}
				}
				return health.DeviceHealth{}
			}
			matches := func(h health.DeviceHealth, s step) bool {
				return h.State == s.want && (s.code == "" || len(h.Conditions) > 0 && h.Conditions[0].Code == s.code)
			}
			for i, s := range tc.steps {
				switch s.write {
				case "":
				case "-":
					if err := os.Remove(filepath.Join(dir, "gpu-3")); err != nil {
						t.Fatal(err)
					}
				default:
					if err := os.WriteFile(filepath.Join(dir, "gpu-3"), []byte(s.write+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				var last health.DeviceHealth
				if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
					last = state()
					return matches(last, s), nil
				}); err != nil {
					t.Fatalf("step %d (%q): gpu-3 is %+v, want %s %s", i, s.write, last, s.want, s.code)
				}
				if s.stays {
					// Long enough for a transient fault's hold to end and for several polls.
					deadline := time.Now().Add(hold + 500*time.Millisecond)
					for time.Now().Before(deadline) {
						if h := state(); !matches(h, s) {
							t.Fatalf("step %d (%q): gpu-3 became %+v, want it to stay %s %s", i, s.write, h, s.want, s.code)
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHardwareEventsObservedOnce: each XID (an ignored application XID included) and ECC error
// reaches SourceConfig.Observed once, with the physical GPU's UUID, however many devices are
// published on that GPU (their health events repeat per device; a metric must not).
func TestHardwareEventsObservedOnce(t *testing.T) {
	dir := t.TempDir()
	be, inv := enumerated(t, "mig-mixed", WithFaultDir(dir), WithStateDir(t.TempDir()))
	inv, err := mig.Dynamic(inv)
	if err != nil {
		t.Fatal(err)
	}
	var uuid string
	onGPU0 := 0
	for _, d := range inv.Devices {
		if d.MIG != nil && d.MIG.Parent == "gpu-0" {
			uuid = d.MIG.ParentUUID
			onGPU0++
		}
	}
	if onGPU0 < 2 || uuid == "" {
		t.Fatalf("%d devices on gpu-0 (%q); the fixture needs several", onGPU0, uuid)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	observed := make(chan health.HardwareEvent, 100)
	_, done := healthtest.Watch(ctx, t, be.(health.Watcher).HealthSource(inv.Devices, health.SourceConfig{
		PollInterval: 50 * time.Millisecond,
		Observed:     func(ev health.HardwareEvent) { observed <- ev },
	}), inv.Devices)
	if err := os.WriteFile(filepath.Join(dir, "gpu-0"), []byte("xid 48\nxid 13\necc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[health.HardwareEvent]int{
		{UUID: uuid, Cause: health.CauseXID, XID: 48}: 1,
		{UUID: uuid, Cause: health.CauseXID, XID: 13}: 1,
		{UUID: uuid, Cause: health.CauseECC}:          1,
	}
	got := map[health.HardwareEvent]int{}
	timeout := time.After(10 * time.Second)
	for n := 0; n < 3; n++ {
		select {
		case ev := <-observed:
			got[ev]++
		case <-timeout:
			t.Fatalf("observed %v, want %v", got, want)
		}
	}
	// Polls go on; nothing more may come of these three events.
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
	close(observed)
	for ev := range observed {
		got[ev]++
	}
	if !maps.Equal(got, want) {
		t.Errorf("observed %v, want each event once: %v", got, want)
	}
}

// TestFabricHealth drives the real NVML health source through "fabric <condition>" lines: a GB200
// whose fabric health mask reports a condition is unhealthy for the fabric cause, with the
// condition as its code, and recovers when the mask clears; GPUs whose fabric has no health
// mask (Hopper HGX: NOT_SUPPORTED fields; A100: no fabric info) never are, whatever is written.
func TestFabricHealth(t *testing.T) {
	type step struct {
		// write is the fault file of gpu-1; "" removes it.
		write string
		// wantCode is gpu-1's fabric fault code; "" is healthy.
		wantCode string
	}
	tests := map[string]struct {
		profile string
		steps   []step
	}{
		"gb200 degraded bandwidth, then route unhealthy too, then recovered": {profile: "gb200-4x", steps: []step{
			{write: "fabric degraded-bw\n", wantCode: "degraded-bw"},
			{write: "fabric degraded-bw\nfabric route-unhealthy\n", wantCode: "degraded-bw.route-unhealthy"},
			{write: "fabric route-unhealthy\n", wantCode: "route-unhealthy"},
			{write: ""},
		}},
		"gb200 recoveries in progress and incorrect configuration": {profile: "gb200-4x-rack2", steps: []step{
			{write: "fabric route-recovery\n", wantCode: "route-recovery"},
			{write: "fabric access-timeout-recovery\n", wantCode: "access-timeout-recovery"},
			{write: "fabric incorrect-config\n", wantCode: "incorrect-config"},
			{write: "# repaired\n"},
		}},
		"hopper HGX reports no fabric health": {profile: "h100-8x-nvswitch", steps: []step{
			{write: "fabric degraded-bw\nfabric route-unhealthy\n"},
		}},
		"a100 has no fabric info": {profile: "a100-8x-nvswitch", steps: []step{
			{write: "fabric route-unhealthy\n"},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			be, inv := enumerated(t, tc.profile, WithFaultDir(dir))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr, done := healthtest.Watch(ctx, t, be.(health.Watcher).HealthSource(inv.Devices, health.SourceConfig{PollInterval: 50 * time.Millisecond}), inv.Devices)
			defer func() { cancel(); <-done }()
			for i, s := range tc.steps {
				path := filepath.Join(dir, "gpu-1")
				var err error
				if s.write == "" {
					err = os.Remove(path)
				} else {
					err = os.WriteFile(path, []byte(s.write), 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
				// A fault must have time to show where none is wanted: the source polls
				// every 50ms and the mock reads its files every 100ms.
				settle := time.Now().Add(500 * time.Millisecond)
				var got map[string]health.DeviceHealth
				err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
					got = map[string]health.DeviceHealth{}
					for _, h := range tr.Snapshot() {
						got[h.Device] = h
					}
					for _, d := range inv.Devices {
						h := got[d.Name]
						if d.Name == "gpu-1" && s.wantCode != "" {
							if h.State != health.Unhealthy || len(h.Conditions) != 1 || h.Conditions[0].Cause != health.CauseFabric ||
								h.Conditions[0].Code != s.wantCode || !strings.Contains(h.Conditions[0].Message, "fabric") {
								return false, nil
							}
							continue
						}
						if h.State != health.Healthy {
							return false, nil
						}
					}
					return time.Now().After(settle), nil
				})
				if err != nil {
					t.Fatalf("step %d (gpu-1 %q): health %+v, want gpu-1 fabric fault %q and every other GPU healthy", i, s.write, got, s.wantCode)
				}
			}
		})
	}
}
