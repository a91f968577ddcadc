package driver

import (
	"context"
	"fmt"
	stdslices "slices"
	"sync/atomic"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// specStep is the step of a claim's preparation that gives its containers the devices: one CDI
// spec per claim, built and validated from the claim's record before the node lock is taken,
// written under it right after the record (and after the sharing settings, so that no
// container starts on a GPU not yet set), and removed, on release, before the record.
type specStep struct {
	n *node
	// edits are the node-common CDI edits every spec written now gets (Options.CommonEdits,
	// then SetCommonEdits).
	edits   atomic.Pointer[specs.ContainerEdits]
	mig     *migStep
	sharing *sharingStep
}

// build builds and validates rec's CDI spec; it touches nothing, so a prepare does it before
// taking the node lock.
func (s *specStep) build(rec *checkpoint.Claim) (*specs.Spec, error) {
	var requests []cdi.Request
	index := map[string]int{}
	for _, pd := range rec.Devices {
		dev, ok := s.n.devices[pd.Device]
		if !ok {
			return nil, fmt.Errorf("device %s is no longer on node %s", pd.Device, s.n.opts.NodeName)
		}
		i, ok := index[pd.Request]
		if !ok {
			i = len(requests)
			index[pd.Request] = i
			requests = append(requests, cdi.Request{Name: pd.Request})
		}
		requests[i].Devices = append(requests[i].Devices, specDevice(dev, &pd))
	}
	control, err := s.controlNodes()
	if err != nil {
		return nil, fmt.Errorf("CDI spec: control device nodes: %w", err)
	}
	var mounts []*specs.Mount
	if rec.Sharing != nil {
		mounts = s.sharing.mounts(rec)
	}
	spec, err := s.n.opts.CDI.Build(cdi.Claim{
		UID: rec.UID, Requests: requests, Common: s.edits.Load(),
		Control: control, Env: rec.Env, Mounts: mounts,
	})
	if err != nil {
		return nil, fmt.Errorf("CDI spec: %w", err)
	}
	return spec, nil
}

// apply writes rec's spec, built before the node lock was taken. Called with the node lock held.
func (s *specStep) apply(rec *checkpoint.Claim, spec *specs.Spec) error {
	if err := s.n.opts.CDI.Write(rec.UID, spec); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	return nil
}

// write builds and writes rec's CDI spec, from its record alone (a spec lost with a wiped CDI
// directory, a driver change). Called with the node lock held.
func (s *specStep) write(ctx context.Context, rec *checkpoint.Claim) error {
	spec, err := s.build(s.mig.withModes(ctx, rec))
	if err != nil {
		return err
	}
	return s.apply(rec, spec)
}

// release removes c's spec. Called with the node lock held.
func (s *specStep) release(c *checkpoint.Claim) error {
	if err := s.n.opts.CDI.Remove(c.UID); err != nil {
		return fmt.Errorf("removing CDI spec: %w", err)
	}
	return nil
}

// controlNodes are the control nodes of a spec written now: looked up again where the backend
// can (Inventory.ResolveControlNodes), so that a module loaded after start-up (nvidia-uvm)
// reaches the claims prepared from then on; otherwise those enumeration found.
func (s *specStep) controlNodes() ([]device.Node, error) {
	if r := s.n.opts.Inventory.ResolveControlNodes; r != nil {
		return r()
	}
	return s.n.opts.Inventory.ControlNodes, nil
}

// specDevice is the device a claim's CDI spec gets for pd: the inventory's, or for a
// dynamic-MIG device the MIG device its preparation created.
func specDevice(dev *device.Device, pd *checkpoint.PreparedDevice) device.Device {
	out := *dev
	if pd.MIG != nil {
		out.UUID = pd.UUID
		out.Nodes = stdslices.Clone(pd.Nodes)
	}
	return out
}
