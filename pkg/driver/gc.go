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
	Tombstones   []string // tombstones of unprepares older than tombstoneTTL, by claim UID
	Waiting      []string // records that would go, once their grace period is over
	Orphans      []string // CDI specs without a record
	RolledBack   []string // half-prepared claims of dead instances
	MIGDestroyed []string // MIG instances no record holds
	MPSStopped   []string // MPS daemons no record counts on
}

// collector is the garbage collection: it asks the API server about the holdings' claims and
// releases, through the preparation's steps, those no one will unprepare.
type collector struct {
	n    *node
	held *holdings
	prep *preparer
	// since is when the collection first found each record droppable; only the collection's
	// goroutine uses it.
	since map[types.UID]time.Time
}

// RunGC collects garbage every interval until ctx is done; grace is how long a record must
// have looked droppable before it is dropped.
func (d *Driver) RunGC(ctx context.Context, interval, grace time.Duration) {
	d.gc.run(ctx, interval, grace)
}

func (g *collector) run(ctx context.Context, interval, grace time.Duration) {
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
			rep, err := g.collect(ctx, now, grace)
			if err != nil {
				logger.Error(err, "Garbage collection")
			}
			if len(rep.Dropped)+len(rep.Orphans)+len(rep.RolledBack)+len(rep.MIGDestroyed)+len(rep.MPSStopped) > 0 {
				logger.Info("Garbage collected", "dropped", rep.Dropped, "orphans", rep.Orphans, "rolledBack", rep.RolledBack, "migDestroyed", rep.MIGDestroyed, "mpsStopped", rep.MPSStopped, "tombstones", len(rep.Tombstones))
			}
		}
	}
}

// collect is one pass of the collection at time now.
func (g *collector) collect(ctx context.Context, now time.Time, grace time.Duration) (GCReport, error) {
	var rep GCReport
	var completed []checkpoint.Claim
	err := g.held.withLock(ctx, func(l *checkpoint.Locked) error {
		all := g.held.all()
		for i := range all {
			c := &all[i]
			switch {
			case c.State == checkpoint.StatePrepareCompleted:
				completed = append(completed, *c)
			case g.held.abandoned(l, c):
				if err := g.prep.forget(ctx, l, c); err != nil {
					return err
				}
				rep.RolledBack = append(rep.RolledBack, c.UID)
			}
		}
		specs, err := g.n.opts.CDI.List()
		if err != nil {
			return fmt.Errorf("listing CDI specs: %w", err)
		}
		// Under the lock a spec is written only together with its record, so a spec without
		// one is an orphan (of an older plugin, or of a crash between the two).
		for _, uid := range specs {
			if _, known := g.held.get(uid); known {
				continue
			}
			if err := g.n.opts.CDI.Remove(uid); err != nil {
				return err
			}
			rep.Orphans = append(rep.Orphans, uid)
		}
		// A tombstone that cannot be removed now is removed by a later pass.
		gone, err := g.prep.graves.sweep()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Removing expired tombstones of unprepares")
		}
		rep.Tombstones = gone
		rep.MIGDestroyed = g.prep.mig.sweep(ctx)
		rep.MPSStopped = g.prep.sharing.sweep(ctx)
		return nil
	})
	if err != nil || g.n.opts.Kube == nil {
		return rep, err
	}

	// The API server is asked without the lock; a record is dropped only if it is still the
	// one that was checked.
	seen := map[types.UID]bool{}
	for i := range completed {
		c := &completed[i]
		uid := types.UID(c.UID)
		seen[uid] = true
		why, err := g.unclaimed(ctx, c)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot check whether a prepared claim is still allocated here; keeping it", "claim", klog.KRef(c.Namespace, c.Name), "err", err)
		}
		if why == "" {
			delete(g.since, uid)
			continue
		}
		since, ok := g.since[uid]
		if !ok {
			g.since[uid] = now
			since = now
		}
		if now.Sub(since) < grace {
			rep.Waiting = append(rep.Waiting, c.UID)
			continue
		}
		dropped, err := g.prep.dropIfUnchanged(ctx, c)
		if err != nil {
			return rep, err
		}
		delete(g.since, uid)
		if dropped {
			klog.FromContext(ctx).Info("Dropped a prepared claim that is no longer allocated to this node", "claim", klog.KRef(c.Namespace, c.Name), "reason", why)
			rep.Dropped = append(rep.Dropped, c.UID)
		}
	}
	for uid := range g.since {
		if !seen[uid] {
			delete(g.since, uid)
		}
	}
	return rep, nil
}

// unclaimed says why c's record is garbage, "" if it is not: the claim is deleted or replaced,
// or no longer allocated from this node's pool, and in the last two cases reserved for nobody.
func (g *collector) unclaimed(ctx context.Context, c *checkpoint.Claim) (string, error) {
	got, err := g.n.opts.Kube.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
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
		if r.Driver == g.n.opts.DriverName && r.Pool == g.n.opts.NodeName {
			return "", nil
		}
	}
	return "claim allocated from another pool", nil
}
