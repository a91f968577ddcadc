package driver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

// nextVersion is the apiVersion a later plugin writes for a record with fields this one does not
// know (pkg/checkpoint's package comment).
const nextVersion = "checkpoint.accel-dra.io/v3"

// rewriteAsNewer turns the record of uid into what a newer plugin would have written for the same
// claim: the same fields, more of them (edit adds them), a newer apiVersion and kind, and the
// checksum over the claim as written. It goes through the node lock and bumps the generation, as
// the newer plugin's write would, so that a running instance learns of it.
func (e *env) rewriteAsNewer(uid types.UID, apiVersion, kind string, edit func(claim map[string]any)) []byte {
	e.t.Helper()
	path := e.recordPath(uid)
	old, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	var rec struct {
		BootID string         `json:"bootID"`
		Claim  map[string]any `json:"claim"`
	}
	if err := json.Unmarshal(old, &rec); err != nil {
		e.t.Fatal(err)
	}
	var c checkpoint.Claim
	if err := json.Unmarshal(mustJSON(e.t, rec.Claim), &c); err != nil {
		e.t.Fatal(err)
	}
	edit(rec.Claim)
	claimJSON := mustJSON(e.t, rec.Claim)
	sum := sha256.Sum256(mustJSON(e.t, struct {
		BootID string          `json:"bootID"`
		Claim  json.RawMessage `json:"claim"`
	}{rec.BootID, claimJSON}))
	data := fmt.Appendf(nil, `{"apiVersion":%q,"kind":%q,"bootID":%q,"checksum":"sha256:%s","claim":%s}`+"\n",
		apiVersion, kind, rec.BootID, hex.EncodeToString(sum[:]), claimJSON)

	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	l, err := store.Lock()
	if err != nil {
		e.t.Fatal(err)
	}
	defer l.Unlock()
	if err := l.Put(c); err != nil { // the bump that announces the write
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return data
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newerFields are fields a later plugin might add, at the claim and at a device.
func newerFields(c map[string]any) {
	c["reservation"] = map[string]any{"until": "2026-12-01T00:00:00Z"}
	for _, d := range c["devices"].([]any) {
		d.(map[string]any)["clockLockMHz"] = 1410
	}
}

// assertKept fails unless uid's record is still data, byte for byte, and nothing was moved aside.
func (e *env) assertKept(uid types.UID, data []byte) {
	e.t.Helper()
	got, err := os.ReadFile(e.recordPath(uid))
	if err != nil || !bytes.Equal(got, data) {
		e.t.Fatalf("record of %s changed or gone (err %v):\n%s", uid, err, got)
	}
	if moved, err := os.ReadDir(filepath.Join(e.dir, "checkpoint", checkpoint.CorruptDir)); !os.IsNotExist(err) {
		e.t.Fatalf("records moved aside: %v (err %v)", moved, err)
	}
}

// TestNewerRecordIsHeld is an old pod of a rolling update next to the new one, which has
// prepared a claim and written its record in a format the old pod does not fully know. The old
// pod, running and after a restart, keeps the record untouched, refuses the claim's device to
// every other claim, and leaves the claim itself to the newer plugin: it neither answers a
// prepare of it from a record it cannot fully read nor unprepares it.
func TestNewerRecordIsHeld(t *testing.T) {
	e := newEnv(t, inventory(2))
	f1 := claim("f1", []result{{Device: "gpu-0"}})
	e.exist(f1)
	if r := e.prepare(f1); r.Err != nil {
		t.Fatal(r.Err)
	}
	data := e.rewriteAsNewer("f1", nextVersion, checkpoint.RecordKind, newerFields)

	check := func(d *Driver, when string) {
		t.Helper()
		if err := prepareOn(e.ctx, d, claim("u2", []result{{Device: "gpu-0"}})); err == nil || !strings.Contains(err.Error(), "already prepared for claim ns/claim-f1") {
			t.Fatalf("%s: the device of a newer plugin's claim was given to another claim: %v", when, err)
		}
		if err := prepareOn(e.ctx, d, f1); err == nil || !strings.Contains(err.Error(), nextVersion) {
			t.Errorf("%s: prepare of the newer plugin's claim: %v, want a refusal naming %s", when, err, nextVersion)
		}
		if err := unprepareOn(e.ctx, d, "f1"); err == nil || !strings.Contains(err.Error(), nextVersion) {
			t.Errorf("%s: unprepare of the newer plugin's claim: %v, want a refusal naming %s", when, err, nextVersion)
		}
		e.assertKept("f1", data)
		if err := prepareOn(e.ctx, d, claim("u3-"+when, []result{{Device: "gpu-1"}})); err != nil {
			t.Errorf("%s: a device the record does not name: %v", when, err)
		}
		if err := unprepareOn(e.ctx, d, types.UID("u3-"+when)); err != nil {
			t.Fatal(err)
		}
	}
	check(e.drv, "running")

	rep := e.start()
	if len(rep.Corrupt)+len(rep.Dropped)+len(rep.RolledBack)+len(rep.Stale)+len(rep.Orphans) != 0 || fmt.Sprint(rep.Held) != "[f1]" {
		t.Errorf("restart report %+v: the newer record must be held, neither corrupt nor removed", rep)
	}
	if !strings.Contains(strings.Join(e.events.msgs, "\n"), "ForeignCheckpoint: "+driverName+": claim ns/claim-f1 (f1) was prepared by another version of the plugin (checkpoint apiVersion "+nextVersion+")") {
		t.Errorf("events %q, want one about the held record", e.events.msgs)
	}
	check(e.drv, "restarted")
	b, _ := e.second(e.inv)
	check(b, "second")
}

// TestNewerRecordOfGoneClaimIsKept: a newer plugin's record of a claim the API server no longer
// has is not this plugin's to drop: dropping runs this plugin's unprepare on a record it cannot
// fully read.
func TestNewerRecordOfGoneClaimIsKept(t *testing.T) {
	e := newEnv(t, inventory(2))
	if r := e.prepare(claim("gone", []result{{Device: "gpu-1"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	data := e.rewriteAsNewer("gone", nextVersion, checkpoint.RecordKind, newerFields)
	rep := e.start()
	if len(rep.Dropped) != 0 || len(rep.Corrupt) != 0 {
		t.Errorf("restart report %+v", rep)
	}
	e.assertKept("gone", data)
	spec, err := os.ReadFile(e.specPath("gone"))
	if err != nil {
		t.Fatalf("the CDI spec of a newer plugin's claim was removed as an orphan: %v", err)
	}
	// Nor does a driver change rewrite its spec: the newer plugin rewrites its own.
	if n, err := e.drv.SetCommonEdits(e.ctx, &specs.ContainerEdits{Env: []string{"DRIVER=new"}}); n != 0 || err != nil {
		t.Errorf("SetCommonEdits rewrote %d specs (%v), want none", n, err)
	}
	if after, err := os.ReadFile(e.specPath("gone")); err != nil || !bytes.Equal(after, spec) {
		t.Errorf("the CDI spec of a newer plugin's claim changed (err %v)", err)
	}
}

// TestNewerHalfPreparedRecordIsNotRolledBack: a newer plugin's half-prepared record whose owner
// is not alive here is not rolled back to free its device, neither when another claim needs
// the device nor at start-up: rolling back is unpreparing what this plugin cannot fully read.
func TestNewerHalfPreparedRecordIsNotRolledBack(t *testing.T) {
	e := newEnv(t, inventory(2))
	if r := e.prepare(claim("h1", []result{{Device: "gpu-1"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	data := e.rewriteAsNewer("h1", nextVersion, checkpoint.RecordKind, func(c map[string]any) {
		newerFields(c)
		c["state"], c["owner"] = string(checkpoint.StatePrepareStarted), "4242-deadbeefdeadbeef"
	})
	if err := prepareOn(e.ctx, e.drv, claim("u2", []result{{Device: "gpu-1"}})); err == nil {
		t.Error("a newer plugin's half-prepared claim was rolled back to free its device")
	}
	e.assertKept("h1", data)
	if rep := e.start(); len(rep.RolledBack) != 0 || fmt.Sprint(rep.Held) != "[h1]" {
		t.Errorf("restart report %+v", rep)
	}
	e.assertKept("h1", data)
}

// TestUnreadableRecordHoldsEveryDevice: an intact record that this plugin cannot read at all (here
// a kind it does not know) may hold any device of the node. It is kept, and until it is gone no
// claim is prepared here; the refusal names it.
func TestUnreadableRecordHoldsEveryDevice(t *testing.T) {
	e := newEnv(t, inventory(2))
	if r := e.prepare(claim("o1", []result{{Device: "gpu-0"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	data := e.rewriteAsNewer("o1", nextVersion, "PreparedClaimGroup", newerFields)
	for _, d := range []string{"gpu-0", "gpu-1"} {
		if err := prepareOn(e.ctx, e.drv, claim("u-"+d, []result{{Device: d}})); err == nil || !strings.Contains(err.Error(), "o1") {
			t.Errorf("prepare on %s next to an unreadable record: %v, want a refusal naming it", d, err)
		}
	}
	e.assertKept("o1", data)
	if rep := e.start(); len(rep.Corrupt) != 0 {
		t.Errorf("restart moved it aside: %+v", rep)
	}
	e.assertKept("o1", data)
	if err := prepareOn(e.ctx, e.drv, claim("u-after", []result{{Device: "gpu-1"}})); err == nil {
		t.Error("a device was prepared next to an unreadable record after a restart")
	}
}

// TestNewerRecordKeepsItsMIGInstance: the MIG instance a newer plugin's claim holds survives this
// plugin's start-up sweep of instances no record holds, and this plugin's unprepare attempt, and
// what overlaps it is refused.
func TestNewerRecordKeepsItsMIGInstance(t *testing.T) {
	e := newMIGEnv(t)
	if r := e.prepare(claim("m1", []result{{Device: "gpu-1-mig-1g5gb-0"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	before := e.instances()
	data := e.rewriteAsNewer("m1", nextVersion, checkpoint.RecordKind, newerFields)
	rep := e.restart()
	if len(rep.MIGDestroyed) != 0 || len(rep.Corrupt) != 0 || len(rep.RolledBack) != 0 {
		t.Errorf("restart report %+v", rep)
	}
	if got := e.instances(); !slices.Equal(got, before) {
		t.Fatalf("instances %v after restart, want %v", got, before)
	}
	if err := e.unprepare("m1"); err == nil {
		t.Error("this plugin unprepared a newer plugin's MIG claim")
	}
	for _, dev := range []string{"gpu-1", "gpu-1-mig-1g5gb-0", "gpu-1-mig-7g40gb-0"} {
		if r := e.prepare(claim("x", []result{{Device: dev}})); r.Err == nil {
			t.Errorf("%s prepared over a newer plugin's MIG instance", dev)
		}
	}
	if got := e.instances(); !slices.Equal(got, before) {
		t.Fatalf("instances %v, want %v", got, before)
	}
	e.assertKept("m1", data)
}

// TestNewerRecordKeepsItsMPSDaemon: the MPS daemon a newer plugin's claim counts on is not taken
// for one that no record counts on at start-up, nor stopped by this plugin's unprepare attempt.
func TestNewerRecordKeepsItsMPSDaemon(t *testing.T) {
	e, m, _ := mpsEnv(t)
	c := mpsShare("s1", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	e.exist(c)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	u0 := e.inv.Devices[0].UUID
	data := e.rewriteAsNewer("s1", nextVersion, checkpoint.RecordKind, newerFields)
	if rep := e.start(); len(rep.MPSStopped) != 0 || len(rep.Corrupt) != 0 {
		t.Errorf("restart report %+v", rep)
	}
	if err := e.unprepare("s1"); err == nil {
		t.Error("this plugin unprepared a newer plugin's MPS claim")
	}
	if !mpsRunning(t, m, u0) {
		t.Error("the MPS daemon of a newer plugin's claim was stopped")
	}
	e.assertKept("s1", data)
}

// TestUnreadableRecordKeepsEveryMIGInstance: while a record this plugin cannot read exists, the
// start-up sweep destroys no MIG instance, not even one that no readable record holds; once the
// record is gone, the sweep does.
func TestUnreadableRecordKeepsEveryMIGInstance(t *testing.T) {
	e := newMIGEnv(t)
	for uid, dev := range map[string]string{"o1": "gpu-1-mig-1g5gb-0", "m2": "gpu-1-mig-3g20gb-4"} {
		if r := e.prepare(claim(uid, []result{{Device: dev}})); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	e.rewriteAsNewer("o1", nextVersion, "PreparedClaimGroup", newerFields)
	// m2's instance loses its record, as a crash between creating and recording it leaves it.
	if err := os.Remove(e.recordPath("m2")); err != nil {
		t.Fatal(err)
	}
	if rep := e.restart(); len(rep.MIGDestroyed) != 0 || fmt.Sprint(rep.Held) != "[o1]" {
		t.Errorf("restart next to an unreadable record: %+v", rep)
	}
	if got := e.instances(); len(got) != 2 {
		t.Fatalf("instances %v, want both", got)
	}
	// The operator removes the unreadable record (a downgrade that is not undone).
	if err := os.Remove(e.recordPath("o1")); err != nil {
		t.Fatal(err)
	}
	if rep := e.restart(); len(rep.MIGDestroyed) != 2 {
		t.Errorf("restart without it: %+v, want both instances destroyed", rep)
	}
}

// TestUnreadableRecordStopsNoDaemon: while a record this plugin cannot read exists, no MPS daemon
// is stopped, at start-up or by the unprepare of the last claim this plugin knows uses it, whose
// record goes as usual.
func TestUnreadableRecordStopsNoDaemon(t *testing.T) {
	e, m, _ := mpsEnv(t)
	s1 := mpsShare("s1", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	o1 := claim("o1", []result{{Device: "gpu-1"}})
	e.exist(s1, o1)
	for _, c := range []*resourceapi.ResourceClaim{s1, o1} {
		if r := e.prepare(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	e.rewriteAsNewer("o1", nextVersion, "PreparedClaimGroup", newerFields)
	u0, u1 := e.inv.Devices[0].UUID, e.inv.Devices[1].UUID
	if _, err := m.Ensure(e.ctx, "gone-claim", []string{u1}, sharing.MPSLimits{}); err != nil {
		t.Fatal(err)
	}
	if rep := e.start(); len(rep.MPSStopped) != 0 {
		t.Errorf("daemons stopped next to an unreadable record: %v", rep.MPSStopped)
	}
	if err := e.unprepare("s1"); err != nil {
		t.Fatal(err)
	}
	if exists(e.recordPath("s1")) {
		t.Error("s1's record is left")
	}
	for _, key := range []string{u0, "gone-claim"} {
		if !mpsRunning(t, m, key) {
			t.Errorf("daemon %s was stopped next to an unreadable record", key)
		}
	}
}
