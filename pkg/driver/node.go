package driver

import (
	"time"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// node is what every part of the driver reads and none changes after New: the options, the
// devices the backend found, which of them passed validation, and this process's instance ID.
type node struct {
	// opts points at Driver.opts: the driver's options, shared by all its parts.
	opts    *Options
	kind    device.Kind
	devices map[string]*device.Device
	// publishable are the devices that passed validation; only they can be prepared.
	publishable map[string]bool
	// migParents are the GPUs in MIG mode given out whole (dynamic MIG), by device name: a
	// claim of one holds every partition of it (migStep.reserve).
	migParents map[string]bool
	// instance names this process in PrepareStarted records; its liveness is a flock the
	// checkpoint holds (checkpoint.Locked.Register).
	instance string
	// now is the wall clock, time.Now but in tests: when a prepare began, when a claim was
	// unprepared (tombstones).
	now func() time.Time
}

// warn sends a warning event, if the driver has somewhere to send it.
func (n *node) warn(reason, message string) {
	if n.opts.Events != nil {
		n.opts.Events.Warning(reason, message)
	}
}
