package driver

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// preparer runs one claim's preparation, and its release, as a sequence of steps:
//
//	plan     (plan.go)      the claim's allocation and configuration become the record to
//	                        publish; the sharing step plans its settings, the MIG step its
//	                        instances' intent. No side effects, no lock.
//	stage                   the record is written to a temporary file and the CDI spec built
//	                        and validated (specStep.build), still without the lock.
//	reserve                 under the node lock: the holdings say whether the devices are free
//	                        (abandoned preparations in the way are rolled back), the sharing
//	                        step whether the GPUs' settings agree, the MIG step whether
//	                        partitions overlap.
//	commit                  the staged record is published (holdings.publish).
//	apply                   the sharing step sets the GPUs (sharingStep.apply), the spec step
//	                        writes the spec (specStep.apply), in the same hold.
//	release  (forget)       sharing, MIG, spec, then the record: each step undoes its part.
//
// A dynamic-MIG claim publishes its record as PrepareStarted, creates its instances between
// two holds (migStep.create) and commits and applies in the second (finishMIG). The orders are
// written out here rather than looped over an interface because they differ per phase: the
// spec is written last, so that no container starts on a GPU not yet set, but removed before
// the record, so that a setting that cannot be put back keeps the claim whole for the retry.
// A new concern is a new step type in its own file, called from these functions.
type preparer struct {
	n       *node
	held    *holdings
	spec    *specStep
	mig     *migStep
	sharing *sharingStep

	// claimLocks serialise this instance's work on one claim (the kubelet may retry a claim
	// while a first call is still running) without serialising different claims.
	claimLocks [64]sync.Mutex

	// hook, if set (tests only), is called at the points where a prepare or an unprepare runs
	// without the node lock, so that a test can run another instance's call right there.
	hook func(point string)
}

func (p *preparer) claimLock(uid types.UID) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return &p.claimLocks[h.Sum32()%uint32(len(p.claimLocks))]
}

func (p *preparer) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	lock := p.claimLock(claim.UID)
	lock.Lock()
	defer lock.Unlock()

	rec, err := p.plan(claim)
	if err != nil {
		return nil, err
	}
	// What can be done without the node lock is done before it: the record is encoded and
	// written to a temporary file, the CDI spec built and validated. Under the lock they cost a
	// rename each.
	done := *rec
	done.State, done.Owner = checkpoint.StatePrepareCompleted, ""
	twoPhase := hasDynamicMIG(rec)
	var spec *specs.Spec
	edits := p.spec.edits.Load()
	if twoPhase {
		// Dynamic MIG: creating the instances is slow and cannot be redone from the record
		// alone, so the first hold announces it (PrepareStarted) and a second one completes it
		// (finishMIG); the spec names the instances, so it is built once they exist.
		done.State, done.Owner = checkpoint.StatePrepareStarted, p.n.instance
	} else if spec, err = p.spec.build(&done); err != nil {
		return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
	}
	st, err := p.n.opts.State.Stage(done)
	if err != nil {
		p.n.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return nil, fmt.Errorf("claim %s: checkpoint: %w", klog.KObj(claim), err)
	}
	defer st.Discard()

	p.at("prepare:unlocked")
	var answer *checkpoint.Claim
	err = p.held.withLock(ctx, func(l *checkpoint.Locked) error {
		// The kubelet cancels a prepare when the pod starts terminating and then sends the
		// unprepare, possibly to the other instance of a rolling update, which may have run it
		// already. A cancelled prepare must not publish: nobody would unprepare it.
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("claim %s: prepare cancelled before it was published: %w", klog.KObj(claim), context.Cause(ctx))
		}
		existing, err := p.reserve(ctx, l, rec, st)
		switch {
		case err != nil:
			return err
		case existing != nil:
			answer = existing
			return nil
		case twoPhase:
			return nil
		}
		if p.spec.edits.Load() != edits {
			// SetCommonEdits swapped the driver's files since the spec was built.
			if spec, err = p.spec.build(rec); err != nil {
				p.undo(ctx, l, rec)
				return fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
			}
		}
		if err := p.complete(ctx, l, rec, spec); err != nil {
			return fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
		}
		answer = rec
		return nil
	})
	if err != nil {
		return nil, err
	}
	if answer == nil {
		if err := p.finishMIG(ctx, rec); err != nil {
			return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
		}
		answer = rec
	}
	klog.FromContext(ctx).V(2).Info("Prepared claim", "claim", klog.KObj(claim), "devices", len(answer.Devices))
	return toKubelet(answer), nil
}

// complete does, under the node lock and right after rec's record was published, what a
// prepare sets up on the node: the claim's sharing settings and its CDI spec. If either fails,
// everything is undone in the same hold, record included, so that a failed prepare leaves
// nothing and reserves nothing.
func (p *preparer) complete(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim, spec *specs.Spec) error {
	if err := p.sharing.apply(ctx, rec); err != nil {
		// apply has put back what it could; the undo must not try again and keep the
		// record for a GPU that refuses both.
		undone := *rec
		undone.Sharing = nil
		p.undo(ctx, l, &undone)
		return err
	}
	if err := p.spec.apply(rec, spec); err != nil {
		p.undo(ctx, l, rec)
		return err
	}
	return nil
}

// undo forgets rec after a failed prepare, under the node lock; what cannot be undone is
// logged, the prepare's own error is what the kubelet sees.
func (p *preparer) undo(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim) {
	p.held.preparing(l, types.UID(rec.UID), false)
	if err := p.forget(ctx, l, rec); err != nil {
		klog.FromContext(ctx).Error(err, "Undoing a failed prepare", "claim", klog.KRef(rec.Namespace, rec.Name))
	}
}

// reserve decides, under the node lock, whether this instance may prepare rec, and publishes
// the decision as the record st staged. This is the driver's last line of defence against two
// workloads sharing a device, so it decides against what is on disk (the index, which the lock
// brings up to date), not against what this process remembers. If the claim is already
// prepared it returns the record instead (the kubelet asks again after its own restart, or asks
// the other instance of a rolling update).
func (p *preparer) reserve(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim, st *checkpoint.Staged) (*checkpoint.Claim, error) {
	ref := klog.KRef(rec.Namespace, rec.Name).String()
	cur, found, err := p.held.current(rec)
	if err != nil {
		return nil, err
	}
	if found {
		switch {
		case cur.State == checkpoint.StatePrepareCompleted:
			return p.restore(ctx, l, &cur)
		case cur.Owner != p.n.instance && l.Alive(cur.Owner):
			return nil, fmt.Errorf("claim %s is being prepared by another instance of the plugin (%s); try again when it is done", ref, cur.Owner)
		}
		// Half-done by an instance that died or by an earlier attempt of this one: start over,
		// destroying the MIG instances it recorded.
		if err := p.mig.release(ctx, &cur); err != nil {
			return nil, fmt.Errorf("claim %s: %w", ref, err)
		}
	}

	// A device may have several holders (shares); each abandoned one is rolled back and the
	// devices looked at again, until a live one refuses or none is left.
	for {
		oc, dev, err := p.held.blocking(l, rec)
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", ref, err)
		}
		if oc == nil {
			break
		}
		klog.FromContext(ctx).Info("Rolling back a claim whose preparation was abandoned, to free its device", "claim", klog.KRef(oc.Namespace, oc.Name), "owner", oc.Owner, "device", dev)
		if err := p.forget(ctx, l, oc); err != nil {
			return nil, err
		}
	}
	if err := p.sharing.conflicts(ref, rec); err != nil {
		return nil, err
	}
	// Partitions of a MIG-mode GPU overlap without sharing a device name.
	for _, o := range p.mig.overlapping(rec) {
		if p.held.abandoned(l, o.claim) {
			klog.FromContext(ctx).Info("Rolling back a claim whose preparation was abandoned, to free its MIG slices", "claim", klog.KRef(o.claim.Namespace, o.claim.Name), "owner", o.claim.Owner)
			if err := p.forget(ctx, l, o.claim); err != nil {
				return nil, fmt.Errorf("claim %s: %w", ref, err)
			}
			continue
		}
		return nil, fmt.Errorf("claim %s: MIG device %s overlaps what claim %s holds on GPU %s", ref, o.device, p.held.describe(types.UID(o.claim.UID)), o.parent)
	}

	if err := p.held.publish(l, rec, st); err != nil {
		return nil, fmt.Errorf("claim %s: checkpoint: %w", ref, err)
	}
	return nil, nil
}

// restore answers a prepare of a claim that is already prepared, after checking that its devices
// are still the ones it got. Only a CDI spec lost on a wiped tmpfs is written again; it is
// written under the lock so that an unprepare by the other instance cannot slip in between.
func (p *preparer) restore(ctx context.Context, l *checkpoint.Locked, cur *checkpoint.Claim) (*checkpoint.Claim, error) {
	ref := klog.KRef(cur.Namespace, cur.Name)
	if err := p.verifyIdentity(ctx, l, cur); err != nil {
		return nil, err
	}
	if !p.n.opts.CDI.Exists(cur.UID) {
		if err := p.spec.write(ctx, cur); err != nil {
			return nil, fmt.Errorf("claim %s: re-creating CDI spec: %w", ref, err)
		}
	}
	p.sharing.ensure(ctx, cur)
	return cur, nil
}

// rewriteSpec writes the spec of the prepared claim uid again, if it is there (SetCommonEdits).
func (p *preparer) rewriteSpec(ctx context.Context, uid types.UID) (bool, error) {
	lock := p.claimLock(uid)
	lock.Lock()
	defer lock.Unlock()
	l, err := p.held.lock(ctx)
	if err != nil {
		return false, err
	}
	defer l.Unlock()
	c, found := p.held.get(string(uid))
	if !found || c.State != checkpoint.StatePrepareCompleted || c.Foreign != nil || !p.n.opts.CDI.Exists(c.UID) {
		return false, nil
	}
	if err := p.spec.write(ctx, &c); err != nil {
		return false, fmt.Errorf("claim %s/%s: rewriting CDI spec: %w", c.Namespace, c.Name, err)
	}
	return true, nil
}

// forget removes every trace of a claim, under the lock: what its sharing set on the GPUs and
// the MIG instances it created (if that fails the record stays, so that a retry can finish),
// then its CDI spec and its record, and its entry in the index. Settings of a GPU that is lost
// are left for the GPU's reset or the node's reboot (sharingStep.release, migStep.release): the
// claim's pod must be able to terminate.
func (p *preparer) forget(ctx context.Context, l *checkpoint.Locked, c *checkpoint.Claim) error {
	if err := p.sharing.release(ctx, c); err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	if err := p.mig.release(ctx, c); err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	if err := p.spec.release(c); err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	if err := p.held.remove(l, c.UID); err != nil {
		return fmt.Errorf("claim %s/%s: deleting checkpoint record: %w", c.Namespace, c.Name, err)
	}
	return nil
}

// unprepare removes whatever is on the node for the claim c, in one hold of the node lock.
func (p *preparer) unprepare(ctx context.Context, c kubeletplugin.NamespacedObject) error {
	lock := p.claimLock(c.UID)
	lock.Lock()
	defer lock.Unlock()
	p.at("unprepare:unlocked")
	// One hold for everything: a prepare of the same claim on the other instance (whose
	// context the kubelet cancelled) either published before it, and is undone here whole, or
	// comes after it and publishes nothing.
	err := p.held.withLock(ctx, func(l *checkpoint.Locked) error {
		cur, found := p.held.get(string(c.UID))
		if !found {
			// Nothing recorded; a spec without record is removed all the same.
			if err := p.n.opts.CDI.Remove(string(c.UID)); err != nil {
				return fmt.Errorf("claim %s: removing CDI spec: %w", c.NamespacedName, err)
			}
			return nil
		}
		if cur.Foreign != nil {
			// A newer plugin's claim: the kubelet's retry reaches that plugin, which undoes
			// all of it (docs/node-plugin.md). The spec goes, as in every unprepare: the
			// kubelet unprepares only claims no container uses.
			if err := p.n.opts.CDI.Remove(string(c.UID)); err != nil {
				return fmt.Errorf("claim %s: removing CDI spec: %w", c.NamespacedName, err)
			}
			return notOwned(&cur, "unprepare")
		}
		if cur.State != checkpoint.StatePrepareCompleted && cur.Owner == p.n.instance {
			// This instance's own two-phase prepare of the claim is at its unlocked step;
			// once the record is gone it finds it so and destroys what it made.
			p.held.preparing(l, c.UID, false)
		}
		return p.forget(ctx, l, &cur)
	})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Unprepared claim", "claim", c.NamespacedName)
	return nil
}

func toKubelet(rec *checkpoint.Claim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(rec.Devices))
	for _, pd := range rec.Devices {
		dev := kubeletplugin.Device{
			Requests:     []string{pd.Request},
			PoolName:     pd.Pool,
			DeviceName:   pd.Device,
			CDIDeviceIDs: append([]string(nil), pd.CDIDeviceIDs...),
		}
		if pd.ShareID != "" {
			id := types.UID(pd.ShareID)
			dev.ShareID = &id
		}
		out = append(out, dev)
	}
	return out
}

// at calls the test hook for point.
func (p *preparer) at(point string) {
	if p.hook != nil {
		p.hook(point)
	}
}

// finishMIG creates the MIG instances of rec's dynamic-MIG devices and completes the claim.
// Only claims with a dynamic-MIG device (hasDynamicMIG) get here: reserve has published their
// PrepareStarted record (the intent: parent, profile and placement), after checking that what
// they need overlaps nothing another claim holds, and that record holds the placement against
// every sweep while the instances are made. Creating them is slow (NVML), so it runs without
// the node lock; the second hold records what was made and completes the claim, sharing and
// CDI spec included, unless the claim was unprepared meanwhile or the kubelet gave up on the
// prepare, in which case it destroys what it made.
func (p *preparer) finishMIG(ctx context.Context, rec *checkpoint.Claim) error {
	created, err := p.mig.create(ctx, rec)
	// Cleaning up must happen even when the kubelet cancelled the prepare.
	cleanup := context.WithoutCancel(ctx)
	if err != nil {
		p.abortMIG(cleanup, rec, created)
		return err
	}
	return p.held.withLock(cleanup, func(l *checkpoint.Locked) error {
		cur, found := p.held.resume(l, rec.UID)
		if !found || cur.State != checkpoint.StatePrepareStarted || cur.Owner != p.n.instance {
			// Unprepared (or rolled back) meanwhile: what this prepare made is no one's.
			p.mig.destroyCreated(cleanup, rec, created)
			return errors.New("the claim was unprepared while its MIG instances were being created")
		}
		if err := ctx.Err(); err != nil {
			p.undo(cleanup, l, rec)
			return fmt.Errorf("prepare cancelled before it was published: %w", context.Cause(ctx))
		}
		done := *rec
		done.State, done.Owner = checkpoint.StatePrepareCompleted, ""
		spec, err := p.spec.build(&done)
		if err != nil {
			p.undo(cleanup, l, rec)
			return err
		}
		if err := p.held.put(l, &done); err != nil {
			p.undo(cleanup, l, rec)
			return fmt.Errorf("checkpoint: %w", err)
		}
		*rec = done
		migCrash("completed")
		return p.complete(cleanup, l, rec, spec)
	})
}

// abortMIG undoes a dynamic-MIG prepare whose creation failed: under the node lock, the
// instances it made are destroyed and its record goes, unless the record is no longer its own.
func (p *preparer) abortMIG(ctx context.Context, rec *checkpoint.Claim, created []int) {
	err := p.held.withLock(ctx, func(l *checkpoint.Locked) error {
		cur, found := p.held.resume(l, rec.UID)
		if !found || cur.State != checkpoint.StatePrepareStarted || cur.Owner != p.n.instance {
			p.mig.destroyCreated(ctx, rec, created)
			return nil
		}
		return p.forget(ctx, l, rec)
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Rolling back a failed dynamic-MIG prepare", "claim", klog.KRef(rec.Namespace, rec.Name))
	}
}

// dropIfUnchanged forgets c if its record is still PrepareCompleted (start-up reconciliation
// and the garbage collection, which asked the API server about c without the lock).
func (p *preparer) dropIfUnchanged(ctx context.Context, c *checkpoint.Claim) (bool, error) {
	l, err := p.held.lock(ctx)
	if err != nil {
		return false, err
	}
	defer l.Unlock()
	cur, found := p.held.get(c.UID)
	if !found || cur.State != checkpoint.StatePrepareCompleted || cur.Foreign != nil {
		return false, nil
	}
	return true, p.forget(ctx, l, &cur)
}

// hasDynamicMIG reports whether rec has a dynamic-MIG device, whose preparation creates MIG
// instances and so takes two phases (reserve writes PrepareStarted, commit PrepareCompleted).
func hasDynamicMIG(rec *checkpoint.Claim) bool {
	for i := range rec.Devices {
		if rec.Devices[i].MIG != nil {
			return true
		}
	}
	return false
}
