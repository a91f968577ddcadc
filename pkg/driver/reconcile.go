package driver

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
}

// Reconcile brings the node back to the checkpoint's truth after a start. It runs before the
// plugin registers with the kubelet, so no prepare can race with it.
//
//   - A record from another boot is dropped: after a reboot no container holds a device and the
//     kubelet prepares again what it still needs, so a clean slate is right.
//   - PrepareStarted means the plugin died mid-prepare; the kubelet got no answer and will ask
//     again, so the partial work is undone.
//   - PrepareCompleted claims are kept, unless the API server says the claim is gone, and a CDI
//     spec that is missing (the CDI dir is often tmpfs) is written again.
//   - A corrupt record has already been moved aside by the store; it is reported, not fatal.
func (d *Driver) Reconcile(ctx context.Context) (*ReconcileReport, error) {
	logger := klog.FromContext(ctx)
	loaded, err := d.opts.State.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading checkpoint: %w", err)
	}
	rep := &ReconcileReport{}
	for _, c := range loaded.Corrupt {
		d.opts.Metrics.CheckpointErrors.WithLabelValues("corrupt").Inc()
		logger.Error(c.Err, "Checkpoint record is unreadable and was moved aside; its claim, if still in use, is prepared again when the kubelet asks", "path", c.Path, "movedTo", c.MovedTo)
		if d.opts.Events != nil {
			d.opts.Events.Warning("CorruptCheckpoint", fmt.Sprintf("%s: checkpoint record %s was unreadable and moved to %s: %v", d.opts.DriverName, c.Path, c.MovedTo, c.Err))
		}
		rep.Corrupt = append(rep.Corrupt, c.Path)
	}
	for _, c := range loaded.Stale {
		if err := d.forget(&c); err != nil {
			return rep, err
		}
		rep.Stale = append(rep.Stale, c.UID)
	}

	for i := range loaded.Claims {
		c := loaded.Claims[i]
		ref := klog.KRef(c.Namespace, c.Name)
		if c.State != checkpoint.StatePrepareCompleted {
			logger.Info("Rolling back half-prepared claim", "claim", ref)
			if err := d.forget(&c); err != nil {
				return rep, err
			}
			rep.RolledBack = append(rep.RolledBack, c.UID)
			continue
		}
		if gone, err := d.claimGone(ctx, &c); err != nil {
			// The claim cannot be checked now; keeping it is safe because the kubelet will
			// unprepare it when its pod goes.
			logger.Error(err, "Cannot check whether claim still exists; keeping it", "claim", ref)
		} else if gone {
			logger.Info("Dropping prepared claim that no longer exists", "claim", ref)
			if err := d.forget(&c); err != nil {
				return rep, err
			}
			rep.Dropped = append(rep.Dropped, c.UID)
			continue
		}
		if err := d.reserve(&c); err != nil {
			logger.Error(err, "Prepared claim conflicts with another; dropping it", "claim", ref)
			if err := d.forget(&c); err != nil {
				return rep, err
			}
			rep.Dropped = append(rep.Dropped, c.UID)
			continue
		}
		if !d.opts.CDI.Exists(c.UID) {
			if err := d.writeSpec(&c); err != nil {
				// The claim stays recorded so its unprepare still cleans up; the kubelet's next
				// prepare of it retries the spec.
				logger.Error(err, "Cannot re-create CDI spec", "claim", ref)
			} else {
				rep.SpecsCreated = append(rep.SpecsCreated, c.UID)
			}
		}
		rep.Restored = append(rep.Restored, c.UID)
	}

	specs, err := d.opts.CDI.List()
	if err != nil {
		return rep, fmt.Errorf("listing CDI specs: %w", err)
	}
	d.mu.Lock()
	var orphans []string
	for _, uid := range specs {
		if _, ok := d.prepared[types.UID(uid)]; !ok {
			orphans = append(orphans, uid)
		}
	}
	d.mu.Unlock()
	for _, uid := range orphans {
		if err := d.opts.CDI.Remove(uid); err != nil {
			return rep, fmt.Errorf("removing orphaned CDI spec of claim %s: %w", uid, err)
		}
		rep.Orphans = append(rep.Orphans, uid)
	}
	d.opts.Metrics.PreparedClaims.Set(float64(len(d.PreparedClaims())))
	logger.Info("Checkpoint reconciled", "restored", len(rep.Restored), "specsCreated", len(rep.SpecsCreated),
		"rolledBack", len(rep.RolledBack), "dropped", len(rep.Dropped), "stale", len(rep.Stale),
		"orphans", len(rep.Orphans), "corrupt", len(rep.Corrupt))
	return rep, nil
}

func (d *Driver) claimGone(ctx context.Context, c *checkpoint.Claim) (bool, error) {
	if d.opts.Kube == nil {
		return false, nil
	}
	got, err := d.opts.Kube.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return string(got.UID) != c.UID, nil
}

// forget removes every trace of a claim: CDI spec, record, in-memory ownership.
func (d *Driver) forget(c *checkpoint.Claim) error {
	if err := d.opts.CDI.Remove(c.UID); err != nil {
		return fmt.Errorf("claim %s/%s: removing CDI spec: %w", c.Namespace, c.Name, err)
	}
	if err := d.opts.State.Delete(c.UID); err != nil {
		return fmt.Errorf("claim %s/%s: deleting checkpoint record: %w", c.Namespace, c.Name, err)
	}
	d.release(types.UID(c.UID))
	return nil
}
