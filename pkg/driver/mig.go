package driver

import (
	"context"
	"errors"
	"fmt"
	stdslices "slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// Dynamic MIG (docs/mig.md). A claim that gets a dynamic-MIG device has its MIG instance
// created by prepare and destroyed by unprepare, every step recorded in the claim's checkpoint
// record under the node lock:
//
//  1. reserve checks for overlaps and writes PrepareStarted with the device's MIGRecord: parent, profile, placement
//     (the intent), no instance IDs;
//  2. the GPU instance is created and its ID recorded at once;
//  3. the compute instance is created and its ID, the MIG device's UUID and its nodes are
//     recorded at once;
//  4. commit writes PrepareCompleted, and the CDI spec is written after it as for any claim.
//
// A crash anywhere leaves at worst an instance whose ID is not recorded yet. Reconcile rolls
// back the half-prepared claims (destroying the instances they recorded) and then destroys
// every MIG instance on a MIG-mode GPU that no record holds, by recorded ID or, for a record
// whose IDs are not written yet, by placement; an instance a record holds is never destroyed.

// migStep is the step of a claim's preparation for its dynamic-MIG devices: what they hold of
// a MIG-mode GPU, creating their instances (between the two holds of such a prepare),
// destroying them on release, and the sweep of instances no record holds. It knows the claims
// only through the holdings.
type migStep struct {
	n    *node
	held *holdings
}

// migCrash is called between the steps of a MIG preparation; tests set it to simulate a crash
// (kill -9) at that point. Steps: "intent", "gi-created", "gi-recorded", "ci-created",
// "ci-recorded".
// Nil outside tests.
var migCrash func(step string)

// migIntent is the MIGRecord of a dynamic-MIG device before anything is created.
func migIntent(dev *device.Device) *checkpoint.MIGRecord {
	m := dev.MIG
	return &checkpoint.MIGRecord{
		ParentUUID: m.ParentUUID, Profile: m.Profile.Name, ProfileID: m.Profile.ID,
		Start: m.Placement.Start, Size: m.Placement.Size,
	}
}

// migHolding is what a prepared device holds of a MIG-mode GPU: a placement, or (full) all of
// it.
type migHolding struct {
	parent    string
	placement device.MIGPlacement
	full      bool
}

// holding returns what pd holds of a MIG-mode GPU, if anything.
func (m *migStep) holding(pd *checkpoint.PreparedDevice) (migHolding, bool) {
	if pd.MIG != nil {
		return migHolding{parent: pd.MIG.ParentUUID, placement: device.MIGPlacement{Start: pd.MIG.Start, Size: pd.MIG.Size}}, true
	}
	for i := range m.n.opts.Inventory.MIGParents {
		p := &m.n.opts.Inventory.MIGParents[i]
		if p.GPU.Name == pd.Device && !pd.AdminAccess {
			return migHolding{parent: p.GPU.UUID, full: true}, true
		}
	}
	return migHolding{}, false
}

func (h migHolding) overlaps(o migHolding) bool {
	return h.parent == o.parent && (h.full || o.full || h.placement.Overlaps(o.placement))
}

// migOverlap is a claim that holds part of a MIG-mode GPU that another claim needs.
type migOverlap struct {
	claim  *checkpoint.Claim
	device string // the claim's device that overlaps
	parent string // the GPU
}

// reserve is the MIG step's check of rec: the claims other than rec that hold part of a
// MIG-mode GPU that rec needs are in its way, each once (with its first overlapping device).
// Partitions of a MIG-mode GPU overlap without sharing a device name, so the holdings' check
// of the devices does not see them. The scheduler's counters should make any overlap
// impossible; this is the driver's last line of defence, as the holdings' check is for whole
// devices. s has every other claim (stepsFor asks for them).
func (m *migStep) reserve(_ *checkpoint.Locked, ref string, rec *checkpoint.Claim, s *standing) ([]inTheWay, error) {
	var want []migHolding
	for i := range rec.Devices {
		if h, ok := m.holding(&rec.Devices[i]); ok {
			want = append(want, h)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	var out []inTheWay
others:
	for _, oc := range s.others {
		for i := range oc.Devices {
			h, ok := m.holding(&oc.Devices[i])
			if !ok {
				continue
			}
			for _, w := range want {
				if w.overlaps(h) {
					out = append(out, inTheWay{claim: oc, err: fmt.Errorf("claim %s: MIG device %s overlaps what claim %s holds on GPU %s", ref, oc.Devices[i].Device, m.held.describe(types.UID(oc.UID)), h.parent)})
					continue others
				}
			}
		}
	}
	return out, nil
}

// apply: dynamic MIG's instances are made between the two holds of a prepare (create), not in
// one, so stepsFor never gives the MIG step an apply.
func (m *migStep) apply(context.Context, *checkpoint.Locked, *checkpoint.Claim) error { return nil }

// create creates the instances of rec's dynamic-MIG devices, filling in rec (in memory) as
// it goes, and returns the devices whose GPU instance it created. Creating them is slow (NVML),
// so it runs without the node lock, between the two holds of the prepare (prepare.go).
func (m *migStep) create(ctx context.Context, rec *checkpoint.Claim) ([]int, error) {
	if m.n.opts.MIG == nil {
		return nil, errors.New("claim has dynamic-MIG devices but dynamic MIG is not enabled on this node")
	}
	var created []int
	for i := range rec.Devices {
		pd := &rec.Devices[i]
		mr := pd.MIG
		if mr == nil {
			continue
		}
		if migCrash != nil {
			migCrash("intent")
		}
		if err := ctx.Err(); err != nil {
			return created, fmt.Errorf("prepare cancelled: %w", context.Cause(ctx))
		}
		gi, err := m.n.opts.MIG.CreateGI(ctx, mr.ParentUUID, mr.ProfileID, device.MIGPlacement{Start: mr.Start, Size: mr.Size})
		if err != nil {
			return created, fmt.Errorf("device %s: creating GPU instance: %w", pd.Device, err)
		}
		if migCrash != nil {
			migCrash("gi-created")
		}
		mr.GI = &gi
		created = append(created, i)
		in, err := m.n.opts.MIG.CreateCI(ctx, mr.ParentUUID, gi)
		if err != nil {
			return created, fmt.Errorf("device %s: creating compute instance: %w", pd.Device, err)
		}
		if migCrash != nil {
			migCrash("ci-created")
		}
		ci := in.CI
		mr.CI = &ci
		pd.UUID = in.UUID
		pd.Nodes = append(device.WithoutDRM(m.n.devices[pd.Device].Nodes), in.CapNodes...)
		klog.FromContext(ctx).V(2).Info("Created MIG device", "device", pd.Device, "gpu", mr.ParentUUID, "profile", mr.Profile, "start", mr.Start, "gi", gi, "ci", ci, "uuid", in.UUID)
	}
	return created, nil
}

// destroyCreated destroys the GPU instances this prepare created for rec, after its record
// went: each only if it is still the instance made (rec's IDs) and no record holds it. Called
// with the node lock held.
func (m *migStep) destroyCreated(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim, created []int) {
	if len(created) == 0 {
		return
	}
	mine := *rec
	mine.Devices = nil
	for _, i := range created {
		mine.Devices = append(mine.Devices, rec.Devices[i])
	}
	if err := m.release(ctx, l, &mine); err != nil {
		klog.FromContext(ctx).Error(err, "Destroying the MIG instances of a prepare whose claim was unprepared meanwhile; the next sweep destroys them", "claim", klog.KRef(rec.Namespace, rec.Name))
	}
}

// release destroys the MIG instances c's record says it created. An instance is destroyed
// only if it is still the one recorded (GPU instance ID, placement and, once known, UUID) and
// no other record holds it, so that a GPU-instance ID reused by a later claim is never
// destroyed by a stale record. A record whose GPU instance ID was not written yet (a crash
// right after creation) gets the instance at its placement destroyed, unless another record
// holds that placement. An instance on a GPU that cannot be listed (lost) is left: the claim's
// pod must be able to terminate, a lost GPU runs nothing, and once no record holds the
// instance the sweep destroys it when the GPU answers again (a reset or a reboot clears it
// anyway). Called with the node lock held.
func (m *migStep) release(ctx context.Context, _ *checkpoint.Locked, c *checkpoint.Claim) error {
	if m.n.opts.MIG == nil {
		return nil
	}
	var mine []*checkpoint.PreparedDevice
	for i := range c.Devices {
		if c.Devices[i].MIG != nil {
			mine = append(mine, &c.Devices[i])
		}
	}
	if len(mine) == 0 {
		return nil
	}
	list, unreadable, err := m.list(ctx)
	if err != nil {
		return fmt.Errorf("listing MIG instances: %w", err)
	}
	for _, pd := range mine {
		mr := pd.MIG
		if err, bad := unreadable[mr.ParentUUID]; bad {
			klog.FromContext(ctx).Error(err, "Leaving the MIG instance of a claim on a GPU that cannot be listed; it is destroyed when the GPU answers again", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device, "gpu", mr.ParentUUID)
			continue
		}
		for _, in := range list {
			if !recordedAs(pd, in) {
				continue
			}
			if other, held := m.heldBy(in, types.UID(c.UID)); held {
				klog.FromContext(ctx).Info("Not destroying a MIG instance another claim holds", "gi", in.GI, "gpu", in.ParentUUID, "claim", m.held.describe(other))
				continue
			}
			if err := m.n.opts.MIG.DestroyMIG(ctx, mr.ParentUUID, in.GI); err != nil {
				return fmt.Errorf("device %s: destroying MIG instance %d: %w", pd.Device, in.GI, err)
			}
			klog.FromContext(ctx).V(2).Info("Destroyed MIG device", "device", pd.Device, "gpu", mr.ParentUUID, "gi", in.GI, "uuid", in.UUID)
		}
	}
	return nil
}

// list lists the MIG instances of the GPUs that can be read; unreadable are the others, by
// UUID (from the inventory when the GPU cannot tell it), with why. err is a failure to list
// anything at all.
func (m *migStep) list(ctx context.Context) (list []device.MIGInstance, unreadable map[string]error, err error) {
	list, err = m.n.opts.MIG.ListMIG(ctx)
	var failed device.GPUErrors
	if !errors.As(err, &failed) {
		return list, nil, err
	}
	unreadable = map[string]error{}
	for _, g := range failed {
		uuid := g.UUID
		if uuid == "" {
			uuid = m.uuidAt(g.Index)
		}
		klog.FromContext(ctx).Error(g.Err, "Cannot list the MIG instances of a GPU; they are left as they are", "gpu", uuid, "index", g.Index)
		unreadable[uuid] = g.Err
	}
	return list, unreadable, nil
}

// uuidAt is the UUID the inventory has for the whole GPU at NVML index i, "" if none.
func (m *migStep) uuidAt(i int) string {
	for _, p := range m.n.opts.Inventory.MIGParents {
		if p.GPU.Index == i {
			return p.GPU.UUID
		}
	}
	for _, dev := range m.n.opts.Inventory.Devices {
		if dev.Index == i && dev.MIG == nil {
			return dev.UUID
		}
	}
	return ""
}

// recordedAs reports whether instance in is the one pd's record describes.
func recordedAs(pd *checkpoint.PreparedDevice, in device.MIGInstance) bool {
	m := pd.MIG
	if in.ParentUUID != m.ParentUUID || in.Placement.Start != m.Start || in.Placement.Size != m.Size || in.ProfileID != m.ProfileID {
		return false
	}
	if m.GI != nil && in.GI != *m.GI {
		return false
	}
	if m.CI != nil && pd.UUID != "" && in.UUID != "" && in.UUID != pd.UUID {
		return false
	}
	return true
}

// heldBy returns a claim other than except whose record holds instance in.
func (m *migStep) heldBy(in device.MIGInstance, except types.UID) (types.UID, bool) {
	return m.held.heldBy(except, func(c *checkpoint.Claim) bool {
		for i := range c.Devices {
			pd := &c.Devices[i]
			// A static MIG device prepared before dynamic MIG was turned on is held by its UUID.
			if pd.MIG != nil && recordedAs(pd, in) || pd.MIG == nil && in.UUID != "" && pd.UUID == in.UUID {
				return true
			}
		}
		return false
	})
}

// sweep destroys the MIG instances on MIG-mode GPUs that no checkpoint record holds: those
// of preparations that crashed before recording them, of claims unprepared while their GPU
// could not be listed, and any an operator made (in dynamic MIG the plugin owns the MIG layout
// of the GPUs in MIG mode). It runs at start-up, after half-prepared claims were rolled back,
// and in every garbage collection. Nothing it meets is fatal: a GPU that cannot be listed
// (lost) and an instance that cannot be destroyed (NVML_ERROR_IN_USE: a process still runs on
// it) are logged and left for the next sweep, since a plugin that exits over them crash-loops
// and then serves no GPU at all. Called with the node lock held.
func (m *migStep) sweep(ctx context.Context) []string {
	if m.n.opts.MIG == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	list, _, err := m.list(ctx)
	if err != nil {
		logger.Error(err, "Cannot list MIG instances to destroy those no claim holds")
		return nil
	}
	var destroyed []string
	for _, in := range list {
		if _, held := m.heldBy(in, ""); held {
			continue
		}
		if err := m.n.opts.MIG.DestroyMIG(ctx, in.ParentUUID, in.GI); err != nil {
			logger.Error(err, "Cannot destroy a MIG instance that no claim holds; trying again at the next sweep", "gpu", in.ParentUUID, "gi", in.GI, "profile", in.Profile, "start", in.Placement.Start)
			continue
		}
		id := fmt.Sprintf("%s/gi%d(%s@%d)", in.ParentUUID, in.GI, in.Profile, in.Placement.Start)
		logger.Info("Destroyed MIG instance that no claim holds", "gpu", in.ParentUUID, "gi", in.GI, "profile", in.Profile, "start", in.Placement.Start, "uuid", in.UUID)
		destroyed = append(destroyed, id)
	}
	return destroyed
}

// verify checks that the MIG device a prepared claim got still exists as recorded.
func (m *migStep) verify(ctx context.Context, c *checkpoint.Claim, pd *checkpoint.PreparedDevice) error {
	if m.n.opts.MIG == nil {
		return fmt.Errorf("claim %s/%s (%s): device %s is a dynamic-MIG device but dynamic MIG is not enabled on node %s", c.Namespace, c.Name, c.UID, pd.Device, m.n.opts.NodeName)
	}
	if pd.MIG.CI == nil || pd.UUID == "" {
		return fmt.Errorf("claim %s/%s (%s): device %s is recorded as prepared without its MIG instance", c.Namespace, c.Name, c.UID, pd.Device)
	}
	list, unreadable, err := m.list(ctx)
	if err != nil {
		// Not knowing is no evidence of a change: refusing would take a running claim's spec.
		klog.FromContext(ctx).Error(err, "Cannot check that a prepared claim's MIG device still exists; keeping it", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device)
		return nil
	}
	for _, in := range list {
		if recordedAs(pd, in) && in.UUID == pd.UUID {
			return nil
		}
	}
	if _, bad := unreadable[pd.MIG.ParentUUID]; bad {
		klog.FromContext(ctx).Info("Cannot check that a prepared claim's MIG device still exists, its GPU cannot be listed; keeping it", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device, "gpu", pd.MIG.ParentUUID)
		return nil
	}
	return fmt.Errorf("claim %s/%s (%s): MIG device %s (UUID %s, GPU instance %d) no longer exists", c.Namespace, c.Name, c.UID, pd.Device, pd.UUID, *pd.MIG.GI)
}

// withModes returns rec with the modes and groups of its dynamic-MIG devices' nodes, which
// records do not hold (device.Node.FileMode, GID): the GPU's nodes' from the inventory (the
// group NVreg_DeviceFileGID gives /dev/nvidiaN), the /dev/nvidia-caps nodes' modes, which the
// driver prescribes, from the MIG instances as the driver lists them now. A prepare has them
// from the inventory and from creating the instance; a spec written again from a record (a
// wiped CDI directory, a driver change) asks here. A mode or group it cannot learn is left to
// the runtime, which then creates the node with its default. Other devices' specs take their
// nodes from the inventory (specDevice).
func (m *migStep) withModes(ctx context.Context, rec *checkpoint.Claim) *checkpoint.Claim {
	if !stdslices.ContainsFunc(rec.Devices, func(pd checkpoint.PreparedDevice) bool { return pd.MIG != nil }) {
		return rec
	}
	out := *rec
	out.Devices = stdslices.Clone(rec.Devices)
	missing := false
	for i := range out.Devices {
		pd := &out.Devices[i]
		if pd.MIG == nil {
			continue
		}
		pd.Nodes = stdslices.Clone(pd.Nodes)
		if dev, ok := m.n.devices[pd.Device]; ok {
			restoreNodes(pd.Nodes, dev.Nodes)
		}
		for _, n := range pd.Nodes {
			missing = missing || n.FileMode == 0
		}
	}
	if !missing || m.n.opts.MIG == nil {
		return &out
	}
	list, _, err := m.list(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot read the modes of MIG caps nodes; the runtime's default applies", "claim", klog.KRef(rec.Namespace, rec.Name))
	}
	for i := range out.Devices {
		pd := &out.Devices[i]
		if pd.MIG == nil {
			continue
		}
		for _, in := range list {
			if recordedAs(pd, in) {
				restoreNodes(pd.Nodes, in.CapNodes)
			}
		}
	}
	return &out
}

// restoreNodes gives each of nodes that has no mode or group (a record's) those of the same
// node in live.
func restoreNodes(nodes, live []device.Node) {
	for j := range nodes {
		for _, l := range live {
			if !nodes[j].Same(l) {
				continue
			}
			if nodes[j].FileMode == 0 {
				nodes[j].FileMode = l.FileMode
			}
			if nodes[j].GID == 0 {
				nodes[j].GID = l.GID
			}
		}
	}
}
