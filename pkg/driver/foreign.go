package driver

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// Records this plugin keeps but does not own (checkpoint.Foreign) are intact records in a format
// it does not fully know, normally written by the newer pod of a rolling update. They are indexed
// like any other record, so that what their known fields name stays held: devices, shares, MIG
// instances, MPS daemons, time-slices and compute modes. Their claims are the writer's, though.
// This plugin does not answer a prepare of one from a record it cannot fully read, and does not
// unprepare one: undoing only what it understands would free the claim's devices while whatever
// else the newer plugin set up for them stays. The kubelet retries both, and reaches the newer
// pod, since it calls the most recently registered instance of a driver; after a downgrade they
// wait for the newer plugin to come back (docs/node-plugin.md, "Checkpoint versions").
//
// An opaque record names nothing this plugin can read, so while one exists every device counts
// as held: no claim is prepared, and nothing a claim might need (a MIG instance, an MPS daemon,
// a GPU's time-slice or compute mode) is destroyed, stopped or put back.

// notOwned is the error for a prepare or unprepare of c, a claim whose record this plugin keeps
// but does not own.
func notOwned(c *checkpoint.Claim, verb string) error {
	return fmt.Errorf("claim %s: its checkpoint record is in a format this plugin does not fully know (apiVersion %s: %s), written by another version of the plugin; this one does not %s it and leaves it to that version, which the kubelet's retry reaches",
		recordRef(c), c.Foreign.APIVersion, c.Foreign.Reason, verb)
}

func recordRef(c *checkpoint.Claim) string {
	if c.Name == "" {
		return c.UID // an opaque record: its UID is all there is
	}
	return fmt.Sprintf("%s/%s (%s)", c.Namespace, c.Name, c.UID)
}

// keepNotOwned is start-up reconciliation's part for a record this plugin does not own: it stays
// as it is, spec included, and is reported.
func (r *reconciler) keepNotOwned(ctx context.Context, c *checkpoint.Claim, rep *ReconcileReport) {
	klog.FromContext(ctx).Info("Keeping the checkpoint record of a claim prepared by another version of the plugin, in a format this one does not fully know; what it names stays held",
		"claim", recordRef(c), "apiVersion", c.Foreign.APIVersion, "kind", c.Foreign.Kind, "reason", c.Foreign.Reason, "opaque", c.Foreign.Opaque)
	r.n.warn("ForeignCheckpoint", fmt.Sprintf("%s: claim %s was prepared by another version of the plugin (checkpoint apiVersion %s) and is left to it", r.n.opts.DriverName, recordRef(c), c.Foreign.APIVersion))
	rep.Held = append(rep.Held, c.UID)
}
