package driver

import (
	"context"
	"errors"
	"fmt"
	stdslices "slices"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// holdings are the node's holdings as the checkpoint records them: which claim holds which
// device (exclusively or a share of it), the records this plugin cannot read, and the claims
// this instance is preparing in two phases. It is the one index of the checkpoint directory,
// not a second truth: it is rebuilt from disk under the node lock whenever another process
// wrote there (lock), and changed only under the node lock, which is why every method that
// changes it takes the *checkpoint.Locked. Every other part of the driver asks it who holds a
// device and keeps no index of its own. mu lets readers outside the node lock see it.
type holdings struct {
	n *node

	mu     sync.Mutex
	claims map[types.UID]*checkpoint.Claim // every record of this boot, either state
	owner  map[string]types.UID            // device UUID -> claim holding it (admin access holds nothing)
	// shares are the claims holding a share of a device that allows multiple allocations
	// (sharing.go), by device UUID; a device is in owner or in shares, never in both.
	shares map[string]map[types.UID]bool
	// opaque are the records this plugin cannot read at all (foreign.go): while there is one,
	// every device counts as held.
	opaque map[types.UID]bool
	// completed counts the PrepareCompleted entries of claims, for the gauge, so that keeping
	// it current costs nothing per prepare however many claims are prepared.
	completed int
	// inflight are the claims whose two-phase (dynamic-MIG) preparation this instance is at,
	// so that their PrepareStarted records are not taken for abandoned ones. Node lock.
	inflight map[types.UID]bool
	// settled is closed, and replaced, each time this instance leaves a two-phase preparation
	// (preparing off), whether it completed or was undone: a prepare waiting for another's
	// (startingError) tries again then. Node lock.
	settled chan struct{}
}

func newHoldings(n *node) *holdings {
	return &holdings{
		n:        n,
		claims:   map[types.UID]*checkpoint.Claim{},
		owner:    map[string]types.UID{},
		shares:   map[string]map[types.UID]bool{},
		opaque:   map[types.UID]bool{},
		inflight: map[types.UID]bool{},
		settled:  make(chan struct{}),
	}
}

// withLock runs fn with the node lock held and the index up to date (lock). It is how a
// prepare, an unprepare and the garbage collection touch the node's shared state: checkpoint
// records, CDI specs, the GPUs' sharing settings, MPS daemons and MIG instances are changed only
// by functions that take the *checkpoint.Locked that only a hold gives, so that a decision and
// every side effect that follows from it happen in one hold, which the other instance of a
// rolling update sees whole or not at all.
func (h *holdings) withLock(ctx context.Context, fn func(l *checkpoint.Locked) error) error {
	l, err := h.lock(ctx)
	if err != nil {
		return err
	}
	defer l.Unlock()
	return fn(l)
}

// lock takes the node lock and brings the index up to date if another process wrote to the
// checkpoint since this one last held the lock. While the lock is held, the index is exactly
// what the directory holds: either nobody else wrote since this process's last hold (whose
// writes the index has), or the directory has just been read. Decisions are taken against it
// without reading records again.
func (h *holdings) lock(ctx context.Context) (*checkpoint.Locked, error) {
	l, err := h.n.opts.State.LockContext(ctx)
	if err != nil {
		return nil, err
	}
	if !l.Changed() {
		return l, nil
	}
	if uids, ok := l.Changes(); ok {
		// The lock file names the records the others changed: read those, not the directory.
		if err := h.refresh(ctx, l, uids); err != nil {
			l.NotSeen()
			l.Unlock()
			return nil, fmt.Errorf("reading checkpoint: %w", err)
		}
		return l, nil
	}
	loaded, err := l.Reload(ctx)
	if err != nil {
		l.NotSeen()
		l.Unlock()
		return nil, fmt.Errorf("reading checkpoint: %w", err)
	}
	h.reportCorrupt(ctx, loaded.Corrupt)
	h.reindex(l, loaded.Claims)
	return l, nil
}

// refresh brings the index entries of uids up to date from their records; a corrupt one is
// reported and treated as absent, as Load does.
func (h *holdings) refresh(ctx context.Context, l *checkpoint.Locked, uids []string) error {
	for _, uid := range uids {
		c, found, err := l.Get(uid)
		var bad *checkpoint.Corrupt
		switch {
		case errors.As(err, &bad):
			h.reportCorrupt(ctx, []checkpoint.Corrupt{*bad})
			h.unindex(l, types.UID(uid))
		case err != nil:
			return err
		case found:
			h.index(l, &c)
		default:
			h.unindex(l, types.UID(uid))
		}
	}
	return nil
}

func (h *holdings) reportCorrupt(ctx context.Context, bad []checkpoint.Corrupt) {
	for _, c := range bad {
		h.n.opts.Metrics.CheckpointErrors.WithLabelValues("corrupt").Inc()
		klog.FromContext(ctx).Error(c.Err, "Checkpoint record is unreadable and was moved aside; its claim, if still in use, is prepared again when the kubelet asks", "path", c.Path, "movedTo", c.MovedTo)
		h.n.warn("CorruptCheckpoint", fmt.Sprintf("%s: checkpoint record %s was unreadable and moved to %s: %v", h.n.opts.DriverName, c.Path, c.MovedTo, c.Err))
	}
}

// get is the record of one claim, as the index has it; under the node lock (taken with
// lock) that is what is on disk. The copy is the caller's to change.
func (h *holdings) get(uid string) (checkpoint.Claim, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.claims[types.UID(uid)]
	if c == nil {
		return checkpoint.Claim{}, false
	}
	cp := *c
	cp.Devices = stdslices.Clone(c.Devices)
	return cp, true
}

// describe names a claim for an error or a log line.
func (h *holdings) describe(uid types.UID) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.claims[uid]; c != nil {
		return fmt.Sprintf("%s/%s (%s)", c.Namespace, c.Name, uid)
	}
	return string(uid)
}

// prepared returns the UIDs of the PrepareCompleted claims, sorted.
func (h *holdings) prepared() []types.UID {
	h.mu.Lock()
	defer h.mu.Unlock()
	uids := make([]types.UID, 0, h.completed)
	for uid, c := range h.claims {
		if c.State == checkpoint.StatePrepareCompleted {
			uids = append(uids, uid)
		}
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	return uids
}

// all returns copies of the claims of every record, in either state.
func (h *holdings) all() []checkpoint.Claim {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]checkpoint.Claim, 0, len(h.claims))
	for _, c := range h.claims {
		out = append(out, *c)
	}
	return out
}

// others returns the index's entries other than self's. Node lock: they are not to be changed.
func (h *holdings) others(self types.UID) []*checkpoint.Claim {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*checkpoint.Claim, 0, len(h.claims))
	for uid, c := range h.claims {
		if uid != self {
			out = append(out, c)
		}
	}
	return out
}

// ownerKey is what ownership is keyed by: the device's UUID, so that a claim keeps its physical
// device even if that device's name moved; the name for a record without UUID.
func (h *holdings) ownerKey(pd *checkpoint.PreparedDevice) string {
	if pd.MIG != nil {
		// A dynamic-MIG device has no UUID until prepared, and a new one each time.
		return "mig:" + pd.MIG.ParentUUID + "/" + pd.Device
	}
	if pd.UUID != "" {
		return pd.UUID
	}
	if dev, ok := h.n.devices[pd.Device]; ok {
		return dev.UUID
	}
	return "name:" + pd.Device
}

// holder is a claim other than self that stands in the way of preparing pd: for a share, a claim
// holding the device exclusively; for an exclusive device, a claim holding it exclusively or a
// share of it. Shares of one device do not stand in each other's way: the scheduler, which
// alone knows the device's capacity and every allocation, decided that they fit. The result
// is deterministic (the smallest UID) so that errors name the same claim every time. Called
// with the node lock held.
func (h *holdings) holder(pd *checkpoint.PreparedDevice, self types.UID) (types.UID, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := h.ownerKey(pd)
	if other, held := h.owner[key]; held && other != self {
		return other, true
	}
	if pd.ShareID != "" {
		return "", false
	}
	var first types.UID
	for uid := range h.shares[key] {
		if uid != self && (first == "" || uid < first) {
			first = uid
		}
	}
	return first, first != ""
}

// standing is what the holdings say, in one hold of the node lock, about a claim to be
// prepared: its record, the first claim in the way of its devices, and,
// for the steps that check holdings the index does not key (migStep.reserve), every other
// claim. One answer rather than a query per question, so that a prepare asks the holdings
// once per hold.
type standing struct {
	// cur is the claim's record, if found; err is why this plugin may not prepare the claim
	// at all, which comes before anything else.
	cur   checkpoint.Claim
	found bool
	err   error
	// blocker, with the device it holds, is a claim whose preparation was abandoned in the
	// way of the claim's devices, to be rolled back; blockErr names a live one.
	blocker    *checkpoint.Claim
	blockerDev string
	blockErr   error
	// others are the claims other than this one (only if asked for). Not to be changed.
	others []*checkpoint.Claim
}

// lockFor takes the node lock (lock) and answers for rec (standing).
func (h *holdings) lockFor(ctx context.Context, rec *checkpoint.Claim, others bool) (*checkpoint.Locked, standing, error) {
	l, err := h.lock(ctx)
	if err != nil {
		return nil, standing{}, err
	}
	return l, h.standing(l, rec, others), nil
}

// standing answers for rec under the node lock; others: with every other claim.
//
// The record (cur) is the index's, unless this plugin may not prepare the claim: its record is
// not this plugin's, or an opaque record may hold any of its devices (foreign.go). Then the
// devices are looked at in order for a claim other than rec's that holds one of them (holder):
// the first such claim is the blocker if its preparation was abandoned, for the caller to roll
// back, or blockErr names it if it is alive.
func (h *holdings) standing(l *checkpoint.Locked, rec *checkpoint.Claim, others bool) standing {
	var s standing
	h.mu.Lock()
	c := h.claims[types.UID(rec.UID)]
	switch uid, opaque := opaqueOther(h.opaque, types.UID(rec.UID)); {
	case c != nil && c.Foreign != nil:
		s.err = notOwned(c, "prepare")
	case opaque:
		o := h.claims[uid]
		s.err = fmt.Errorf("claim %s/%s: the checkpoint holds the record of claim %s, which this plugin cannot read (apiVersion %s, kind %s: %s), so any device on the node may be that claim's; no claim is prepared here while the record exists",
			rec.Namespace, rec.Name, uid, o.Foreign.APIVersion, o.Foreign.Kind, o.Foreign.Reason)
	case c != nil:
		s.cur, s.found = *c, true
		s.cur.Devices = stdslices.Clone(c.Devices)
	}
	h.mu.Unlock()
	if s.err != nil {
		return s
	}
	for _, pd := range rec.Devices {
		if pd.AdminAccess {
			continue
		}
		other, held := h.holder(&pd, types.UID(rec.UID))
		if !held {
			continue
		}
		oc, _ := h.get(string(other))
		if oc.UID != "" && h.abandoned(l, &oc) {
			s.blocker, s.blockerDev = &oc, pd.Device
			break
		}
		var ocp *checkpoint.Claim
		if oc.UID != "" {
			ocp = &oc
		}
		s.blockErr = fmt.Errorf("device %s is already prepared for claim %s, which %s", pd.Device, h.describe(other), conflict(&pd, ocp))
		break
	}
	if others {
		s.others = h.others(types.UID(rec.UID))
	}
	return s
}

// conflict explains why pd cannot be prepared next to the claim other.
func conflict(pd *checkpoint.PreparedDevice, oc *checkpoint.Claim) string {
	theirs := false
	if oc != nil {
		for _, o := range oc.Devices {
			if o.UUID == pd.UUID && o.ShareID != "" {
				theirs = true
			}
		}
	}
	switch {
	case pd.ShareID != "":
		return "holds it exclusively; a share of it cannot be prepared next to that claim"
	case theirs:
		return "holds a share of it; it cannot also be prepared for exclusive use"
	}
	return "holds it"
}

// sharers are the claims other than self holding a share of the device pd is a share of,
// sorted by UID. Node lock: they are not to be changed.
func (h *holdings) sharers(pd *checkpoint.PreparedDevice, self types.UID) []*checkpoint.Claim {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := h.ownerKey(pd)
	uids := make([]types.UID, 0, len(h.shares[key]))
	for uid := range h.shares[key] {
		if uid != self {
			uids = append(uids, uid)
		}
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	out := make([]*checkpoint.Claim, 0, len(uids))
	for _, uid := range uids {
		if c := h.claims[uid]; c != nil {
			out = append(out, c)
		}
	}
	return out
}

// heldBy returns a claim other than self for which holds is true, or an opaque record other
// than self's, which may hold anything. holds is called with mu held.
func (h *holdings) heldBy(self types.UID, holds func(*checkpoint.Claim) bool) (types.UID, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if uid, ok := opaqueOther(h.opaque, self); ok {
		return uid, true
	}
	for uid, c := range h.claims {
		if uid != self && holds(c) {
			return uid, true
		}
	}
	return "", false
}

// opaqueOther returns an opaque record (one of opaque) other than self's, the same one every
// time; h.mu held.
func opaqueOther(opaque map[types.UID]bool, self types.UID) (types.UID, bool) {
	var first types.UID
	for uid := range opaque {
		if uid != self && (first == "" || uid < first) {
			first = uid
		}
	}
	return first, first != ""
}

// abandoned reports whether c is a PrepareStarted record nobody is working on any more: its
// owner is dead, or it is this instance's and no prepare of this instance is at it (one failed
// without rolling back).
func (h *holdings) abandoned(l *checkpoint.Locked, c *checkpoint.Claim) bool {
	if c.State != checkpoint.StatePrepareStarted || c.Foreign != nil {
		return false
	}
	if c.Owner == h.n.instance {
		return !h.inflight[types.UID(c.UID)]
	}
	return !l.Alive(c.Owner)
}

// preparing marks (on) or unmarks the claim uid as one whose two-phase preparation this
// instance is at.
func (h *holdings) preparing(_ *checkpoint.Locked, uid types.UID, on bool) {
	switch {
	case on:
		h.inflight[uid] = true
	case h.inflight[uid]:
		delete(h.inflight, uid)
		close(h.settled)
		h.settled = make(chan struct{})
	}
}

// settledAfter is closed when this instance next leaves a two-phase preparation (preparing).
// Taken under the node lock, it misses none that ends after what the caller saw.
func (h *holdings) settledAfter(_ *checkpoint.Locked) <-chan struct{} {
	return h.settled
}

// errUnprepared is commit's answer for a two-phase prepare whose record was unprepared or
// rolled back while its instance worked without the lock.
var errUnprepared = errors.New("the claim was unprepared while its MIG instances were being created or its MPS daemon started")

// commit is this instance coming back, under the node lock, to the two-phase preparation of
// rec it left (preparing), to publish done, rec's PrepareCompleted record. It returns the lock
// held, whatever the error (nil only if the lock could not be taken), for the caller to finish
// or undo in the same hold: errUnprepared if the record is no longer rec's PrepareStarted one of
// this instance, the cancellation if ctx was cancelled, or the failure to write. The lock is
// taken without ctx's cancellation: what was made must be cleaned up even when the kubelet
// gave up.
func (h *holdings) commit(ctx context.Context, rec, done *checkpoint.Claim) (*checkpoint.Locked, error) {
	l, err := h.lock(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	h.preparing(l, types.UID(rec.UID), false)
	cur, found := h.get(rec.UID)
	if !found || cur.State != checkpoint.StatePrepareStarted || cur.Owner != h.n.instance {
		return l, errUnprepared
	}
	if err := ctx.Err(); err != nil {
		return l, fmt.Errorf("prepare cancelled before it was published: %w", context.Cause(ctx))
	}
	if err := h.put(l, done); err != nil {
		return l, fmt.Errorf("checkpoint: %w", err)
	}
	return l, nil
}

// put writes c's record and indexes it.
func (h *holdings) put(l *checkpoint.Locked, c *checkpoint.Claim) error {
	if err := l.Put(*c); err != nil {
		h.n.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return err
	}
	h.index(l, c)
	return nil
}

// publish renames the record st staged into place, makes rec that record and indexes it; a
// PrepareStarted record is one whose two-phase preparation this instance is at (preparing).
func (h *holdings) publish(l *checkpoint.Locked, rec *checkpoint.Claim, st *checkpoint.Staged) error {
	if err := l.PutStaged(st); err != nil {
		h.n.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return err
	}
	*rec = st.Claim()
	h.index(l, rec)
	if rec.State == checkpoint.StatePrepareStarted {
		h.preparing(l, types.UID(rec.UID), true)
	}
	return nil
}

// remove deletes uid's record and its entry.
func (h *holdings) remove(l *checkpoint.Locked, uid string) error {
	if err := l.Delete(uid); err != nil {
		h.n.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return err
	}
	h.unindex(l, types.UID(uid))
	return nil
}

// reindex replaces the index with claims, the records of the whole directory.
func (h *holdings) reindex(l *checkpoint.Locked, claims []checkpoint.Claim) {
	h.mu.Lock()
	h.claims = make(map[types.UID]*checkpoint.Claim, len(claims))
	h.owner = make(map[string]types.UID, len(claims))
	h.shares = map[string]map[types.UID]bool{}
	h.opaque = map[types.UID]bool{}
	h.completed = 0
	h.mu.Unlock()
	for i := range claims {
		h.index(l, &claims[i])
	}
}

// index records c in the index, replacing what it said about c before.
func (h *holdings) index(_ *checkpoint.Locked, c *checkpoint.Claim) {
	cp := *c
	uid := types.UID(c.UID)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unindexLocked(uid)
	h.claims[uid] = &cp
	if cp.State == checkpoint.StatePrepareCompleted {
		h.completed++
	}
	if cp.Foreign != nil && cp.Foreign.Opaque {
		h.opaque[uid] = true
	}
	for i := range cp.Devices {
		pd := &cp.Devices[i]
		switch {
		case pd.AdminAccess:
		case pd.ShareID != "":
			k := h.ownerKey(pd)
			if h.shares[k] == nil {
				h.shares[k] = map[types.UID]bool{}
			}
			h.shares[k][uid] = true
		default:
			h.owner[h.ownerKey(pd)] = uid
		}
	}
	h.n.opts.Metrics.PreparedClaims.Set(float64(h.completed))
}

func (h *holdings) unindex(_ *checkpoint.Locked, uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unindexLocked(uid)
	h.n.opts.Metrics.PreparedClaims.Set(float64(h.completed))
}

func (h *holdings) unindexLocked(uid types.UID) {
	if c := h.claims[uid]; c != nil {
		if c.State == checkpoint.StatePrepareCompleted {
			h.completed--
		}
		for i := range c.Devices {
			k := h.ownerKey(&c.Devices[i])
			if h.owner[k] == uid {
				delete(h.owner, k)
			}
			if held := h.shares[k]; held[uid] {
				delete(held, uid)
				if len(held) == 0 {
					delete(h.shares, k)
				}
			}
		}
	}
	delete(h.claims, uid)
	delete(h.opaque, uid)
}
