package driver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/metrics"
)

// These tests are issue #27 item 9: with two instances of the plugin (a rolling update with
// surge), the kubelet cancels a prepare asynchronously (an HTTP/2 stream reset reaches the
// plugin when it does) and sends the unprepare to the other instance as soon as its own call
// returns. Whatever the order in which the two calls meet, nothing of the claim may be left
// once both have returned and the kubelet forgot the claim.

// twoInstances is a plugin (a, the old pod, which gets the prepare) and a second instance over
// the same directories (b, the new pod, which gets the unprepare); dynamic MIG on mig.
func twoInstances(t *testing.T, mig bool) (e *env, a, b *Driver, device string, instancesLeft func() int) {
	if !mig {
		e = newEnv(t, inventory(2))
		b, _ = e.second(e.inv)
		return e, e.drv, b, "gpu-0", func() int { return 0 }
	}
	m := newMIGEnv(t)
	store, err := checkpoint.Open(filepath.Join(m.dir, "checkpoint"), m.boot)
	if err != nil {
		t.Fatal(err)
	}
	b, err = New(m.ctx, Options{DriverName: driverName, NodeName: nodeName, Inventory: m.inv,
		CDI: cdi.New(m.cdiDir(), m.inv.Kind), State: store, Metrics: metrics.NewPlugin(driverName), MIG: m.server.Backend()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return m.env, m.drv, b, "gpu-1-mig-1g5gb-0", func() int { return len(m.instances()) }
}

// TestUnprepareMeetsPrepare runs the unprepare on b at each point where it can meet a
// prepare of the same claim on a; a's context is cancelled only once its prepare has returned
// (the stream reset reaches it late), so the context check under the lock does not see it.
func TestUnprepareMeetsPrepare(t *testing.T) {
	for _, mig := range []bool{false, true} {
		for _, tc := range []struct {
			name string
			// prepared: the claim was prepared (on a) before; the kubelet asks again.
			prepared bool
			// meet: "prepare:unlocked": b unprepares while a's prepare is before the lock;
			// "unprepare:unlocked": a prepares while b's unprepare is before the lock;
			// "after": a's prepare begins after b's unprepare returned.
			meet string
			// wantOK: the prepare succeeds (it is not one the kubelet gave up on).
			wantOK bool
		}{
			{name: "unprepare before the prepare's hold", meet: "prepare:unlocked"},
			{name: "unprepare of a prepared claim before the prepare's hold", prepared: true, meet: "prepare:unlocked"},
			{name: "prepare before the unprepare's hold", meet: "unprepare:unlocked", wantOK: true},
			{name: "prepare after the unprepare", meet: "after", wantOK: true},
			{name: "prepare of an unprepared claim after the unprepare", prepared: true, meet: "after", wantOK: true},
		} {
			t.Run(fmt.Sprintf("%s/mig=%v", tc.name, mig), func(t *testing.T) {
				e, a, b, dev, instancesLeft := twoInstances(t, mig)
				c := claim("u1", []result{{Device: dev}})
				if tc.prepared {
					if err := prepareOn(e.ctx, a, c); err != nil {
						t.Fatal(err)
					}
				}
				ctx, cancel := context.WithCancel(e.ctx)
				var err error
				switch tc.meet {
				case "prepare:unlocked":
					pauseAt(a, tc.meet, func() {
						if err := unprepareOn(e.ctx, b, "u1"); err != nil {
							t.Errorf("unprepare on the new instance: %v", err)
						}
					})
					err = prepareOn(ctx, a, c)
				case "unprepare:unlocked":
					pauseAt(b, tc.meet, func() {
						err = prepareOn(ctx, a, c)
					})
					if err := unprepareOn(e.ctx, b, "u1"); err != nil {
						t.Errorf("unprepare on the new instance: %v", err)
					}
				case "after":
					if err := unprepareOn(e.ctx, b, "u1"); err != nil {
						t.Errorf("unprepare on the new instance: %v", err)
					}
					err = prepareOn(ctx, a, c)
				}
				cancel()
				a.prep.hook, b.prep.hook = nil, nil
				t.Logf("prepare: %v", err)
				switch {
				case tc.wantOK && err != nil:
					t.Errorf("a prepare the kubelet did not give up on failed: %v", err)
				case !tc.wantOK && err == nil:
					t.Error("a prepare that began before the claim's unprepare succeeded after it")
				}
				if tc.meet == "after" && err == nil {
					// A new prepare: the claim is prepared until the kubelet unprepares it.
					if !exists(e.recordPath("u1")) || !exists(e.specPath("u1")) {
						t.Errorf("a prepared claim lacks its record (%v) or spec (%v)", exists(e.recordPath("u1")), exists(e.specPath("u1")))
					}
					if err := unprepareOn(e.ctx, b, "u1"); err != nil {
						t.Fatal(err)
					}
				}
				if exists(e.recordPath("u1")) || exists(e.specPath("u1")) {
					t.Errorf("record %v, spec %v left after the kubelet forgot the claim", exists(e.recordPath("u1")), exists(e.specPath("u1")))
				}
				if n := instancesLeft(); n != 0 {
					t.Errorf("%d MIG instances left", n)
				}
				// The device is free for the next claim, on either instance.
				for i, d := range []*Driver{a, b} {
					next := types.UID(fmt.Sprintf("next-%d", i))
					if err := prepareOn(e.ctx, d, claim(string(next), []result{{Device: dev}})); err != nil {
						t.Errorf("instance %d: %s not free afterwards: %v", i, dev, err)
						continue
					}
					if err := unprepareOn(e.ctx, d, next); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
}

// TestTombstonesBounded: tombstones outlive neither the garbage collection's TTL nor a
// restart's loss of them, and a prepare that began longer ago than the TTL is refused.
func TestTombstonesBounded(t *testing.T) {
	e := newEnv(t, inventory(2))
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	e.drv.node.now = clock
	if err := unprepareOn(e.ctx, e.drv, "gone"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.dir, "checkpoint", "unprepared", "gone")
	if !exists(path) {
		t.Fatalf("no tombstone at %s after the unprepare of a claim the node does not hold", path)
	}
	// A restart keeps it: it is on disk, next to the records.
	e.start()
	e.drv.node.now = clock
	if !exists(path) {
		t.Fatal("the tombstone did not survive a restart")
	}
	rep, err := e.drv.gc.collect(e.ctx, clock(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !exists(path) {
		t.Errorf("a tombstone younger than %s was collected (%+v)", tombstoneTTL, rep)
	}
	advance(tombstoneTTL + time.Second)
	if _, err := e.drv.gc.collect(e.ctx, clock(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if exists(path) {
		t.Errorf("a tombstone older than %s was not collected", tombstoneTTL)
	}
	// A prepare that waited longer than the TTL may have missed a tombstone: refused.
	pauseAt(e.drv, "prepare:unlocked", func() { advance(tombstoneTTL + time.Second) })
	err = prepareOn(e.ctx, e.drv, claim("slow", []result{{Device: "gpu-0"}}))
	e.drv.prep.hook = nil
	if err == nil {
		t.Error("a prepare that began longer ago than the tombstones' TTL succeeded")
	}
	t.Logf("prepare: %v", err)
	if exists(e.recordPath("slow")) || exists(e.specPath("slow")) {
		t.Error("the refused prepare left its record or spec")
	}
}

// TestSurgeCancelledPrepares is the kubelet during a rolling update with surge, at random:
// several hundred claims, each prepared on one instance (either: the kubelet calls whichever
// registered last, and a restart or rollback changes that) and unprepared on the other; half
// of the prepares are cancelled mid-call as the kubelet does it: its call returns at once, it
// sends the unprepare to the other instance right away, and the stream reset reaches the
// preparing instance's context later, asynchronously. Once both calls have returned, a
// cancelled claim must have nothing left, and the others nothing once unprepared.
func TestSurgeCancelledPrepares(t *testing.T) {
	e := newEnv(t, inventory(8))
	b, _ := e.second(e.inv)
	drivers := []*Driver{e.drv, b}
	// arrived tells the kubelet stand-in that the driver has begun a prepare (its start is
	// taken): a cancel before it reaches the plugin with the request.
	type arrivedKey struct{}
	for _, d := range drivers {
		d.prep.hook = func(ctx context.Context, point string) {
			if ch, ok := ctx.Value(arrivedKey{}).(chan struct{}); ok && point == "prepare:start" {
				close(ch)
			}
		}
	}
	n := 400
	if testing.Short() {
		n = 100
	}
	const workers = 8 // one GPU each, so that claims of different workers never conflict
	var wg sync.WaitGroup
	var mu sync.Mutex
	var leaks []string
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 27))
			for i := w; i < n; i += workers {
				uid := types.UID(fmt.Sprintf("c%d", i))
				c := claim(string(uid), []result{{Device: fmt.Sprintf("gpu-%d", w)}})
				p := rng.IntN(2)
				cancelled := rng.IntN(2) == 0
				arrived := make(chan struct{})
				ctx, deliver := context.WithCancel(context.WithValue(e.ctx, arrivedKey{}, arrived))
				done := make(chan error, 1)
				go func() { done <- prepareOn(ctx, drivers[p], c) }()
				var err error
				if cancelled {
					// The kubelet gives up after a random time; if the plugin has the call
					// already, the reset reaches it later, else with the request.
					select {
					case <-arrived:
						time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
						lag := time.Duration(rng.IntN(500)) * time.Microsecond
						go func() { time.Sleep(lag); deliver() }()
					case <-time.After(time.Duration(rng.IntN(300)) * time.Microsecond):
						deliver()
					}
					if err := unprepareOn(e.ctx, drivers[1-p], uid); err != nil {
						t.Errorf("unprepare %s: %v", uid, err)
					}
					<-done
				} else {
					if err = <-done; err != nil {
						t.Errorf("prepare %s (not cancelled): %v", uid, err)
					}
					if err := unprepareOn(e.ctx, drivers[1-p], uid); err != nil {
						t.Errorf("unprepare %s: %v", uid, err)
					}
				}
				deliver()
				if exists(e.recordPath(uid)) || exists(e.specPath(uid)) {
					mu.Lock()
					leaks = append(leaks, fmt.Sprintf("%s (prepare on instance %d, cancelled %v): record %v, spec %v", uid, p, cancelled, exists(e.recordPath(uid)), exists(e.specPath(uid))))
					mu.Unlock()
					_ = unprepareOn(e.ctx, drivers[1-p], uid)
				}
			}
		}()
	}
	wg.Wait()
	for _, d := range drivers {
		d.prep.hook = nil
	}
	if len(leaks) > 0 {
		t.Errorf("%d of %d claims left behind after the kubelet forgot them, e.g. %v", len(leaks), n, leaks[:min(5, len(leaks))])
	}
	if left := dirEntries(t, filepath.Join(e.dir, "checkpoint"), ".json"); len(left) != 0 {
		t.Errorf("records left: %v", left)
	}
	if left := dirEntries(t, e.cdiDir(), ".json"); len(left) != 0 {
		t.Errorf("CDI specs left: %v", left)
	}
}
