package health

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestClassify(t *testing.T) {
	tests := map[string]struct {
		ignored   []uint64
		xid       uint64
		wantFault bool
		wantCause Cause
		wantMsg   string
	}{
		"application error ignored by default": {xid: 13},
		"page fault ignored by default":        {xid: 31},
		"stopped processing ignored":           {xid: 43},
		"preemptive cleanup ignored":           {xid: 45},
		"video processor ignored":              {xid: 68},
		"context switch timeout ignored":       {xid: 109},
		"double bit ECC is critical":           {xid: 48, wantFault: true, wantCause: CauseXID, wantMsg: "XID 48: Double Bit ECC Error"},
		"fallen off the bus is lost":           {xid: 79, wantFault: true, wantCause: CauseLost, wantMsg: "XID 79: GPU has fallen off the bus"},
		"unlisted XID is critical":             {xid: 999, wantFault: true, wantCause: CauseXID, wantMsg: "XID 999: critical error"},
		"configured list replaces defaults":    {ignored: []uint64{48}, xid: 13, wantFault: true, wantCause: CauseXID, wantMsg: "XID 13: Graphics Engine Exception"},
		"configured list ignores its XIDs":     {ignored: []uint64{48}, xid: 48},
		"empty list ignores nothing":           {ignored: []uint64{}, xid: 43, wantFault: true, wantCause: CauseXID, wantMsg: "XID 43: GPU stopped processing"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ev, fault := NewClassifier(tc.ignored).Classify("gpu-3", tc.xid)
			if fault != tc.wantFault {
				t.Fatalf("fault = %v, want %v", fault, tc.wantFault)
			}
			if !fault {
				return
			}
			if ev.Type != Fault || ev.Device != "gpu-3" || ev.Cause != tc.wantCause || ev.Message != tc.wantMsg || ev.Code == "" {
				t.Errorf("event = %+v", ev)
			}
		})
	}
}

// TestParseEffectsNoTaints: the documented way to run without device taints (every fault cause
// None) also leaves the driver and fabric causes untainted, unless they are named.
func TestParseEffectsNoTaints(t *testing.T) {
	off := map[string]string{"xid": "None", "ecc": "None", "lost": "None", "fault": "None"}
	if e, err := ParseEffects(off); err != nil || len(e) != 0 {
		t.Errorf("every fault None: %v, %v; want no taint at all", e, err)
	}
	for _, c := range []Cause{CauseDriver, CauseFabric} {
		named := maps.Clone(off)
		named[string(c)] = "NoSchedule"
		if e, err := ParseEffects(named); err != nil || len(e) != 1 || e[c] != resourceapi.DeviceTaintEffectNoSchedule {
			t.Errorf("every fault None but %s named: %v, %v; want only %s NoSchedule", c, e, err, c)
		}
	}
}

func TestParseEffects(t *testing.T) {
	e, err := ParseEffects(map[string]string{"lost": "NoExecute", "xid": "None", "unknown": "NoSchedule"})
	if err != nil {
		t.Fatal(err)
	}
	want := Effects{CauseLost: resourceapi.DeviceTaintEffectNoExecute, CauseECC: resourceapi.DeviceTaintEffectNoSchedule,
		CauseFault: resourceapi.DeviceTaintEffectNoSchedule, CauseUnknown: resourceapi.DeviceTaintEffectNoSchedule,
		CauseDriver: resourceapi.DeviceTaintEffectNoSchedule, CauseFabric: resourceapi.DeviceTaintEffectNoSchedule}
	if len(e) != len(want) {
		t.Fatalf("effects = %v, want %v", e, want)
	}
	for c, eff := range want {
		if e[c] != eff {
			t.Errorf("effect of %s = %q, want %q", c, e[c], eff)
		}
	}
	for _, bad := range []map[string]string{{"xyz": "NoSchedule"}, {"xid": "Evict"}} {
		if _, err := ParseEffects(bad); err == nil {
			t.Errorf("ParseEffects(%v) succeeded", bad)
		}
	}
}

func TestParseFaults(t *testing.T) {
	got, err := ParseFaults([]byte("# comment\n\nxid 48\necc\n lost \nfault 0x80E01801\nxid 94 none\necc reboot\nfabric degraded-bw\nfabric route-unhealthy\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"xid 48", "ecc", "lost", "fault 0x80E01801", "xid 94 none", "ecc reboot", "fabric degraded-bw", "fabric route-unhealthy"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("fault %d = %q, want %q", i, got[i], want[i])
		}
	}
	if got[4].Action != "none" || got[4].Event() != (InjectedFault{Kind: FaultXID, Code: "94"}) {
		t.Errorf("xid with action parsed as %+v", got[4])
	}
	for _, bad := range []string{"xid", "xid abc", "ecc 3", "boom", "fault zz", "xid 48 later", "lost reset", "fault 0x1 none", "xid 48 none extra", "fabric", "fabric slow", "fabric degraded-bw reset"} {
		if _, err := ParseFaults([]byte(bad)); err == nil {
			t.Errorf("ParseFaults(%q) succeeded", bad)
		}
	}
}

func TestReadFaultsKeepsBadFilesApart(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "gpu-1"), "xid 79\n")
	write(t, filepath.Join(dir, "gpu-2"), "nonsense\n")
	faults, bad := ReadFaults(dir)
	if len(faults["gpu-1"]) != 1 || faults["gpu-1"][0].Code != "79" {
		t.Errorf("faults = %v", faults)
	}
	if _, ok := faults["gpu-2"]; ok || bad["gpu-2"] == nil || !strings.Contains(bad["gpu-2"].Error(), "gpu-2") {
		t.Errorf("bad file: faults %v, bad %v", faults, bad)
	}
	if f, b := ReadFaults(filepath.Join(dir, "missing")); len(f) != 0 || len(b) != 0 {
		t.Errorf("missing dir: %v %v", f, b)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newTracker(t *testing.T, path, boot string, clk *clocktesting.FakeClock, devs map[string]string) *Tracker {
	t.Helper()
	tr, err := NewTracker(TrackerOptions{Devices: devs, Path: path, BootID: boot, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func stateOf(tr *Tracker, dev string) DeviceHealth {
	for _, h := range tr.Snapshot() {
		if h.Device == dev {
			return h
		}
	}
	return DeviceHealth{}
}

func TestTrackerRecoveryRules(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	devs := map[string]string{"gpu-0": "GPU-a", "gpu-3": "GPU-d"}
	tr := newTracker(t, "", "", clk, devs)
	apply := func(ev Event) *Transition {
		t.Helper()
		tri, _, err := tr.Apply(ev)
		if err != nil {
			t.Fatal(err)
		}
		return tri
	}
	if got := stateOf(tr, "gpu-3").State; got != Unknown {
		t.Fatalf("before watching: %s, want Unknown", got)
	}
	if tri := apply(Event{Type: Watching, Device: "gpu-3"}); tri == nil || tri.To != Healthy {
		t.Fatalf("watching: transition %+v", tri)
	}
	changes := tr.Changes()
	xid, _ := NewClassifier(nil).Classify("gpu-3", 48)
	tri := apply(xid)
	if tri == nil || tri.From != Healthy || tri.To != Unhealthy || !strings.Contains(tri.Message, "XID 48") {
		t.Fatalf("xid: transition %+v", tri)
	}
	select {
	case <-changes:
	default:
		t.Error("Changes not closed by a change")
	}
	since := stateOf(tr, "gpu-3").Conditions[0].Since

	// Time passing recovers nothing.
	clk.Step(24 * time.Hour)
	if got := stateOf(tr, "gpu-3").State; got != Unhealthy {
		t.Fatalf("a day later: %s, want Unhealthy", got)
	}
	// The same XID again keeps the time of the first.
	if tri := apply(xid); tri != nil {
		t.Errorf("repeat: transition %+v", tri)
	}
	if got := stateOf(tr, "gpu-3").Conditions[0].Since; !got.Equal(since) {
		t.Errorf("repeat moved since from %v to %v", since, got)
	}
	// A second cause; recovering one cause leaves the other.
	apply(Event{Type: Fault, Device: "gpu-3", Cause: CauseECC, Message: "double-bit ECC error"})
	if tri := apply(Event{Type: Recovered, Device: "gpu-3", Cause: CauseXID}); tri != nil {
		t.Errorf("partial recovery: transition %+v", tri)
	}
	if h := stateOf(tr, "gpu-3"); h.State != Unhealthy || len(h.Conditions) != 1 || h.Conditions[0].Cause != CauseECC {
		t.Fatalf("after partial recovery: %+v", h)
	}
	if tri := apply(Event{Type: Recovered, Device: "gpu-3"}); tri == nil || tri.To != Healthy {
		t.Fatalf("recovery: transition %+v", tri)
	}
	// Recovering a healthy device changes nothing.
	if tri, changed, _ := tr.Apply(Event{Type: Recovered, Device: "gpu-3"}); tri != nil || changed {
		t.Errorf("recovering healthy device: %+v %v", tri, changed)
	}
	if _, _, err := tr.Apply(Event{Type: Fault, Device: "gpu-9", Cause: CauseXID}); err == nil {
		t.Error("event for unknown device accepted")
	}
	if _, _, err := tr.Apply(Event{Type: Fault, Device: "gpu-0"}); err == nil {
		t.Error("fault without cause accepted")
	}
}

func TestTrackerPersists(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "health", "state.json")
	devs := map[string]string{"gpu-0": "GPU-a", "gpu-3": "GPU-d"}
	tr := newTracker(t, path, "boot-1", clk, devs)
	if _, _, err := tr.Apply(Event{Type: Fault, Device: "gpu-3", Cause: CauseXID, Code: "48", Message: "XID 48"}); err != nil {
		t.Fatal(err)
	}
	since := stateOf(tr, "gpu-3").Conditions[0].Since
	clk.Step(time.Hour)

	again := newTracker(t, path, "boot-1", clk, devs)
	h := stateOf(again, "gpu-3")
	if h.State != Unhealthy || len(h.Conditions) != 1 || !h.Conditions[0].Since.Equal(since) || h.Conditions[0].Code != "48" {
		t.Fatalf("after restart: %+v", h)
	}
	if got := stateOf(again, "gpu-0"); got.State != Unknown || !got.UnknownSince.Equal(since) {
		t.Errorf("unknown device after restart: %+v (want unknown since %v)", got, since)
	}
	// Another UUID under the name is another device.
	if h := stateOf(newTracker(t, path, "boot-1", clk, map[string]string{"gpu-3": "GPU-other"}), "gpu-3"); h.State != Unknown {
		t.Errorf("other UUID: %+v", h)
	}
	// A reboot resets the devices.
	if h := stateOf(newTracker(t, path, "boot-2", clk, devs), "gpu-3"); h.State != Unknown {
		t.Errorf("after reboot: %+v", h)
	}
	// A corrupt file is an error, and is left for the operator.
	write(t, path, "{not json")
	if _, err := NewTracker(TrackerOptions{Devices: devs, Path: path, BootID: "boot-1", Clock: clk}); err == nil {
		t.Error("corrupt state accepted")
	}
	if data, _ := os.ReadFile(path); string(data) != "{not json" {
		t.Error("corrupt state was overwritten")
	}
}

func TestTrackerActsOnUnsavableState(t *testing.T) {
	dir := t.TempDir()
	// The state file's directory is a file: every save fails.
	write(t, filepath.Join(dir, "health"), "")
	_, err := NewTracker(TrackerOptions{Devices: map[string]string{"gpu-0": "GPU-a"}, Path: filepath.Join(dir, "health", "state.json"), BootID: "b"})
	if err == nil {
		t.Fatal("NewTracker succeeded with an unwritable state path")
	}
	tr := newTracker(t, "", "", clocktesting.NewFakeClock(time.Now()), map[string]string{"gpu-0": "GPU-a"})
	tr.opts.Path = filepath.Join(dir, "health", "state.json")
	changes := tr.Changes()
	tri, changed, err := tr.Apply(Event{Type: Fault, Device: "gpu-0", Cause: CauseXID, Code: "48", Message: "XID 48"})
	if err == nil || !changed || tri == nil || tri.To != Unhealthy {
		t.Fatalf("Apply = %+v, %v, %v; want the transition and the save error", tri, changed, err)
	}
	select {
	case <-changes:
	default:
		t.Error("a change that could not be saved was not announced")
	}
}

func TestXIDNeedsReset(t *testing.T) {
	for xid, want := range map[uint64]bool{
		13: false, 31: false, 43: false, 45: false, 63: false, 94: false, // RESTART_APP, IGNORE
		48: true, 62: true, 64: true, 74: true, 79: true, 95: true, 109: true, 119: true, 140: true, // RESET_GPU and workflows with a reset
		999: true, // not in the catalogue
	} {
		if got := XIDNeedsReset(xid); got != want {
			t.Errorf("XIDNeedsReset(%d) = %v, want %v", xid, got, want)
		}
	}
}

// TestTrackerTransientFaults: a fault with a hold clears when the hold ends, also after a
// restart; reporting it again extends the hold; a lasting fault of the same cause is not made
// transient, and makes a transient one lasting.
func TestTrackerTransientFaults(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "state.json")
	devs := map[string]string{"gpu-0": "GPU-a", "gpu-3": "GPU-d"}
	tr := newTracker(t, path, "boot", clk, devs)
	apply := func(tr *Tracker, ev Event) {
		t.Helper()
		if _, _, err := tr.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	expire := func(tr *Tracker) ([]*Transition, time.Time) {
		t.Helper()
		trs, next, err := tr.Expire()
		if err != nil {
			t.Fatal(err)
		}
		return trs, next
	}
	xid := func(code string, hold time.Duration) Event {
		return Event{Type: Fault, Device: "gpu-3", Cause: CauseXID, Code: code, Message: "XID " + code, Hold: hold}
	}
	apply(tr, Event{Type: Watching, Device: "gpu-3"})
	apply(tr, xid("94", time.Minute))
	if trs, next := expire(tr); len(trs) != 0 || !next.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("before the hold ends: %v, next %v", trs, next)
	}
	clk.Step(40 * time.Second)
	apply(tr, xid("94", time.Minute)) // again: the hold runs from now
	clk.Step(40 * time.Second)
	if trs, _ := expire(tr); len(trs) != 0 || stateOf(tr, "gpu-3").State != Unhealthy {
		t.Fatalf("a repeated transient fault cleared by its first hold: %v", trs)
	}
	// A restart keeps the hold.
	tr = newTracker(t, path, "boot", clk, devs)
	apply(tr, Event{Type: Watching, Device: "gpu-3"})
	clk.Step(20 * time.Second)
	trs, next := expire(tr)
	if len(trs) != 1 || trs[0].Device != "gpu-3" || trs[0].To != Healthy || !next.IsZero() {
		t.Fatalf("after the hold: %+v, next %v", trs, next)
	}

	// Lasting, then transient: stays lasting, with its code.
	apply(tr, xid("48", 0))
	apply(tr, xid("94", time.Minute))
	clk.Step(2 * time.Minute)
	if trs, _ := expire(tr); len(trs) != 0 {
		t.Fatalf("a transient fault shortened a lasting one: %v", trs)
	}
	if h := stateOf(tr, "gpu-3"); h.State != Unhealthy || h.Conditions[0].Code != "48" {
		t.Fatalf("lasting then transient: %+v", h)
	}
	// Transient, then lasting (the GPU asked for an action after all): lasts, same since.
	apply(tr, Event{Type: Recovered, Device: "gpu-3"})
	apply(tr, xid("94", time.Minute))
	since := stateOf(tr, "gpu-3").Conditions[0].Since
	clk.Step(time.Second)
	apply(tr, xid("94", 0))
	clk.Step(2 * time.Minute)
	if trs, _ := expire(tr); len(trs) != 0 {
		t.Fatalf("a lasting fault expired: %v", trs)
	}
	if c := stateOf(tr, "gpu-3").Conditions[0]; !c.Since.Equal(since) || !c.Until.IsZero() {
		t.Errorf("transient made lasting: %+v, want since %v and no until", c, since)
	}
}

// TestTrackerRunExpiry: the loop clears a transient fault when its hold ends, including one
// that arrives while it waits, and reports the transition.
func TestTrackerRunExpiry(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	tr := newTracker(t, "", "", clk, map[string]string{"gpu-3": "GPU-d"})
	if _, _, err := tr.Apply(Event{Type: Watching, Device: "gpu-3"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reported := make(chan *Transition, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.RunExpiry(ctx, func(tr *Transition, err error) {
			if err != nil {
				t.Error(err)
			}
			reported <- tr
		})
	}()
	defer func() { cancel(); <-done }()
	if _, _, err := tr.Apply(Event{Type: Fault, Device: "gpu-3", Cause: CauseXID, Code: "94", Message: "XID 94", Hold: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// The loop waits on a timer for the hold; stepping past it fires the timer.
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case got := <-reported:
			if got == nil || got.Device != "gpu-3" || got.To != Healthy {
				t.Fatalf("reported %+v", got)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transition reported; gpu-3 is %+v", stateOf(tr, "gpu-3"))
		}
		if clk.HasWaiters() {
			clk.Step(30 * time.Second)
		}
	}
}
