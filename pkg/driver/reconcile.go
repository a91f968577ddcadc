package driver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// ReconcileReport says what Reconcile did, for logs and tests.
type ReconcileReport struct {
	Restored     []string // claims prepared before and kept
	SpecsCreated []string // of those, claims whose missing CDI spec was re-created
	RolledBack   []string // half-prepared claims undone
	Dropped      []string // claims gone from the API server
	Stale        []string // claims from before a reboot
	Orphans      []string // CDI specs no record knew of
	Corrupt      []string // records moved aside
	// InFlight are half-prepared claims left alone because the instance preparing them (the
	// other pod of a rolling update) is alive.
	InFlight []string
	// Refused are prepared claims whose device is no longer the device they got (another UUID
	// or another /dev/nvidiaN under the same name; DRM nodes that changed are not another
	// device, see verifyIdentity). Their CDI specs are removed so that no new
	// container gets the wrong device; their records stay until the kubelet unprepares them.
	Refused []string
	// MIGDestroyed are the MIG instances (dynamic MIG) that no claim held and were destroyed.
	MIGDestroyed []string
	// MPSStopped are the MPS control daemons (their keys) that no record counted on and were
	// stopped and removed: directories left from before a reboot, or the daemon of a record
	// that was moved aside as corrupt.
	MPSStopped []string
	// Held are claims whose records are in a format this plugin does not fully know (another
	// version of the plugin wrote them): kept as they are, with what they name held (foreign.go).
	Held []string
	// Unchecked are restored claims the API server could not be asked about (it failed, or did
	// not answer within ReconcileAPITimeout); they are kept.
	Unchecked []string
}

// DefaultReconcileAPITimeout bounds Reconcile's questions to the API server together. The
// plugin registers with the kubelet only after Reconcile, so an API server that does not
// answer must not hold the node's devices back for longer; a claim it could not be asked about
// is kept, which is safe (the kubelet unprepares it when its pod goes).
const DefaultReconcileAPITimeout = 30 * time.Second

// apiCallTimeout bounds one GET within that budget, so that a connection that hangs is given up
// and tried again (a new connection may reach a sound API server instance).
const apiCallTimeout = 10 * time.Second

// apiBackoff spaces the retries of a GET that failed in a way that may pass.
var apiBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 5 * time.Second}

// reconciler is start-up reconciliation: it brings the holdings and the node back to the
// checkpoint's truth, through the preparation's steps.
type reconciler struct {
	n    *node
	held *holdings
	prep *preparer
}

// Reconcile brings the node back to the checkpoint's truth after a start. It runs before the
// plugin registers with the kubelet, but during a rolling update the other instance is serving,
// so everything that looks at or changes records is done under the node lock.
//
//   - A record from another boot is dropped: after a reboot no container holds a device and the
//     kubelet prepares again what it still needs, so a clean slate is right.
//   - PrepareStarted means a plugin died mid-prepare, unless its owner is alive (the other
//     instance, preparing it now), in which case it is left alone; the kubelet got no answer
//     from the dead one and will ask again, so the partial work is undone.
//   - PrepareCompleted claims are kept, unless the API server says the claim is gone or its
//     devices changed identity, and a CDI spec that is missing (the CDI dir is often tmpfs) is
//     written again.
//   - A corrupt record has already been moved aside by the store; it is reported, not fatal.
func (d *Driver) Reconcile(ctx context.Context) (*ReconcileReport, error) {
	return d.rec.run(ctx)
}

func (r *reconciler) run(ctx context.Context) (*ReconcileReport, error) {
	logger := klog.FromContext(ctx)
	rep := &ReconcileReport{}
	kept, err := r.locked(ctx, rep)
	if err != nil {
		return rep, err
	}
	if err := r.held.withLock(ctx, func(*checkpoint.Locked) error {
		rep.MIGDestroyed = r.prep.mig.sweep(ctx)
		return nil
	}); err != nil {
		return rep, err
	}

	// Asking the API server is slow; it is done without the lock, and a claim found gone is
	// dropped only if its record is still the one that was checked.
	budget := r.n.opts.ReconcileAPITimeout
	if budget <= 0 {
		budget = DefaultReconcileAPITimeout
	}
	apiCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	if r.n.opts.Kube != nil && len(kept) > 0 {
		logger.Info("Waiting for the API server: checking whether the prepared claims still exist", "claims", len(kept), "timeout", budget)
	}
	for i := range kept {
		c := &kept[i]
		ref := klog.KRef(c.Namespace, c.Name)
		gone, err := r.claimGone(apiCtx, c)
		if err != nil {
			// The claim cannot be checked now; keeping it is safe because the kubelet will
			// unprepare it when its pod goes.
			logger.Error(err, "Cannot check whether claim still exists; keeping it", "claim", ref)
			rep.Unchecked = append(rep.Unchecked, c.UID)
		}
		if gone {
			dropped, err := r.prep.dropIfUnchanged(ctx, c)
			if err != nil {
				return rep, err
			}
			if dropped {
				logger.Info("Dropped prepared claim that no longer exists", "claim", ref)
				rep.Dropped = append(rep.Dropped, c.UID)
				continue
			}
		}
		rep.Restored = append(rep.Restored, c.UID)
	}
	logger.Info("Checkpoint reconciled", "restored", len(rep.Restored), "specsCreated", len(rep.SpecsCreated),
		"rolledBack", len(rep.RolledBack), "dropped", len(rep.Dropped), "stale", len(rep.Stale),
		"orphans", len(rep.Orphans), "corrupt", len(rep.Corrupt), "inFlight", len(rep.InFlight), "refused", len(rep.Refused), "migDestroyed", len(rep.MIGDestroyed), "mpsStopped", len(rep.MPSStopped))
	return rep, nil
}

// locked does the part of Reconcile that needs the node lock, and returns the
// PrepareCompleted claims it kept.
func (r *reconciler) locked(ctx context.Context, rep *ReconcileReport) ([]checkpoint.Claim, error) {
	logger := klog.FromContext(ctx)
	l, err := r.n.opts.State.Lock()
	if err != nil {
		return nil, err
	}
	defer l.Unlock()
	loaded, err := l.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading checkpoint: %w", err)
	}
	l.PruneInstances()
	r.held.reportCorrupt(ctx, loaded.Corrupt)
	for _, c := range loaded.Corrupt {
		rep.Corrupt = append(rep.Corrupt, c.Path)
	}
	r.held.reindex(l, loaded.Claims)
	for i := range loaded.Stale {
		if err := r.prep.forget(ctx, l, &loaded.Stale[i]); err != nil {
			return nil, err
		}
		rep.Stale = append(rep.Stale, loaded.Stale[i].UID)
	}

	var kept []checkpoint.Claim
	for i := range loaded.Claims {
		c := loaded.Claims[i]
		ref := klog.KRef(c.Namespace, c.Name)
		if c.Foreign != nil {
			r.keepNotOwned(ctx, &c, rep)
			continue
		}
		if c.State != checkpoint.StatePrepareCompleted {
			if c.Owner != r.n.instance && l.Alive(c.Owner) {
				logger.Info("Leaving half-prepared claim to the live instance preparing it", "claim", ref, "owner", c.Owner)
				rep.InFlight = append(rep.InFlight, c.UID)
				continue
			}
			logger.Info("Rolling back half-prepared claim", "claim", ref)
			if err := r.prep.forget(ctx, l, &c); err != nil {
				return nil, err
			}
			rep.RolledBack = append(rep.RolledBack, c.UID)
			continue
		}
		if err := r.prep.verifyIdentity(ctx, l, &c); err != nil {
			// Keep the record, so that the device stays held and the kubelet's unprepare cleans
			// up, but take the spec away: it names a device the claim no longer has.
			if rerr := r.n.opts.CDI.Remove(c.UID); rerr != nil {
				return nil, fmt.Errorf("claim %s: removing CDI spec: %w", ref, rerr)
			}
			rep.Refused = append(rep.Refused, c.UID)
			continue
		}
		if !r.n.opts.CDI.Exists(c.UID) {
			if err := r.prep.spec.write(ctx, &c); err != nil {
				// The claim stays recorded so its unprepare still cleans up; the kubelet's next
				// prepare of it retries the spec.
				logger.Error(err, "Cannot re-create CDI spec", "claim", ref)
			} else {
				rep.SpecsCreated = append(rep.SpecsCreated, c.UID)
			}
		}
		r.prep.sharing.ensure(ctx, &c)
		kept = append(kept, c)
	}

	rep.MPSStopped = r.prep.sharing.sweep(ctx)

	specs, err := r.n.opts.CDI.List()
	if err != nil {
		return nil, fmt.Errorf("listing CDI specs: %w", err)
	}
	for _, uid := range specs {
		if _, known := r.held.get(uid); known {
			continue
		}
		if err := r.n.opts.CDI.Remove(uid); err != nil {
			return nil, fmt.Errorf("removing orphaned CDI spec of claim %s: %w", uid, err)
		}
		rep.Orphans = append(rep.Orphans, uid)
	}
	return kept, nil
}

// claimGone asks the API server whether c's claim is gone (or replaced by another of the same
// name). Each GET is bounded by apiCallTimeout and retried with backoff while its failure may
// pass (a timeout, a refused or reset connection, 429, 5xx), until ctx ends; the error then
// names the claim and the last failure.
func (r *reconciler) claimGone(ctx context.Context, c *checkpoint.Claim) (bool, error) {
	if r.n.opts.Kube == nil {
		return false, nil
	}
	var gone bool
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, apiBackoff, func(ctx context.Context) (bool, error) {
		callCtx, cancel := context.WithTimeout(ctx, apiCallTimeout)
		defer cancel()
		got, err := r.n.opts.Kube.ResourceV1().ResourceClaims(c.Namespace).Get(callCtx, c.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone = true
			return true, nil
		case err == nil:
			gone = string(got.UID) != c.UID
			return true, nil
		case transientAPIError(err):
			last = err
			return false, nil
		}
		return false, err
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last attempt: %w)", err, last)
	}
	if err != nil {
		return false, fmt.Errorf("asking the API server whether claim %s/%s still exists: %w", c.Namespace, c.Name, err)
	}
	return gone, nil
}

// transientAPIError tells whether a failed API call may succeed if tried again.
func transientAPIError(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}
