package driver

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// preparer runs one claim's preparation, and its release, as a sequence of phases:
//
//	plan     (plan.go)      the claim's allocation and configuration become the record to
//	                        publish; the sharing step plans its settings, the MIG step its
//	                        instances' intent. No side effects, no lock.
//	stage                   the record is written to a temporary file and the CDI spec built
//	                        and validated (specStep.build), still without the lock.
//	reserve                 one hold of the node lock: the holdings answer once (lockFor:
//	                        the claim's record, who is in the way of its devices), abandoned
//	                        preparations in the way are rolled back, then each step that
//	                        applies checks what the holdings do not key (step.reserve).
//	commit                  the staged record is published (holdings.publish).
//	apply                   in the same hold, each step that applies sets up its part
//	                        (step.apply), then the spec step writes the spec (specStep.apply).
//	release  (forget)       each step that applies undoes its part (step.release), then the
//	                        spec, then the record.
//
// The steps are the concerns of a claim beyond its record and spec, each a type in its own file
// behind the step interface; which of them apply to a claim, per phase, is read from its record
// (stepsFor), so that a claim that does not share a GPU never enters the sharing step. The spec
// is not a step of the loop because its place differs per phase: it is built before the lock,
// written last, so that no container starts on a GPU not yet set, and removed before the
// record, so that a setting that cannot be put back keeps the claim whole for the retry.
// A dynamic-MIG claim and an MPS claim publish their record as PrepareStarted, create their
// instances (migStep.create) and start and await their daemon (sharingStep.start) between two
// holds, and commit and apply in the second (finish).
// A new concern is a new step type in its own file and a line in stepsFor.
type preparer struct {
	n       *node
	held    *holdings
	graves  *tombstones
	spec    *specStep
	mig     *migStep
	sharing *sharingStep

	// claimLocks serialise this instance's work on one claim (the kubelet may retry a claim
	// while a first call is still running) without serialising different claims.
	claimLocks [64]sync.Mutex

	// hook, if set (tests only), is called at the points where a prepare or an unprepare runs
	// without the node lock, so that a test can run another instance's call right there, and
	// where a prepare begins ("prepare:start").
	hook func(ctx context.Context, point string)
}

// step is one concern of a claim's preparation beyond its record and its CDI spec: the
// sharing settings (sharingStep), dynamic MIG's instances (migStep). It keeps no index of its
// own: it asks the holdings who holds what. Every method runs with the node lock held (l), in
// the hold that publishes or removes the claim's record.
type step interface {
	// reserve checks, before rec's record is published, what rec needs beyond its devices,
	// which the holdings checked (s): an error refuses rec; the claims it names are in the
	// way, each with why, and are rolled back if their preparation was abandoned, or else
	// refuse rec.
	reserve(l *checkpoint.Locked, ref string, rec *checkpoint.Claim, s *standing) ([]inTheWay, error)
	// apply sets up the step's part of rec right after its record was published. On failure
	// it has put back what it set, and it is not released.
	apply(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim) error
	// release undoes the step's part of c before c's spec and record go; if it fails the
	// record stays, so that a retry can finish.
	release(ctx context.Context, l *checkpoint.Locked, c *checkpoint.Claim) error
}

// inTheWay is a claim that holds what a step of another claim needs.
type inTheWay struct {
	claim *checkpoint.Claim
	err   error // the refusal, if the claim is alive
}

// startingError refuses a claim for now: a live two-phase preparation of another claim is
// starting what the claim needs (the GPU's MPS daemon). The prepare waits for it (wait) and
// tries again.
type startingError struct {
	msg string
	// settled is closed when a two-phase preparation of this instance settles; one of the
	// other instance of a rolling update is not heard of, and is polled for.
	settled <-chan struct{}
}

func (e *startingError) Error() string { return e.msg + "; try again when it is done" }

// startingPoll is how often a prepare waiting for a preparation it hears nothing of (the other
// instance's) looks again.
const startingPoll = time.Second

// wait returns when the awaited preparation may have settled, or ctx's cause once ctx ends.
func (e *startingError) wait(ctx context.Context) error {
	t := time.NewTimer(startingPoll)
	defer t.Stop()
	select {
	case <-e.settled:
	case <-t.C:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// phase is a phase of the preparation in which steps run.
type phase int

const (
	phaseReserve phase = iota
	phaseApply
	phaseRelease
)

// stepsFor are the steps that apply to the claim c in phase ph, in their order: sharing, then
// MIG. It reads c's record alone (and the node's devices), so that a record from disk is
// released by the steps that prepared it.
func (p *preparer) stepsFor(c *checkpoint.Claim, ph phase) []step {
	var out []step
	switch ph {
	case phaseReserve:
		// Shares must agree on the GPU's setting; MIG partitions overlap without sharing a
		// device name.
		if hasShare(c) {
			out = append(out, p.sharing)
		}
		if p.holdsMIG(c) {
			out = append(out, p.mig)
		}
	case phaseApply:
		// Dynamic MIG's part, and an MPS daemon's start, are made between the holds (finish).
		if c.Sharing != nil {
			out = append(out, p.sharing)
		}
	case phaseRelease:
		if c.Sharing != nil {
			out = append(out, p.sharing)
		}
		if hasDynamicMIG(c) {
			out = append(out, p.mig)
		}
	}
	return out
}

// hasShare reports whether c holds a share of a device.
func hasShare(c *checkpoint.Claim) bool {
	for i := range c.Devices {
		if c.Devices[i].ShareID != "" {
			return true
		}
	}
	return false
}

// holdsMIG reports whether c holds part or all of a MIG-mode GPU: a dynamic-MIG device, or
// such a GPU given out whole (migStep.holding).
func (p *preparer) holdsMIG(c *checkpoint.Claim) bool {
	for i := range c.Devices {
		pd := &c.Devices[i]
		if pd.MIG != nil || (!pd.AdminAccess && p.n.migParents[pd.Device]) {
			return true
		}
	}
	return false
}

func (p *preparer) claimLock(uid types.UID) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return &p.claimLocks[h.Sum32()%uint32(len(p.claimLocks))]
}

func (p *preparer) prepare(ctx context.Context, claim *resourceapi.ResourceClaim, start time.Time) ([]kubeletplugin.Device, error) {
	p.at(ctx, "prepare:start")
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
	twoPhase := hasDynamicMIG(rec) || p.sharing.startsDaemon(rec)
	var spec *specs.Spec
	edits := p.spec.edits.Load()
	if twoPhase {
		// Dynamic MIG: creating the instances is slow and cannot be redone from the record
		// alone; MPS: the daemon takes until its pod runs and its pipe answers. So the first
		// hold announces it (PrepareStarted) and a second one completes it (finish); the spec
		// names the MIG instances, so it is built once they exist.
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

	p.at(ctx, "prepare:unlocked")
	answer, err := p.hold(ctx, rec, st, spec, edits, twoPhase, start)
	for waited := time.Duration(0); ; {
		var starting *startingError
		if !errors.As(err, &starting) {
			break
		}
		// The GPU has one MPS daemon and one starter: this share waits for it without the
		// lock, as long as the kubelet waits for this call, rather than fail and be retried
		// after the kubelet's back-off (a minute and more for the third pod of a GPU).
		klog.FromContext(ctx).V(2).Info("Waiting for the GPU's MPS control daemon that another claim's preparation is starting", "claim", klog.KObj(claim), "reason", starting.msg)
		p.at(ctx, "prepare:awaiting-daemon")
		t0 := time.Now()
		werr := starting.wait(ctx)
		waited += time.Since(t0)
		if werr != nil {
			return nil, fmt.Errorf("%s; gave up waiting for it after %s: %w", starting.msg, waited.Round(time.Millisecond), werr)
		}
		answer, err = p.hold(ctx, rec, st, spec, edits, twoPhase, start)
	}
	if err != nil {
		return nil, err
	}
	if answer == nil {
		if err := p.finish(ctx, rec); err != nil {
			return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
		}
		answer = rec
	}
	klog.FromContext(ctx).V(2).Info("Prepared claim", "claim", klog.KObj(claim), "devices", len(answer.Devices))
	return toKubelet(answer), nil
}

// hold is a prepare's hold of the node lock: reserve and commit, and for a claim prepared in
// one phase apply. It returns the claim's record if the claim was already prepared, or once it
// is, and nil for a two-phase claim whose PrepareStarted record it published.
// start is when the prepare began.
func (p *preparer) hold(ctx context.Context, rec *checkpoint.Claim, st *checkpoint.Staged, spec *specs.Spec, edits *specs.ContainerEdits, twoPhase bool, start time.Time) (*checkpoint.Claim, error) {
	ref := klog.KRef(rec.Namespace, rec.Name)
	steps := p.stepsFor(rec, phaseReserve)
	l, s, err := p.held.lockFor(ctx, rec, len(steps) > 0)
	if err != nil {
		return nil, err
	}
	defer l.Unlock()
	// The kubelet cancels a prepare when the pod starts terminating and then sends the
	// unprepare, possibly to the other instance of a rolling update, which may have run it
	// already. A cancelled prepare must not publish: nobody would unprepare it.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("claim %s: prepare cancelled before it was published: %w", ref, context.Cause(ctx))
	}
	// The cancellation may reach this process only after the other instance ran the unprepare:
	// the unprepare's tombstone says so (tombstone.go).
	if err := p.graves.refuses(types.UID(rec.UID), start); err != nil {
		return nil, fmt.Errorf("claim %s: %w", ref, err)
	}
	existing, err := p.reserve(ctx, l, rec, st, &s, steps)
	switch {
	case err != nil:
		return nil, err
	case existing != nil:
		return existing, nil
	case twoPhase:
		return nil, nil
	}
	if p.spec.edits.Load() != edits {
		// SetCommonEdits swapped the driver's files since the spec was built.
		if spec, err = p.spec.build(rec); err != nil {
			p.undo(ctx, l, rec, nil)
			return nil, fmt.Errorf("claim %s: %w", ref, err)
		}
	}
	if err := p.complete(ctx, l, rec, spec); err != nil {
		return nil, fmt.Errorf("claim %s: %w", ref, err)
	}
	return rec, nil
}

// complete does, under the node lock and right after rec's record was published, what a
// prepare sets up on the node: each step's part (step.apply), then its CDI spec. If either
// fails, everything is undone in the same hold, record included, so that a failed prepare
// leaves nothing and reserves nothing.
func (p *preparer) complete(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim, spec *specs.Spec) error {
	for _, s := range p.stepsFor(rec, phaseApply) {
		if err := s.apply(ctx, l, rec); err != nil {
			// apply has put back what it could; the undo must not try again and keep the
			// record for a GPU that refuses both.
			p.undo(ctx, l, rec, s)
			return err
		}
	}
	if err := p.spec.apply(rec, spec); err != nil {
		p.undo(ctx, l, rec, nil)
		return err
	}
	return nil
}

// undo forgets rec after a failed prepare, under the node lock, but for the step failed (if
// not nil), which put back its part itself; what cannot be undone is logged, the prepare's own
// error is what the kubelet sees.
func (p *preparer) undo(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim, failed step) {
	p.held.preparing(l, types.UID(rec.UID), false)
	if err := p.release(ctx, l, rec, failed); err != nil {
		klog.FromContext(ctx).Error(err, "Undoing a failed prepare", "claim", klog.KRef(rec.Namespace, rec.Name))
	}
}

// reserve decides, under the node lock, whether this instance may prepare rec, and publishes
// the decision as the record st staged. This is the driver's last line of defence against two
// workloads sharing a device, so it decides against what is on disk (the holdings' answer s,
// which the lock brought up to date), not against what this process remembers. If the claim is
// already prepared it returns the record instead (the kubelet asks again after its own
// restart, or asks the other instance of a rolling update). steps are rec's reserve steps.
func (p *preparer) reserve(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim, st *checkpoint.Staged, s *standing, steps []step) (*checkpoint.Claim, error) {
	ref := klog.KRef(rec.Namespace, rec.Name).String()
	if s.err != nil {
		return nil, s.err
	}
	if s.found {
		cur := s.cur
		switch {
		case cur.State == checkpoint.StatePrepareCompleted:
			return p.restore(ctx, l, &cur)
		case cur.Owner != p.n.instance && l.Alive(cur.Owner):
			return nil, fmt.Errorf("claim %s is being prepared by another instance of the plugin (%s); try again when it is done", ref, cur.Owner)
		}
		// Half-done by an instance that died or by an earlier attempt of this one: start over,
		// destroying the MIG instances it recorded.
		if err := p.mig.release(ctx, l, &cur); err != nil {
			return nil, fmt.Errorf("claim %s: %w", ref, err)
		}
	}

	// A device may have several holders (shares); each abandoned one is rolled back and the
	// holdings asked again, until a live one refuses or none is left.
	for s.blocker != nil {
		oc := s.blocker
		klog.FromContext(ctx).Info("Rolling back a claim whose preparation was abandoned, to free its device", "claim", klog.KRef(oc.Namespace, oc.Name), "owner", oc.Owner, "device", s.blockerDev)
		if err := p.forget(ctx, l, oc); err != nil {
			return nil, err
		}
		*s = p.held.standing(l, rec, len(steps) > 0)
	}
	if s.blockErr != nil {
		return nil, fmt.Errorf("claim %s: %w", ref, s.blockErr)
	}
	for _, step := range steps {
		inWay, err := step.reserve(l, ref, rec, s)
		if err != nil {
			return nil, err
		}
		for _, w := range inWay {
			if w.err != nil && !p.held.abandoned(l, w.claim) {
				return nil, w.err
			}
			klog.FromContext(ctx).Info("Rolling back a claim whose preparation was abandoned, to free what it holds", "claim", klog.KRef(w.claim.Namespace, w.claim.Name), "owner", w.claim.Owner)
			if err := p.forget(ctx, l, w.claim); err != nil {
				return nil, fmt.Errorf("claim %s: %w", ref, err)
			}
		}
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

// forget removes every trace of a claim, under the lock: each step's part (what its sharing
// set on the GPUs, the MIG instances it created; if that fails the record stays, so that a
// retry can finish), then its CDI spec and its record, and its entry in the index. Settings of
// a GPU that is lost are left for the GPU's reset or the node's reboot (sharingStep.release,
// migStep.release): the claim's pod must be able to terminate.
func (p *preparer) forget(ctx context.Context, l *checkpoint.Locked, c *checkpoint.Claim) error {
	return p.release(ctx, l, c, nil)
}

// release is forget but for the step skip, if not nil.
func (p *preparer) release(ctx context.Context, l *checkpoint.Locked, c *checkpoint.Claim, skip step) error {
	for _, s := range p.stepsFor(c, phaseRelease) {
		if s == skip {
			continue
		}
		if err := s.release(ctx, l, c); err != nil {
			return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
		}
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
	p.at(ctx, "unprepare:unlocked")
	// One hold for everything: a prepare of the same claim on the other instance (whose
	// context the kubelet cancelled) either published before it, and is undone here whole, or
	// comes after it and publishes nothing.
	err := p.held.withLock(ctx, func(l *checkpoint.Locked) error {
		// A prepare of the claim that began before this unprepare, on the other instance, may
		// still be on its way to the lock with a context not yet cancelled: the tombstone
		// stops it from publishing (tombstone.go). Failing to leave one fails no unprepare,
		// which the pod's termination waits for.
		if err := p.graves.bury(l, c.UID); err != nil {
			p.n.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
			klog.FromContext(ctx).Error(err, "Recording the unprepare; a prepare of the claim that began before it could still publish", "claim", c.NamespacedName)
		}
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
func (p *preparer) at(ctx context.Context, point string) {
	if p.hook != nil {
		p.hook(ctx, point)
	}
}

// finish does the slow part of a two-phase claim (hasDynamicMIG, sharingStep.startsDaemon)
// without the node lock, and completes the claim: it creates the MIG instances of rec's
// dynamic-MIG devices and starts and awaits its MPS daemon (sharingStep.start). reserve has
// published rec's PrepareStarted record (the intent: parent, profile and placement; the
// sharing that counts on the daemon and the GPUs' compute mode), after checking that what it
// needs overlaps nothing another claim holds, and that record holds the placement and the
// daemon against every sweep meanwhile; a crash leaves it half-prepared, which the next
// start-up or prepare rolls back (daemon, compute modes and instances included). The second
// hold records what was made and completes the claim, sharing and CDI spec included, unless
// the claim was unprepared meanwhile (which an unprepare's tombstone does too) or the kubelet
// gave up on the prepare, in which case it undoes what it made.
func (p *preparer) finish(ctx context.Context, rec *checkpoint.Claim) error {
	var created []int
	var set []string // the GPUs whose compute mode the sharing step set
	var err error
	if hasDynamicMIG(rec) {
		created, err = p.mig.create(ctx, rec)
	}
	if err == nil {
		p.at(ctx, "prepare:starting")
		set, err = p.sharing.start(ctx, rec)
	}
	// Cleaning up must happen even when the kubelet cancelled the prepare.
	cleanup := context.WithoutCancel(ctx)
	if err != nil {
		if p.abort(cleanup, rec, created, set) {
			// The unprepare took away what the step was making (the daemon's directory).
			return fmt.Errorf("%w (%v)", errUnprepared, err)
		}
		return err
	}
	// The spec names the instances just made; it is built, as for any claim, before the hold.
	done := *rec
	done.State, done.Owner = checkpoint.StatePrepareCompleted, ""
	edits := p.spec.edits.Load()
	spec, err := p.spec.build(&done)
	if err != nil {
		p.abort(cleanup, rec, created, set)
		return err
	}
	l, err := p.held.commit(ctx, rec, &done)
	if l == nil {
		return err
	}
	defer l.Unlock()
	switch {
	case errors.Is(err, errUnprepared):
		// Unprepared (or rolled back) meanwhile: what this prepare made is no one's.
		p.mig.destroyCreated(cleanup, l, rec, created)
		if _, found := p.held.get(rec.UID); !found {
			// A record of the claim that is not this prepare's counts on the daemon.
			p.sharing.abandon(cleanup, rec, set)
		}
		return err
	case err != nil:
		p.undo(cleanup, l, rec, nil)
		return err
	}
	*rec = done
	if migCrash != nil {
		migCrash("completed")
	}
	if p.spec.edits.Load() != edits {
		// SetCommonEdits swapped the driver's files since the spec was built.
		if spec, err = p.spec.build(rec); err != nil {
			p.undo(cleanup, l, rec, nil)
			return err
		}
	}
	return p.complete(cleanup, l, rec, spec)
}

// abort undoes a two-phase prepare whose unlocked part failed: under the node lock, the MIG
// instances it made are destroyed, its MPS daemon stopped and the compute modes it set (set)
// put back, and its record goes, unless the record is no longer its own. The sharing step's
// release is not run: it would put back compute modes the prepare did not set, which may be
// the very ones that failed. It reports whether the record was no longer its own.
func (p *preparer) abort(ctx context.Context, rec *checkpoint.Claim, created []int, set []string) bool {
	var gone bool
	err := p.held.withLock(ctx, func(l *checkpoint.Locked) error {
		p.held.preparing(l, types.UID(rec.UID), false)
		cur, found := p.held.get(rec.UID)
		ours := found && cur.State == checkpoint.StatePrepareStarted && cur.Owner == p.n.instance
		if ours || !found {
			// A record of the claim that is not this prepare's counts on the daemon (its key
			// is the claim's) and the GPUs.
			p.sharing.abandon(ctx, rec, set)
		}
		if !ours {
			gone = true
			p.mig.destroyCreated(ctx, l, rec, created)
			return nil
		}
		return p.release(ctx, l, rec, p.sharing)
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Rolling back a failed two-phase prepare", "claim", klog.KRef(rec.Namespace, rec.Name))
	}
	return gone
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
// instances and so takes two phases, as an MPS claim's does (sharingStep.startsDaemon) (reserve writes PrepareStarted, commit PrepareCompleted).
func hasDynamicMIG(rec *checkpoint.Claim) bool {
	for i := range rec.Devices {
		if rec.Devices[i].MIG != nil {
			return true
		}
	}
	return false
}
