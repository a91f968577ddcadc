package driver

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// Garbage collection (docs/node-plugin.md, "Garbage collection"). The kubelet unprepares a
// claim only after its pod's containers are gone, and sends the unprepare to whichever plugin
// instance serves then; a prepare it cancelled may still publish on the other instance after
// that unprepare ran (the cancellation and the unprepare travel on different connections). Such
// a record holds its GPU for a claim the kubelet has forgotten, so every later claim on it is
// refused. The collection finds them by asking the API server, conservatively: a record goes
// only when its claim is deleted, replaced (another UID), no longer allocated, or allocated
// from another pool, and reserved for no one, and only when that was so on two passes at least
// a grace period apart. The kubelet keeps a claim reserved for its pod until the pod is gone,
// so none of this holds for a claim a pod on the node may still use.

// Defaults of RunGC.
const (
	DefaultGCInterval = time.Minute
	DefaultGCGrace    = 2 * time.Minute
)

// GCReport says what one pass of the collection did, for logs and tests.
type GCReport struct {
	Dropped      []string // records of claims the API server no longer allocates here
	Waiting      []string // records that would go, once their grace period is over
	Orphans      []string // CDI specs without a record
	RolledBack   []string // half-prepared claims of dead instances
	MIGDestroyed []string // MIG instances no record holds
	MPSStopped   []string // MPS daemons no record counts on
}

// RunGC collects garbage every interval until ctx is done; grace is how long a record must
// have looked droppable before it is dropped.
func (d *Driver) RunGC(ctx context.Context, interval, grace time.Duration) {
	if interval <= 0 {
		interval = DefaultGCInterval
	}
	if grace <= 0 {
		grace = DefaultGCGrace
	}
	logger := klog.FromContext(ctx)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rep, err := d.collect(ctx, now, grace)
			if err != nil {
				logger.Error(err, "Garbage collection")
			}
			if len(rep.Dropped)+len(rep.Orphans)+len(rep.RolledBack)+len(rep.MIGDestroyed)+len(rep.MPSStopped) > 0 {
				logger.Info("Garbage collected", "dropped", rep.Dropped, "orphans", rep.Orphans, "rolledBack", rep.RolledBack, "migDestroyed", rep.MIGDestroyed, "mpsStopped", rep.MPSStopped)
			}
		}
	}
}

// collect is one pass of the collection at time now.
func (d *Driver) collect(ctx context.Context, now time.Time, grace time.Duration) (GCReport, error) {
	var rep GCReport
	var completed []checkpoint.Claim
	err := d.withLock(ctx, func(l *checkpoint.Locked) error {
		d.mu.Lock()
		all := make([]checkpoint.Claim, 0, len(d.claims))
		for _, c := range d.claims {
			all = append(all, *c)
		}
		d.mu.Unlock()
		for i := range all {
			c := &all[i]
			switch {
			case c.State == checkpoint.StatePrepareCompleted:
				completed = append(completed, *c)
			case d.abandoned(l, c):
				if err := d.forget(ctx, l, c); err != nil {
					return err
				}
				rep.RolledBack = append(rep.RolledBack, c.UID)
			}
		}
		specs, err := d.opts.CDI.List()
		if err != nil {
			return fmt.Errorf("listing CDI specs: %w", err)
		}
		// Under the lock a spec is written only together with its record, so a spec without
		// one is an orphan (of an older plugin, or of a crash between the two).
		for _, uid := range specs {
			if _, known := d.indexed(uid); known {
				continue
			}
			if err := d.opts.CDI.Remove(uid); err != nil {
				return err
			}
			rep.Orphans = append(rep.Orphans, uid)
		}
		rep.MIGDestroyed = d.sweepMIG(ctx)
		rep.MPSStopped = d.sweepMPS(ctx)
		return nil
	})
	if err != nil || d.opts.Kube == nil {
		return rep, err
	}

	// The API server is asked without the lock; a record is dropped only if it is still the
	// one that was checked.
	seen := map[types.UID]bool{}
	for i := range completed {
		c := &completed[i]
		uid := types.UID(c.UID)
		seen[uid] = true
		why, err := d.unclaimed(ctx, c)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot check whether a prepared claim is still allocated here; keeping it", "claim", klog.KRef(c.Namespace, c.Name), "err", err)
		}
		if why == "" {
			delete(d.gcSince, uid)
			continue
		}
		since, ok := d.gcSince[uid]
		if !ok {
			d.gcSince[uid] = now
			since = now
		}
		if now.Sub(since) < grace {
			rep.Waiting = append(rep.Waiting, c.UID)
			continue
		}
		dropped, err := d.dropIfUnchanged(ctx, c)
		if err != nil {
			return rep, err
		}
		delete(d.gcSince, uid)
		if dropped {
			klog.FromContext(ctx).Info("Dropped a prepared claim that is no longer allocated to this node", "claim", klog.KRef(c.Namespace, c.Name), "reason", why)
			rep.Dropped = append(rep.Dropped, c.UID)
		}
	}
	for uid := range d.gcSince {
		if !seen[uid] {
			delete(d.gcSince, uid)
		}
	}
	return rep, nil
}

// unclaimed says why c's record is garbage, "" if it is not: the claim is deleted or replaced,
// or no longer allocated from this node's pool, and in the last two cases reserved for nobody.
func (d *Driver) unclaimed(ctx context.Context, c *checkpoint.Claim) (string, error) {
	got, err := d.opts.Kube.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "claim deleted", nil
	case err != nil:
		return "", err
	case string(got.UID) != c.UID:
		return "claim replaced by another with the same name", nil
	case len(got.Status.ReservedFor) > 0:
		// Reserved for a pod: whatever its allocation says, a pod may use it.
		return "", nil
	case got.Status.Allocation == nil:
		return "claim no longer allocated", nil
	}
	for _, r := range got.Status.Allocation.Devices.Results {
		if r.Driver == d.opts.DriverName && r.Pool == d.opts.NodeName {
			return "", nil
		}
	}
	return "claim allocated from another pool", nil
}
