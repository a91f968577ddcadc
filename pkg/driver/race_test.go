package driver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

// The kubelet cancels a prepare when the pod starts terminating (or after 45 s) and sends the
// unprepare to the newest plugin instance of a rolling update, while the old instance may still
// be working on the prepare. These tests run the other instance's call at the points where a
// call works without the node lock (preparer.hook), and check that whatever the order, nothing is
// left: no record, no CDI spec, no GPU setting, no daemon.

// pauseAt makes d run fn once, when it reaches point.
func pauseAt(d *Driver, point string, fn func()) {
	var once sync.Once
	d.prep.hook = func(_ context.Context, p string) {
		if p == point {
			once.Do(fn)
		}
	}
}

// sharingFakes are the GPUs' settings as the fakes keep them, shared by both instances as the
// GPUs of one node are.
type sharingFakes struct {
	slicer *fakeSlicer
	modes  *fakeModes
	mps    *sharing.MPS
}

// checkClean fails unless nothing of claim uid is left on the node: no record, no spec, no
// daemon, every GPU at its default time-slice and compute mode, and no instance holding it.
func (e *env) checkClean(t *testing.T, f sharingFakes, uid types.UID, drivers ...*Driver) {
	t.Helper()
	if exists(e.recordPath(uid)) {
		t.Errorf("claim %s: checkpoint record left", uid)
	}
	if exists(e.specPath(uid)) {
		t.Errorf("claim %s: CDI spec left without its claim", uid)
	}
	if f.slicer != nil {
		for u, iv := range f.slicer.settings() {
			if iv != "Default" {
				t.Errorf("GPU %s left with time-slice %s", u, iv)
			}
		}
	}
	if f.modes != nil {
		f.modes.mu.Lock()
		for u, m := range f.modes.modes {
			if m != device.ComputeModeDefault {
				t.Errorf("GPU %s left in compute mode %s", u, m)
			}
		}
		f.modes.mu.Unlock()
	}
	if f.mps != nil {
		if mpsRunning(t, f.mps, string(uid)) {
			t.Errorf("claim %s: MPS daemon left running", uid)
		}
	}
	for i, d := range drivers {
		// A fresh hold of the lock brings the index up to date.
		if err := prepareOn(e.ctx, d, claim(fmt.Sprintf("probe-%s-%d", uid, i), []result{{Device: "gpu-0"}})); err != nil {
			t.Errorf("instance %d: gpu-0 still held after the claim was unprepared: %v", i, err)
			continue
		}
		if err := unprepareOn(e.ctx, d, types.UID(fmt.Sprintf("probe-%s-%d", uid, i))); err != nil {
			t.Error(err)
		}
	}
}

func sharingEnv(t *testing.T, mps bool) (*env, sharingFakes) {
	f := sharingFakes{slicer: &fakeSlicer{fail: map[string]bool{}}, modes: &fakeModes{modes: map[string]device.ComputeMode{}, fail: map[string]bool{}}}
	if mps {
		e, m, modes := mpsEnv(t)
		f.mps, f.modes = m, modes
		tweak := e.tweak
		e.tweak = func(o *Options) { tweak(o); o.TimeSlicer = f.slicer }
		e.start()
		return e, f
	}
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, dir: t.TempDir(), inv: inventory(2), kube: fake.NewClientset(), boot: bootA,
		tweak: func(o *Options) { o.TimeSlicer = f.slicer; o.ComputeMode = f.modes }}
	e.start()
	return e, f
}

var overlapClaims = map[string]struct {
	claim func(uid string) *resourceapi.ResourceClaim
	mps   bool
}{
	"whole GPU": {claim: func(uid string) *resourceapi.ResourceClaim { return claim(uid, []result{{Device: "gpu-0"}}) }},
	"time-slicing": {claim: func(uid string) *resourceapi.ResourceClaim {
		return claim(uid, []result{{Device: "gpu-0"}}, timeSliceLong)
	}},
	"MPS": {mps: true, claim: func(uid string) *resourceapi.ResourceClaim {
		return claim(uid, []result{{Device: "gpu-0"}}, sharingConfig(`{"strategy":"MPS"}`))
	}},
}

// TestUnprepareDuringPrepare: the old instance is preparing a claim when the kubelet cancels
// the prepare and the new instance unprepares the claim. The prepare must not publish, write a
// spec or set up the GPU after that.
func TestUnprepareDuringPrepare(t *testing.T) {
	for name, tc := range overlapClaims {
		t.Run(name, func(t *testing.T) {
			e, f := sharingEnv(t, tc.mps)
			a := e.drv
			b, _ := e.second(e.inv)
			c := tc.claim("u1")
			ctx, cancel := context.WithCancel(e.ctx)
			defer cancel()
			pauseAt(a, "prepare:unlocked", func() {
				cancel()
				if err := unprepareOn(e.ctx, b, "u1"); err != nil {
					t.Errorf("unprepare on the new instance: %v", err)
				}
			})
			err := prepareOn(ctx, a, c)
			t.Logf("cancelled prepare returned %v", err)
			a.prep.hook = nil
			e.checkClean(t, f, "u1", a, b)
		})
	}
}

// TestPrepareDuringUnprepare: the new instance is unpreparing a claim whose spec was lost (the
// CDI directory is tmpfs) when a prepare of the same claim on the old instance answers from the
// record and writes the spec again. The unprepare must not leave that spec behind.
func TestPrepareDuringUnprepare(t *testing.T) {
	for name, tc := range overlapClaims {
		t.Run(name, func(t *testing.T) {
			e, f := sharingEnv(t, tc.mps)
			a := e.drv
			b, _ := e.second(e.inv)
			c := tc.claim("u1")
			if err := prepareOn(e.ctx, a, c); err != nil {
				t.Fatal(err)
			}
			if err := e.drv.opts.CDI.Remove("u1"); err != nil {
				t.Fatal(err)
			}
			pauseAt(b, "unprepare:unlocked", func() {
				if err := prepareOn(e.ctx, a, c); err != nil {
					t.Errorf("prepare of the prepared claim on the old instance: %v", err)
				}
			})
			if err := unprepareOn(e.ctx, b, "u1"); err != nil {
				t.Fatal(err)
			}
			b.prep.hook = nil
			e.checkClean(t, f, "u1", a, b)
		})
	}
}

// TestPrepareCancelledWhileWaitingForLock: a prepare waiting for the node lock (the other
// instance holds it) gives up when its context is cancelled, and publishes nothing afterwards.
func TestPrepareCancelledWhileWaitingForLock(t *testing.T) {
	e := newEnv(t, inventory(2))
	other, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	l, err := other.Lock()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- prepareOn(ctx, e.drv, claim("u1", []result{{Device: "gpu-0"}})) }()
	cancel()
	select {
	case err = <-done:
		l.Unlock()
	case <-time.After(10 * time.Second):
		t.Error("prepare still waiting for the node lock 10s after its context was cancelled")
		l.Unlock()
		err = <-done
	}
	if err == nil {
		t.Error("a prepare whose context was cancelled succeeded")
	}
	t.Logf("cancelled prepare: %v", err)
	e.checkClean(t, sharingFakes{}, "u1", e.drv)
}

// TestRollingUpdateSameClaimStress overlaps, many times over, a prepare on one instance with
// the kubelet's cancellation of it and an unprepare of the same claim on the other instance,
// in random order and timing. After each pair nothing of the claim may be left.
func TestRollingUpdateSameClaimStress(t *testing.T) {
	e, f := sharingEnv(t, false)
	b, _ := e.second(e.inv)
	drivers := []*Driver{e.drv, b}
	rng := rand.New(rand.NewPCG(1, 2))
	n := 300
	if testing.Short() {
		n = 50
	}
	for i := range n {
		uid := types.UID(fmt.Sprintf("s%d", i))
		var c *resourceapi.ResourceClaim
		switch i % 3 {
		case 0:
			c = claim(string(uid), []result{{Device: "gpu-0"}})
		case 1:
			c = claim(string(uid), []result{{Device: "gpu-0"}}, timeSliceLong)
		case 2:
			c = claim(string(uid), []result{{Device: "gpu-0"}, {Device: "gpu-1"}}, timeSliceLong)
		}
		p := rng.IntN(2)
		delay := time.Duration(rng.IntN(400)) * time.Microsecond
		ctx, cancel := context.WithCancel(e.ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = prepareOn(ctx, drivers[p], c)
		}()
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			cancel()
			if err := unprepareOn(e.ctx, drivers[1-p], uid); err != nil {
				t.Errorf("unprepare %s: %v", uid, err)
			}
		}()
		wg.Wait()
		cancel()
		if exists(e.recordPath(uid)) || exists(e.specPath(uid)) {
			t.Errorf("round %d (prepare on instance %d, unprepare after %s): record %v, spec %v left", i, p, delay, exists(e.recordPath(uid)), exists(e.specPath(uid)))
			// Clean up through the kubelet's retry, so the next round starts clean.
			_ = unprepareOn(e.ctx, drivers[1-p], uid)
		}
		for u, iv := range f.slicer.settings() {
			if iv != "Default" {
				t.Errorf("round %d (prepare on instance %d, unprepare after %s): GPU %s left with time-slice %s", i, p, delay, u, iv)
				_ = f.slicer.SetTimeSlice(e.ctx, u, "Default")
			}
		}
		if t.Failed() && i > 20 {
			break
		}
	}
	e.checkClean(t, f, "end", drivers...)
	if left := dirEntries(t, filepath.Join(e.dir, "checkpoint"), ".json"); len(left) != 0 {
		t.Errorf("records left: %v", left)
	}
	if left := dirEntries(t, e.cdiDir(), ".json"); len(left) != 0 {
		t.Errorf("CDI specs left: %v", left)
	}
}
