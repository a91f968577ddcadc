package driver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/metrics"
)

// second starts another instance over e's directories, as the new pod of a rolling update does
// while the old one still serves.
func (e *env) second(inv *device.Inventory) (*Driver, *ReconcileReport) {
	e.t.Helper()
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		e.t.Fatal(err)
	}
	opts := Options{
		DriverName: e.driver, NodeName: nodeName, Inventory: inv,
		CDI: cdi.New(e.cdiDir(), inv.Kind), State: store, Metrics: metrics.NewPlugin(e.driver), Kube: e.kube, Events: e.events,
	}
	// The new pod runs the same plugin, with the same settings.
	if e.tweak != nil {
		e.tweak(&opts)
	}
	d, err := New(e.ctx, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Close)
	rep, err := d.Reconcile(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return d, rep
}

// exist creates claims in the fake API server, so that start-up reconciliation keeps them.
func (e *env) exist(claims ...*resourceapi.ResourceClaim) {
	e.t.Helper()
	for _, c := range claims {
		if _, err := e.kube.ResourceV1().ResourceClaims(c.Namespace).Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func prepareOn(ctx context.Context, d *Driver, c *resourceapi.ResourceClaim) error {
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err != nil {
		return err
	}
	return res[c.UID].Err
}

func unprepareOn(ctx context.Context, d *Driver, uid types.UID) error {
	res, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: uid, NamespacedName: types.NamespacedName{Namespace: "ns", Name: "claim-" + string(uid)}}})
	if err != nil {
		return err
	}
	return res[uid]
}

// TestTwoInstancesOneTruth: what one instance prepared, the other sees, refuses to give away and
// can unprepare, although it never prepared it.
func TestTwoInstancesOneTruth(t *testing.T) {
	e := newEnv(t, inventory(2))
	a := e.drv
	b, rep := e.second(e.inv)
	if len(rep.RolledBack)+len(rep.Dropped)+len(rep.Orphans) != 0 {
		t.Fatalf("second instance's start-up changed something: %+v", rep)
	}
	if err := prepareOn(e.ctx, a, claim("u1", []result{{Device: "gpu-0"}})); err != nil {
		t.Fatal(err)
	}
	if err := prepareOn(e.ctx, b, claim("u2", []result{{Device: "gpu-0"}})); err == nil || !strings.Contains(err.Error(), "already prepared for claim ns/claim-u1") {
		t.Fatalf("second instance gave away a device the first holds: %v", err)
	}
	// The kubelet asks b again for u1: same answer, nothing rewritten.
	if err := prepareOn(e.ctx, b, claim("u1", []result{{Device: "gpu-0"}})); err != nil {
		t.Fatalf("idempotent prepare on the other instance: %v", err)
	}
	if err := unprepareOn(e.ctx, b, "u1"); err != nil {
		t.Fatal(err)
	}
	if exists(e.specPath("u1")) || exists(e.recordPath("u1")) {
		t.Fatal("unprepare by the other instance left the spec or record")
	}
	if err := prepareOn(e.ctx, b, claim("u2", []result{{Device: "gpu-0"}})); err != nil {
		t.Fatalf("device not free after the other instance's unprepare: %v", err)
	}
	// a must not trust its memory of gpu-0 being u1's, nor of it being free.
	if err := prepareOn(e.ctx, a, claim("u3", []result{{Device: "gpu-0"}})); err == nil {
		t.Fatal("first instance gave away a device the second holds")
	}
	if got := fmt.Sprint(a.PreparedClaims()); got != "[u2]" {
		t.Errorf("first instance's view: %s, want [u2]", got)
	}
}

// TestRollingUpdateStress prepares and unprepares claims through two instances at once, as the
// kubelet may during a rolling update, and checks that no device is ever held by two claims.
func TestRollingUpdateStress(t *testing.T) {
	e := newEnv(t, inventory(4))
	b, _ := e.second(e.inv)
	drivers := []*Driver{e.drv, b}

	var mu sync.Mutex
	holder := map[string]string{} // device -> claim, as the test saw successful prepares
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < 60; i++ {
				uid := fmt.Sprintf("w%d-%d", w, i)
				dev := fmt.Sprintf("gpu-%d", rng.IntN(4))
				if err := prepareOn(e.ctx, drivers[rng.IntN(2)], claim(uid, []result{{Device: dev}})); err != nil {
					if !strings.Contains(err.Error(), "already prepared") {
						t.Errorf("prepare %s on %s: %v", uid, dev, err)
					}
					continue
				}
				mu.Lock()
				if other, ok := holder[dev]; ok {
					t.Errorf("%s prepared for %s while %s held it", dev, uid, other)
				}
				holder[dev] = uid
				mu.Unlock()
				// Released in the test's book before the call: from then on another claim may
				// legitimately get it.
				mu.Lock()
				delete(holder, dev)
				mu.Unlock()
				if err := unprepareOn(e.ctx, drivers[rng.IntN(2)], types.UID(uid)); err != nil {
					t.Errorf("unprepare %s: %v", uid, err)
				}
			}
		}()
	}
	wg.Wait()
	if left := dirEntries(t, filepath.Join(e.dir, "checkpoint"), ".json"); len(left) != 0 {
		t.Errorf("records left: %v", left)
	}
	if left := dirEntries(t, e.cdiDir(), ".json"); len(left) != 0 {
		t.Errorf("CDI specs left: %v", left)
	}
}

func dirEntries(t *testing.T, dir, suffix string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestReconcileLeavesLiveInstancesWork: a new instance's start-up does not roll back a claim the
// old, live instance is preparing, and does once that instance is dead.
func TestReconcileLeavesLiveInstancesWork(t *testing.T) {
	e := newEnv(t, inventory(2))
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		t.Fatal(err)
	}
	half := checkpoint.Claim{UID: "u-half", Namespace: "ns", Name: "claim-u-half", State: checkpoint.StatePrepareStarted, Owner: e.drv.node.instance,
		Devices: []checkpoint.PreparedDevice{{Request: "gpu", Pool: nodeName, Device: "gpu-1", UUID: e.inv.Devices[1].UUID, Nodes: e.inv.Devices[1].Nodes}}}
	if err := store.Put(half); err != nil {
		t.Fatal(err)
	}
	b, rep := e.second(e.inv)
	if fmt.Sprint(rep.InFlight) != "[u-half]" || len(rep.RolledBack) != 0 || !exists(e.recordPath("u-half")) {
		t.Fatalf("start-up touched the live instance's claim: %+v", rep)
	}
	if err := prepareOn(e.ctx, b, claim("u2", []result{{Device: "gpu-1"}})); err == nil {
		t.Fatal("device of a claim being prepared by a live instance given away")
	}
	if err := prepareOn(e.ctx, b, claim("u-half", []result{{Device: "gpu-1"}})); err == nil || !strings.Contains(err.Error(), "another instance") {
		t.Fatalf("prepare of a claim the live instance is preparing: %v", err)
	}

	e.drv.Close() // the old instance dies
	u2 := claim("u2", []result{{Device: "gpu-1"}})
	e.exist(u2)
	if err := prepareOn(e.ctx, b, u2); err != nil {
		t.Fatalf("device of a dead instance's half-prepared claim not freed: %v", err)
	}
	if exists(e.recordPath("u-half")) {
		t.Fatal("abandoned record kept")
	}
	_, rep = e.second(e.inv)
	if len(rep.InFlight)+len(rep.RolledBack) != 0 || fmt.Sprint(rep.Restored) != "[u2]" {
		t.Fatalf("report %+v", rep)
	}
}

func TestAdminAccess(t *testing.T) {
	for _, adminFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("adminFirst=%v", adminFirst), func(t *testing.T) {
			e := newEnv(t, inventory(2))
			admin := claim("admin", []result{{Device: "gpu-0", Admin: true}})
			work := claim("work", []result{{Device: "gpu-0"}})
			order := []*resourceapi.ResourceClaim{work, admin}
			if adminFirst {
				order = []*resourceapi.ResourceClaim{admin, work}
			}
			for _, c := range order {
				if r := e.prepare(c); r.Err != nil {
					t.Fatalf("prepare %s: %v", c.Name, r.Err)
				}
			}
			if r := e.prepare(claim("work2", []result{{Device: "gpu-0"}})); r.Err == nil {
				t.Fatal("a second workload got a device a workload holds")
			}
			if r := e.prepare(claim("admin2", []result{{Device: "gpu-0", Admin: true}})); r.Err != nil {
				t.Fatalf("second admin claim: %v", r.Err)
			}
			// Unpreparing the admin claim frees nothing and takes nothing away.
			if err := e.unprepare("admin"); err != nil {
				t.Fatal(err)
			}
			if r := e.prepare(claim("work2", []result{{Device: "gpu-0"}})); r.Err == nil {
				t.Fatal("workload's device given away after an admin claim went")
			}
			if err := e.unprepare("work"); err != nil {
				t.Fatal(err)
			}
			if r := e.prepare(claim("work2", []result{{Device: "gpu-0"}})); r.Err != nil {
				t.Fatalf("device not free after its workload went: %v", r.Err)
			}
			// Admin access survives a restart as what it is.
			e.start()
			if r := e.prepare(claim("admin3", []result{{Device: "gpu-0", Admin: true}})); r.Err != nil {
				t.Fatalf("admin claim after restart: %v", r.Err)
			}
		})
	}
}

// TestIdentityChange: a prepared claim whose device name now maps to another GPU is refused,
// loudly, at start-up and on the kubelet's next prepare; it is never pointed at the other GPU.
func TestIdentityChange(t *testing.T) {
	tests := map[string]func(inv *device.Inventory){
		"uuid": func(inv *device.Inventory) {
			inv.Devices[1].UUID, inv.Devices[2].UUID = inv.Devices[2].UUID, inv.Devices[1].UUID
		},
		"nodes": func(inv *device.Inventory) {
			inv.Devices[1].Nodes[0].Minor = 7
			inv.Devices[1].Nodes[0].Path = "/dev/nvidia7"
		},
		// nvidia-drm loaded meanwhile: DRM nodes that appear do not make another GPU the same
		// (TestDRMLoadedAfterPrepare: on the same GPU they are no change of identity).
		"uuid, DRM nodes added": func(inv *device.Inventory) {
			inv.Devices[1].UUID, inv.Devices[2].UUID = inv.Devices[2].UUID, inv.Devices[1].UUID
			inv.Devices[1].Nodes = append(inv.Devices[1].Nodes, drmNodes(1)...)
		},
		"nodes, DRM nodes added": func(inv *device.Inventory) {
			inv.Devices[1].Nodes = append([]device.Node{{Path: "/dev/nvidia7", Type: "c", Major: 195, Minor: 7}}, drmNodes(1)...)
		},
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, inventory(4))
			c := claim("u1", []result{{Device: "gpu-1"}})
			keep := claim("keep", []result{{Device: "gpu-0"}})
			e.exist(c, keep)
			if r := e.prepare(c); r.Err != nil {
				t.Fatal(r.Err)
			}
			if r := e.prepare(keep); r.Err != nil {
				t.Fatal(r.Err)
			}
			oldUUID := e.inv.Devices[1].UUID
			e.inv = inventory(4)
			change(e.inv)
			rep := e.start()
			if fmt.Sprint(rep.Refused) != "[u1]" || fmt.Sprint(rep.Restored) != "[keep]" {
				t.Fatalf("report %+v", rep)
			}
			if exists(e.specPath("u1")) {
				t.Error("spec naming the old device kept")
			}
			if !exists(e.recordPath("u1")) {
				t.Error("record dropped: unprepare could no longer clean up")
			}
			if len(e.events.msgs) != 1 || !strings.Contains(e.events.msgs[0], "DeviceIdentityChanged") {
				t.Errorf("events %v", e.events.msgs)
			}
			if got := testutil.ToFloat64(e.metrics.CheckpointErrors.WithLabelValues("identity")); got != 1 {
				t.Errorf("checkpoint_errors_total{kind=identity} = %v", got)
			}
			r := e.prepare(c)
			if r.Err == nil {
				t.Fatal("prepare of a claim whose device changed identity succeeded")
			}
			for _, want := range []string{"ns/claim-u1", "gpu-1", oldUUID, e.inv.Devices[1].UUID} {
				if !strings.Contains(r.Err.Error(), want) {
					t.Errorf("error %q does not name %q", r.Err, want)
				}
			}
			if exists(e.specPath("u1")) {
				t.Error("refused prepare wrote a spec")
			}
			if err := e.unprepare("u1"); err != nil || exists(e.recordPath("u1")) {
				t.Fatalf("unprepare of the refused claim: %v", err)
			}
		})
	}
}

// TestFormerUUID: a backend that corrected a device's UUID (the Ascend backend, once it maps
// /dev/davinciN to its chip) names the UUID it published before; a claim prepared with that
// UUID on the same nodes is the same device, restored with its record updated, while the former
// UUID on other nodes is still refused.
func TestFormerUUID(t *testing.T) {
	tests := map[string]struct {
		change      func(inv *device.Inventory, old string)
		wantRefused bool
	}{
		"same nodes": {change: func(inv *device.Inventory, old string) {
			inv.Devices[1].UUID, inv.Devices[1].FormerUUIDs = "GPU-corrected", []string{"GPU-other", old}
		}},
		"other nodes": {wantRefused: true, change: func(inv *device.Inventory, old string) {
			inv.Devices[1].UUID, inv.Devices[1].FormerUUIDs = "GPU-corrected", []string{old}
			inv.Devices[1].Nodes[0].Minor, inv.Devices[1].Nodes[0].Path = 7, "/dev/nvidia7"
		}},
		"not former": {wantRefused: true, change: func(inv *device.Inventory, old string) {
			inv.Devices[1].UUID, inv.Devices[1].FormerUUIDs = "GPU-corrected", []string{"GPU-other"}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, inventory(4))
			c := claim("u1", []result{{Device: "gpu-1"}})
			e.exist(c)
			if r := e.prepare(c); r.Err != nil {
				t.Fatal(r.Err)
			}
			old := e.inv.Devices[1].UUID
			e.inv = inventory(4)
			tc.change(e.inv, old)
			rep := e.start()
			record, err := os.ReadFile(e.recordPath("u1"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantRefused {
				if fmt.Sprint(rep.Refused) != "[u1]" || !strings.Contains(string(record), old) {
					t.Errorf("report %+v, record %s: want u1 refused and its record as it was", rep, record)
				}
				return
			}
			if fmt.Sprint(rep.Restored) != "[u1]" || len(rep.Refused) != 0 {
				t.Fatalf("report %+v, want u1 restored", rep)
			}
			if !strings.Contains(string(record), `"GPU-corrected"`) || strings.Contains(string(record), old) {
				t.Errorf("record %s: want the corrected UUID in place of %s", record, old)
			}
			if !exists(e.specPath("u1")) || len(e.events.msgs) != 0 {
				t.Errorf("spec kept %v, events %v: want the spec and no event", exists(e.specPath("u1")), e.events.msgs)
			}
			if r := e.prepare(c); r.Err != nil {
				t.Errorf("the kubelet's next prepare: %v", r.Err)
			}
		})
	}
}

// drmNodes are the card and render node of GPU n where nothing else holds a DRM minor.
func drmNodes(n int64) []device.Node {
	return []device.Node{
		{Path: fmt.Sprintf("/dev/dri/card%d", n), Type: "c", Major: device.DRMMajor, Minor: n},
		{Path: fmt.Sprintf("/dev/dri/renderD%d", 128+n), Type: "c", Major: device.DRMMajor, Minor: 128 + n},
	}
}

// TestV1RecordMigrates: a record from before identities were stored is restored with the
// inventory's identity and rewritten, so a later change is caught.
func TestV1RecordMigrates(t *testing.T) {
	e := newEnv(t, inventory(2))
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		t.Fatal(err)
	}
	old := checkpoint.Claim{UID: "u1", Namespace: "ns", Name: "claim-u1", State: checkpoint.StatePrepareCompleted,
		Devices: []checkpoint.PreparedDevice{{Request: "gpu", Pool: nodeName, Device: "gpu-1", CDIDeviceIDs: []string{"accel-dra.io/gpu=u1-gpu-1"}}}}
	if err := store.Put(old); err != nil {
		t.Fatal(err)
	}
	e.exist(claim("u1", nil))
	rep := e.start()
	if fmt.Sprint(rep.Restored) != "[u1]" || fmt.Sprint(rep.SpecsCreated) != "[u1]" {
		t.Fatalf("report %+v", rep)
	}
	rec, err := os.ReadFile(e.recordPath("u1"))
	if err != nil || !strings.Contains(string(rec), e.inv.Devices[1].UUID) || !strings.Contains(string(rec), checkpoint.APIVersion) {
		t.Fatalf("record not migrated: %s %v", rec, err)
	}
	if r := e.prepare(claim("u2", []result{{Device: "gpu-1"}})); r.Err == nil {
		t.Fatal("migrated claim's device given away")
	}
}

// TestNewDriverReadsCheckpointBeforeDeciding: a driver that has not reconciled yet still
// decides against the records on disk, not against its empty index.
func TestNewDriverReadsCheckpointBeforeDeciding(t *testing.T) {
	e := newEnv(t, inventory(2))
	if r := e.prepare(claim("first", []result{{Device: "gpu-0"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	b, err := New(e.ctx, Options{
		DriverName: e.driver, NodeName: nodeName, Inventory: e.inv,
		CDI: cdi.New(e.cdiDir(), e.inv.Kind), State: store, Metrics: metrics.NewPlugin(e.driver),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := prepareOn(e.ctx, b, claim("second", []result{{Device: "gpu-0"}})); err == nil || !strings.Contains(err.Error(), "already prepared") {
		t.Fatalf("a device held on disk given to another claim before reconciliation: %v", err)
	}
}
