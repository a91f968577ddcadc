// Package driver implements the kubeletplugin.DRAPlugin of accel-dra: it decides which devices a
// claim gets on this node, writes one CDI spec per claim and records every step in the
// checkpoint so that a restart or reboot loses nothing and prepares nothing twice.
package driver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	stdslices "slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/metrics"
	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// Options configure a Driver.
type Options struct {
	// DriverName is the DRA driver name, e.g. gpu.accel-dra.io.
	DriverName string
	// NodeName is this node; it is also the name of the node's pool.
	NodeName string
	// Inventory is what the backend found on this node.
	Inventory *device.Inventory
	CDI       *cdi.Writer
	// CommonEdits are the node-common CDI edits of the kind (driver libraries, binaries, hooks;
	// see pkg/cdi/nvidia and pkg/cdi/ascend), computed at start-up and put in every claim's
	// spec; nil adds none. SetCommonEdits replaces them when the driver changes.
	CommonEdits *specs.ContainerEdits
	State       *checkpoint.Store
	Metrics     *metrics.Plugin
	// Kube is used at start-up to drop claims that no longer exist; nil skips that step.
	Kube kubernetes.Interface
	// ReconcileAPITimeout bounds those start-up questions to the API server together
	// (default DefaultReconcileAPITimeout); the claims not checked by then are kept.
	ReconcileAPITimeout time.Duration
	// Events receives warnings about devices left out of the slices; may be nil.
	Events EventSink
	// MIG creates and destroys MIG instances for dynamic-MIG devices (mig.go); nil when
	// dynamic MIG is off, and then the inventory has no dynamic-MIG devices.
	MIG device.Partitioner
	// ConsumableMemory publishes every GPU for consumable capacity (allowMultipleAllocations
	// and a memory capacity with a request policy; sharing.go, docs/sharing.md).
	ConsumableMemory bool
	// TimeSlicer sets GPU time-slices for GpuConfig.sharing TimeSlicing; nil refuses that
	// strategy (sharing.go).
	TimeSlicer sharing.TimeSlicer
	// MPS runs the MPS control daemons of GpuConfig.sharing MPS; nil refuses that strategy.
	MPS *sharing.MPS
	// ComputeMode sets the compute mode of the GPUs of sharing claims (sharing.go): MPS needs
	// EXCLUSIVE_PROCESS, time-slicing DEFAULT. nil leaves the GPUs' modes as they are.
	ComputeMode device.ComputeModeSetter

	// ConfigTranslator, if set, rewrites each opaque configuration for this driver before it is
	// decoded: the NVIDIA compatibility mode (pkg/compat/nvidia) turns NVIDIA's objects into
	// accel-dra's there. It returns what it does not translate unchanged.
	ConfigTranslator func(raw []byte) ([]byte, error)
	// ConfigApplies, if set, says whether an opaque configuration that names no requests applies
	// to a request whose devices are MIG devices (mig) or not; nil: every such configuration
	// applies to every request. NVIDIA's configuration kinds are for one device type each
	// (pkg/compat/nvidia.AppliesTo).
	ConfigApplies func(raw []byte, mig bool) bool
	// TaintKeys names the taint key of a health cause (the part after "<driver>/") where it is
	// not the cause itself: the NVIDIA compatibility mode uses NVIDIA's keys (TaintKey).
	TaintKeys map[health.Cause]string
	// Attributes, if set, gives devices attributes beyond their own: the NVIDIA compatibility
	// mode's names and values (slices.WithAttributes).
	Attributes slices.AttributeFunc
}

// EventSink is the part of an event recorder the driver needs, so tests need no apiserver.
type EventSink interface {
	Warning(reason, message string)
}

// Driver is the node plugin's claim logic. It is safe for concurrent use and for running next to
// another instance of itself on the same node (a rolling update with surge): the kubelet
// plugin helper's serialisation is off, and instead everything a claim changes on the node
// (checkpoint records, CDI specs, the GPUs' sharing settings, MPS daemons, MIG instances) is
// changed only under the checkpoint's node-wide lock (withLock), one hold per prepare and per
// unprepare, against the records on disk. What needs no lock (planning, encoding the record,
// building the spec) is done before the hold, so that the hold costs little and claims on
// different devices prepare mostly in parallel.
type Driver struct {
	opts    Options
	kind    device.Kind
	devices map[string]*device.Device
	// publishable are the devices that passed validation; only they can be prepared.
	publishable map[string]bool
	// edits are the node-common CDI edits every spec written now gets (Options.CommonEdits,
	// then SetCommonEdits).
	edits atomic.Pointer[specs.ContainerEdits]

	// claimLocks serialise this instance's work on one claim (the kubelet may retry a claim
	// while a first call is still running) without serialising different claims.
	claimLocks [64]sync.Mutex

	// instance names this process in PrepareStarted records; its liveness is a flock the
	// checkpoint holds (checkpoint.Locked.Register).
	instance        string
	releaseInstance func()

	// The fields below are an index of the checkpoint directory, not a second truth: they are
	// rebuilt from disk under the node lock whenever another process wrote there (Changed), and
	// changed only under the node lock. mu lets readers outside the node lock see them.
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

	// health is nil unless EnableHealth turned device health on (health.go).
	health *healthState
	// gcSince is when the garbage collection first found each record droppable (gc.go);
	// only the collection's goroutine uses it.
	gcSince map[types.UID]time.Time

	// hook, if set (tests only), is called at the points where a prepare or an unprepare runs
	// without the node lock, so that a test can run another instance's call right there.
	hook func(point string)
}

// at calls the test hook for point.
func (d *Driver) at(point string) {
	if d.hook != nil {
		d.hook(point)
	}
}

// New builds a Driver and the ResourceSlice content for its inventory. Devices that fail
// validation, and devices the backend could not enumerate (reason "enumeration"), are logged,
// counted and reported as events, and left out.
func New(ctx context.Context, opts Options) (*Driver, error) {
	if opts.DriverName == "" || opts.NodeName == "" || opts.Inventory == nil || opts.CDI == nil || opts.State == nil || opts.Metrics == nil {
		return nil, errors.New("driver: DriverName, NodeName, Inventory, CDI, State and Metrics are required")
	}
	logger := klog.FromContext(ctx)
	d := &Driver{
		opts:        opts,
		kind:        opts.Inventory.Kind,
		devices:     opts.Inventory.Lookup(),
		publishable: map[string]bool{},
		claims:      map[types.UID]*checkpoint.Claim{},
		owner:       map[string]types.UID{},
		inflight:    map[types.UID]bool{},
		shares:      map[string]map[types.UID]bool{},
		gcSince:     map[types.UID]time.Time{},
		opaque:      map[types.UID]bool{},
		instance:    newInstanceID(),
	}
	d.edits.Store(opts.CommonEdits)
	built := slices.Build(opts.Inventory, opts.NodeName, slices.WithAttributes(opts.Attributes))
	for _, name := range built.Published {
		d.publishable[name] = true
	}
	reasons := map[string]float64{}
	// Devices the backend found but could not read are reported like devices that fail
	// validation, under their own reason: the operator sees the same event and metric for
	// "this node has fewer devices than it should", with the query that failed.
	for _, f := range opts.Inventory.Failed {
		logger.Error(f.Err, "Leaving device out of the ResourceSlices: enumerating it failed", "device", f.String())
		reasons["enumeration"]++
		if opts.Events != nil {
			opts.Events.Warning("InvalidDevice", fmt.Sprintf("%s: %s left out of ResourceSlices: enumerating it failed: %v", opts.DriverName, f, f.Err))
		}
	}
	for _, r := range built.Rejected {
		logger.Error(r.Err, "Leaving device out of the ResourceSlices", "device", r.Device, "reason", r.Reason)
		reasons[r.Reason]++
		if opts.Events != nil {
			opts.Events.Warning("InvalidDevice", fmt.Sprintf("%s: device %s left out of ResourceSlices: %v", opts.DriverName, r.Device, r.Err))
		}
	}
	opts.Metrics.RejectedDevices.Reset()
	for reason, n := range reasons {
		opts.Metrics.RejectedDevices.WithLabelValues(reason).Set(n)
	}
	// An attribute left out costs the device only selectors on that attribute, so it is a
	// warning of its own (InvalidDeviceAttribute) rather than a rejected device.
	omitted := map[string]float64{}
	for _, o := range built.Omitted {
		logger.Error(o.Err, "Publishing device without an attribute whose value cannot be represented", "device", o.Device, "attribute", o.Attribute)
		omitted[string(o.Attribute)]++
		if opts.Events != nil {
			opts.Events.Warning("InvalidDeviceAttribute", fmt.Sprintf("%s: device %s published without attribute %s: %v", opts.DriverName, o.Device, o.Attribute, o.Err))
		}
	}
	opts.Metrics.OmittedAttributes.Reset()
	for attr, n := range omitted {
		opts.Metrics.OmittedAttributes.WithLabelValues(attr).Set(n)
	}
	opts.Metrics.PublishedDevices.Set(float64(len(built.Published)))
	info := make([][]string, 0, len(built.Published))
	for _, name := range built.Published {
		if dev := d.devices[name]; dev != nil {
			info = append(info, metrics.DeviceInfoOf(opts.NodeName, *dev))
		}
	}
	opts.Metrics.SetDevices(info)
	logger.Info("Devices found", "driver", opts.DriverName, "published", len(built.Published), "rejected", len(built.Rejected), "failed", len(opts.Inventory.Failed))
	l, err := opts.State.Lock()
	if err != nil {
		return nil, err
	}
	d.releaseInstance, err = l.Register(d.instance)
	// The index is still empty: this hold must not count as having seen the directory, so
	// that the first decision reads it (Reconcile, which runs before serving, does anyway).
	l.NotSeen()
	l.Unlock()
	if err != nil {
		return nil, err
	}
	logger.V(2).Info("Registered plugin instance", "instance", d.instance)
	return d, nil
}

// newInstanceID is unique per process and start: the PID alone repeats across containers.
func newInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%d-%x", os.Getpid(), b)
}

// Close gives up this instance's registration, as its death would: another instance may then
// roll back what it left half-prepared.
func (d *Driver) Close() {
	if d.releaseInstance != nil {
		d.releaseInstance()
		d.releaseInstance = nil
	}
}

// Resources is what the kubelet plugin helper should publish. It is built anew on each call
// (the build is deterministic) rather than kept: the helper holds its own copy, and a second
// one would double the plugin's largest allocation on nodes with many devices.
func (d *Driver) Resources() resourceslice.DriverResources {
	opts := append(d.sliceOptions(), d.shareOptions()...)
	return slices.Build(d.opts.Inventory, d.opts.NodeName, append(opts, slices.WithAttributes(d.opts.Attributes))...).Resources
}

// HealthyResources is what a driver with opts publishes while all its devices are healthy:
// Resources without health taints, from the fields of opts that shape the slices (Inventory,
// NodeName, ConsumableMemory, Attributes) and nothing else. The template generator (pkg/nodeplugin,
// GenerateSlices) builds a node group's seed with it, so that a seed is made by the code that
// makes the node's slices.
func HealthyResources(opts Options) resourceslice.DriverResources {
	return slices.Build(opts.Inventory, opts.NodeName, append(shareOptions(&opts), slices.WithAttributes(opts.Attributes))...).Resources
}

// PreparedClaims returns the UIDs of the claims prepared on this node (by any instance) as this
// instance last saw the checkpoint, sorted.
func (d *Driver) PreparedClaims() []types.UID {
	d.mu.Lock()
	defer d.mu.Unlock()
	uids := make([]types.UID, 0, d.completed)
	for uid, c := range d.claims {
		if c.State == checkpoint.StatePrepareCompleted {
			uids = append(uids, uid)
		}
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	return uids
}

func (d *Driver) claimLock(uid types.UID) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return &d.claimLocks[h.Sum32()%uint32(len(d.claimLocks))]
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		start := time.Now()
		devs, err := d.prepareClaim(ctx, claim)
		outcome := "success"
		if err != nil {
			outcome = "error"
			klog.FromContext(ctx).Error(err, "Prepare failed", "claim", klog.KObj(claim))
		}
		d.opts.Metrics.PrepareSeconds.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
		result[claim.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devs}
	}
	return result, nil
}

func (d *Driver) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	lock := d.claimLock(claim.UID)
	lock.Lock()
	defer lock.Unlock()

	rec, err := d.plan(claim)
	if err != nil {
		return nil, err
	}
	// What can be done without the node lock is done before it: the record is encoded and
	// written to a temporary file, the CDI spec built and validated. Under the lock they cost a
	// rename each.
	done := *rec
	done.State, done.Owner = checkpoint.StatePrepareCompleted, ""
	twoPhase := hasDynamicMIG(rec)
	var spec *specs.Spec
	edits := d.edits.Load()
	if twoPhase {
		// Dynamic MIG: creating the instances is slow and cannot be redone from the record
		// alone, so the first hold announces it (PrepareStarted) and a second one completes it
		// (mig.go); the spec names the instances, so it is built once they exist.
		done.State, done.Owner = checkpoint.StatePrepareStarted, d.instance
	} else if spec, err = d.buildSpec(&done); err != nil {
		return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
	}
	st, err := d.opts.State.Stage(done)
	if err != nil {
		d.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return nil, fmt.Errorf("claim %s: checkpoint: %w", klog.KObj(claim), err)
	}
	defer st.Discard()

	d.at("prepare:unlocked")
	var answer *checkpoint.Claim
	err = d.withLock(ctx, func(l *checkpoint.Locked) error {
		// The kubelet cancels a prepare when the pod starts terminating and then sends the
		// unprepare, possibly to the other instance of a rolling update, which may have run it
		// already. A cancelled prepare must not publish: nobody would unprepare it.
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("claim %s: prepare cancelled before it was published: %w", klog.KObj(claim), context.Cause(ctx))
		}
		existing, err := d.reserve(ctx, l, rec, st)
		switch {
		case err != nil:
			return err
		case existing != nil:
			answer = existing
			return nil
		case twoPhase:
			return nil
		}
		if d.edits.Load() != edits {
			// SetCommonEdits swapped the driver's files since the spec was built.
			if spec, err = d.buildSpec(rec); err != nil {
				d.undo(ctx, l, rec)
				return fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
			}
		}
		if err := d.complete(ctx, l, rec, spec); err != nil {
			return fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
		}
		answer = rec
		return nil
	})
	if err != nil {
		return nil, err
	}
	if answer == nil {
		if err := d.prepareMIG(ctx, rec); err != nil {
			return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
		}
		answer = rec
	}
	klog.FromContext(ctx).V(2).Info("Prepared claim", "claim", klog.KObj(claim), "devices", len(answer.Devices))
	return toKubelet(answer), nil
}

// complete does, under the node lock and right after rec's record was published, what a
// prepare sets up on the node: the claim's sharing settings and its CDI spec. If either fails,
// everything is undone in the same hold, record included, so that a failed prepare leaves
// nothing and reserves nothing.
func (d *Driver) complete(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim, spec *specs.Spec) error {
	if err := d.applySharing(ctx, rec); err != nil {
		// applySharing has put back what it could; the undo must not try again and keep the
		// record for a GPU that refuses both.
		undone := *rec
		undone.Sharing = nil
		d.undo(ctx, l, &undone)
		return err
	}
	if err := d.opts.CDI.Write(rec.UID, spec); err != nil {
		d.undo(ctx, l, rec)
		return fmt.Errorf("CDI spec: %w", err)
	}
	return nil
}

// undo forgets rec after a failed prepare, under the node lock; what cannot be undone is
// logged, the prepare's own error is what the kubelet sees.
func (d *Driver) undo(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim) {
	delete(d.inflight, types.UID(rec.UID))
	if err := d.forget(ctx, l, rec); err != nil {
		klog.FromContext(ctx).Error(err, "Undoing a failed prepare", "claim", klog.KRef(rec.Namespace, rec.Name))
	}
}

// plan checks a claim's allocation against this node and resolves its configuration, without
// side effects.
func (d *Driver) plan(claim *resourceapi.ResourceClaim) (*checkpoint.Claim, error) {
	ref := klog.KObj(claim).String()
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s is not allocated", ref)
	}
	rec := &checkpoint.Claim{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name, State: checkpoint.StatePrepareStarted}
	var requests []string
	// migRequests are the requests whose devices are MIG devices (ConfigApplies).
	migRequests := map[string]bool{}
	firstOfRequest := map[string]bool{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.opts.DriverName {
			continue
		}
		if r.Pool != d.opts.NodeName {
			return nil, fmt.Errorf("claim %s: device %s/%s is allocated from pool %q, not from this node's pool %q", ref, r.Pool, r.Device, r.Pool, d.opts.NodeName)
		}
		if _, ok := d.devices[r.Device]; !ok {
			return nil, fmt.Errorf("claim %s: device %s is not on node %s", ref, r.Device, d.opts.NodeName)
		}
		if !d.publishable[r.Device] {
			return nil, fmt.Errorf("claim %s: device %s on node %s is not published (it failed validation) and cannot be prepared", ref, r.Device, d.opts.NodeName)
		}
		dev := d.devices[r.Device]
		rec.Devices = append(rec.Devices, checkpoint.PreparedDevice{
			Request:      r.Request,
			Pool:         r.Pool,
			Device:       r.Device,
			CDIDeviceIDs: cdi.ResultIDs(d.kind, string(claim.UID), r.Request, r.Device, !firstOfRequest[resourceclaim.BaseRequestRef(r.Request)]),
			UUID:         dev.UUID,
			Nodes:        stdslices.Clone(dev.Nodes),
			AdminAccess:  r.AdminAccess != nil && *r.AdminAccess,
		})
		if dev.MIG != nil && dev.MIG.Dynamic {
			rec.Devices[len(rec.Devices)-1].MIG = migIntent(dev)
		}
		share(&rec.Devices[len(rec.Devices)-1], &r)
		firstOfRequest[resourceclaim.BaseRequestRef(r.Request)] = true
		requests = append(requests, r.Request)
		migRequests[r.Request] = migRequests[r.Request] || dev.MIG != nil
	}
	env, share, err := d.resolveConfig(ref, claim.Status.Allocation.Devices.Config, requests, migRequests)
	if err != nil {
		return nil, err
	}
	if rec.Sharing, err = d.planSharing(ref, rec, share); err != nil {
		return nil, err
	}
	rec.Env = append(append(env, memoryLimitEnv(rec.Devices)...), d.sharingEnv(rec)...)
	return rec, nil
}

// resolveConfig finds the effective opaque configuration of each request: class configs first,
// then claim configs, the later one winning. One CDI spec per claim carries one environment,
// so requests of one claim that resolve to different settings are refused rather than given a
// container environment that would be wrong for one of them.
func (d *Driver) resolveConfig(ref string, configs []resourceapi.DeviceAllocationConfiguration, requests []string, migRequests map[string]bool) ([]string, *configapi.Sharing, error) {
	ordered := append([]resourceapi.DeviceAllocationConfiguration(nil), configs...)
	sort.SliceStable(ordered, func(i, j int) bool {
		return ordered[i].Source == resourceapi.AllocationConfigSourceClass && ordered[j].Source != resourceapi.AllocationConfigSourceClass
	})
	var env []string
	var envFrom string
	var share *configapi.Sharing
	for _, req := range stdslices.Compact(stdslices.Sorted(stdslices.Values(requests))) {
		var raws [][]byte
		for _, c := range ordered {
			if c.Opaque == nil || c.Opaque.Driver != d.opts.DriverName || !appliesTo(c.Requests, req) {
				continue
			}
			raw := c.Opaque.Parameters.Raw
			if len(c.Requests) == 0 && d.opts.ConfigApplies != nil && !d.opts.ConfigApplies(raw, migRequests[req]) {
				continue
			}
			if d.opts.ConfigTranslator != nil {
				var err error
				if raw, err = d.opts.ConfigTranslator(raw); err != nil {
					// The position is the one configapi.Resolve would name, class entries first.
					return nil, nil, fmt.Errorf("claim %s: request %s: invalid configuration for driver %s: config[%d]: %w", ref, req, d.opts.DriverName, len(raws), err)
				}
			}
			raws = append(raws, raw)
		}
		cfg, err := configapi.Resolve(d.kind, raws)
		if err != nil {
			return nil, nil, fmt.Errorf("claim %s: request %s: invalid configuration for driver %s: %w", ref, req, d.opts.DriverName, err)
		}
		e, sh := cfg.Env(), sharingOf(cfg)
		if envFrom == "" {
			env, share, envFrom = e, sh, req
			continue
		}
		if strings.Join(e, "\n") != strings.Join(env, "\n") || !sameSharing(sh, share) {
			return nil, nil, fmt.Errorf("claim %s: requests %s and %s resolve to different configurations; one claim's devices share one container environment, so put them in separate claims", ref, envFrom, req)
		}
	}
	return env, share, nil
}

// appliesTo reports whether a config naming requests covers request req. A config that names
// a request also covers its subrequests ("req/sub").
func appliesTo(names []string, req string) bool {
	if len(names) == 0 {
		return true
	}
	for _, n := range names {
		if n == req || n == resourceclaim.BaseRequestRef(req) {
			return true
		}
	}
	return false
}

// reserve decides, under the node lock, whether this instance may prepare rec, and publishes
// the decision as the record st staged. This is the driver's last line of defence against two
// workloads sharing a device, so it decides against what is on disk (the index, which the lock
// brings up to date), not against what this process remembers. If the claim is already
// prepared it returns the record instead (the kubelet asks again after its own restart, or asks
// the other instance of a rolling update).
func (d *Driver) reserve(ctx context.Context, l *checkpoint.Locked, rec *checkpoint.Claim, st *checkpoint.Staged) (*checkpoint.Claim, error) {
	ref := klog.KRef(rec.Namespace, rec.Name).String()
	if err := d.notOwnedRefusal(rec); err != nil {
		return nil, err
	}
	cur, found := d.indexed(rec.UID)
	if found {
		switch {
		case cur.State == checkpoint.StatePrepareCompleted:
			return d.restore(ctx, l, &cur)
		case cur.Owner != d.instance && l.Alive(cur.Owner):
			return nil, fmt.Errorf("claim %s is being prepared by another instance of the plugin (%s); try again when it is done", ref, cur.Owner)
		}
		// Half-done by an instance that died or by an earlier attempt of this one: start over,
		// destroying the MIG instances it recorded.
		if err := d.releaseMIG(ctx, &cur); err != nil {
			return nil, fmt.Errorf("claim %s: %w", ref, err)
		}
	}

	for _, pd := range rec.Devices {
		if pd.AdminAccess {
			continue
		}
		// A device may have several holders (shares); each abandoned one is rolled back and
		// the next looked at, until a live one refuses or none is left.
		for {
			other, held := d.holder(&pd, types.UID(rec.UID))
			if !held {
				break
			}
			oc, _ := d.indexed(string(other))
			if oc.UID != "" && d.abandoned(l, &oc) {
				klog.FromContext(ctx).Info("Rolling back a claim whose preparation was abandoned, to free its device", "claim", klog.KRef(oc.Namespace, oc.Name), "owner", oc.Owner, "device", pd.Device)
				if err := d.forget(ctx, l, &oc); err != nil {
					return nil, err
				}
				continue
			}
			var ocp *checkpoint.Claim
			if oc.UID != "" {
				ocp = &oc
			}
			return nil, fmt.Errorf("claim %s: device %s is already prepared for claim %s, which %s", ref, pd.Device, d.describe(other), conflict(&pd, ocp))
		}
	}
	if err := d.sharingConflict(ref, rec); err != nil {
		return nil, err
	}
	// Partitions of a MIG-mode GPU overlap without sharing a device name.
	if err := d.migConflict(ctx, l, rec); err != nil {
		return nil, fmt.Errorf("claim %s: %w", ref, err)
	}

	if err := l.PutStaged(st); err != nil {
		d.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return nil, fmt.Errorf("claim %s: checkpoint: %w", ref, err)
	}
	*rec = st.Claim()
	d.index(rec)
	if rec.State == checkpoint.StatePrepareStarted {
		d.inflight[types.UID(rec.UID)] = true
	}
	return nil, nil
}

// abandoned reports whether c is a PrepareStarted record nobody is working on any more: its
// owner is dead, or it is this instance's and no prepare of this instance is at it (one failed
// without rolling back). Called with the node lock held.
func (d *Driver) abandoned(l *checkpoint.Locked, c *checkpoint.Claim) bool {
	if c.State != checkpoint.StatePrepareStarted || c.Foreign != nil {
		return false
	}
	if c.Owner == d.instance {
		return !d.inflight[types.UID(c.UID)]
	}
	return !l.Alive(c.Owner)
}

// restore answers a prepare of a claim that is already prepared, after checking that its devices
// are still the ones it got. Only a CDI spec lost on a wiped tmpfs is written again; it is
// written under the lock so that an unprepare by the other instance cannot slip in between.
func (d *Driver) restore(ctx context.Context, l *checkpoint.Locked, cur *checkpoint.Claim) (*checkpoint.Claim, error) {
	ref := klog.KRef(cur.Namespace, cur.Name)
	if err := d.verifyIdentity(ctx, l, cur); err != nil {
		return nil, err
	}
	if !d.opts.CDI.Exists(cur.UID) {
		if err := d.writeSpec(ctx, cur); err != nil {
			return nil, fmt.Errorf("claim %s: re-creating CDI spec: %w", ref, err)
		}
	}
	d.ensureSharing(ctx, cur)
	return cur, nil
}

// verifyIdentity refuses a record whose devices are no longer the devices it was prepared with:
// a device name that now has another UUID or another /dev/nvidiaN (or, for a MIG device, other
// nvidia-caps nodes) is another device, and handing it to the claim would give the container a
// GPU that another claim may hold. A record written before identities were recorded
// (checkpoint v1) gets them from the inventory and is rewritten.
//
// A GPU's DRM nodes are not its identity (device.Node.DRM): they come and go with the
// nvidia-drm module, so a record prepared without them (by a release that ran where the module
// was not loaded, or before it was) meets the same GPU with them. Such a record takes the
// GPU's nodes as they are now, and so does the claim's CDI spec, rewritten before the record
// so that the two never disagree on disk: a container of the claim started from now on (the
// kubelet restarting one, with the CDI device IDs it got at the first prepare, which stay) gets
// what a claim prepared now gets, and a running container keeps the nodes the runtime made for
// it. If the spec cannot be written, both stay as they were (the old spec still names the same
// GPU) and the next start or prepare tries again. A dynamic-MIG record that holds its parent's
// DRM nodes (a plugin before MIG devices lost them wrote it) loses them the same way.
//
// c's devices are replaced, never changed in place: the caller's copy may share them with the
// index, which must keep matching the disk.
func (d *Driver) verifyIdentity(ctx context.Context, l *checkpoint.Locked, c *checkpoint.Claim) error {
	logger := klog.FromContext(ctx)
	was := c.Devices
	c.Devices = stdslices.Clone(c.Devices)
	migrated, respec, v1 := false, false, false
	for i := range c.Devices {
		pd := &c.Devices[i]
		dev, ok := d.devices[pd.Device]
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("claim %s/%s (%s): device %s (UUID %s) was prepared but is no longer on node %s", c.Namespace, c.Name, c.UID, pd.Device, pd.UUID, d.opts.NodeName)
		case pd.MIG != nil:
			if err = d.verifyMIG(ctx, c, pd); err == nil && stdslices.ContainsFunc(pd.Nodes, device.Node.DRM) {
				logger.Info("MIG device's record holds its GPU's DRM nodes, which MIG devices do not get; updating the record and CDI spec", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device, "nodes", nodePaths(pd.Nodes))
				pd.Nodes, migrated, respec = device.WithoutDRM(pd.Nodes), true, true
			}
		case pd.UUID == "":
			pd.UUID, pd.Nodes, migrated, v1 = dev.UUID, stdslices.Clone(dev.Nodes), true, true
		case pd.UUID != dev.UUID && stdslices.Contains(dev.FormerUUIDs, pd.UUID) && stdslices.EqualFunc(device.WithoutDRM(pd.Nodes), device.WithoutDRM(dev.Nodes), device.Node.Same):
			// The same nodes, so the same device, which an earlier release named by another UUID.
			logger.Info("Prepared device's UUID was corrected by the backend since the claim was prepared; updating the claim's record", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device, "uuid", pd.UUID, "now", dev.UUID)
			pd.UUID, migrated = dev.UUID, true
		case pd.UUID != dev.UUID || !stdslices.EqualFunc(device.WithoutDRM(pd.Nodes), device.WithoutDRM(dev.Nodes), device.Node.Same):
			err = fmt.Errorf("claim %s/%s (%s): device %s was prepared as UUID %s (nodes %s) but is now UUID %s (nodes %s); refusing to give the claim a different device: delete its pod so that the claim is allocated again",
				c.Namespace, c.Name, c.UID, pd.Device, pd.UUID, nodePaths(pd.Nodes), dev.UUID, nodePaths(dev.Nodes))
		case !stdslices.EqualFunc(pd.Nodes, dev.Nodes, device.Node.Same):
			logger.Info("GPU's DRM nodes changed since the claim was prepared (nvidia-drm loaded or unloaded); updating the claim's record and CDI spec", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device, "uuid", pd.UUID, "nodes", nodePaths(pd.Nodes), "now", nodePaths(dev.Nodes))
			pd.Nodes, migrated, respec = stdslices.Clone(dev.Nodes), true, true
		}
		if err != nil {
			c.Devices = was
			d.opts.Metrics.CheckpointErrors.WithLabelValues("identity").Inc()
			logger.Error(err, "Prepared device changed identity", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device)
			if d.opts.Events != nil {
				d.opts.Events.Warning("DeviceIdentityChanged", fmt.Sprintf("%s: %v", d.opts.DriverName, err))
			}
			return err
		}
	}
	if respec {
		if err := d.writeSpec(ctx, c); err != nil {
			logger.Error(err, "Cannot rewrite the CDI spec of a claim whose GPUs' DRM nodes changed; keeping its record and spec as they were", "claim", klog.KRef(c.Namespace, c.Name))
			c.Devices = was
			return nil
		}
	}
	if migrated {
		if err := l.Put(*c); err != nil {
			d.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
			err = fmt.Errorf("claim %s/%s: checkpoint: %w", c.Namespace, c.Name, err)
			if v1 {
				return err
			}
			// The spec has the GPUs' nodes as they are now and the record the ones it had: the
			// same GPUs, which the next start or prepare brings together again. Refusing the
			// claim for it would take away its spec.
			logger.Error(err, "Cannot record a claim's GPUs' changed DRM nodes; its CDI spec has them", "claim", klog.KRef(c.Namespace, c.Name))
			c.Devices = was
			return nil
		}
		d.index(c)
	}
	return nil
}

func nodePaths(nodes []device.Node) string {
	paths := make([]string, 0, len(nodes))
	for _, n := range nodes {
		paths = append(paths, n.Path)
	}
	return "[" + strings.Join(paths, " ") + "]"
}

func (d *Driver) describe(uid types.UID) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.claims[uid]; c != nil {
		return fmt.Sprintf("%s/%s (%s)", c.Namespace, c.Name, uid)
	}
	return string(uid)
}

// withLock runs fn with the node lock held and the index up to date (lock). It is how a
// prepare, an unprepare and the garbage collection touch the node's shared state: checkpoint
// records, CDI specs, the GPUs' sharing settings, MPS daemons and MIG instances are changed only
// by functions that take the *checkpoint.Locked that only a hold gives, so that a decision and
// every side effect that follows from it happen in one hold, which the other instance of a
// rolling update sees whole or not at all.
func (d *Driver) withLock(ctx context.Context, fn func(l *checkpoint.Locked) error) error {
	l, err := d.lock(ctx)
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
func (d *Driver) lock(ctx context.Context) (*checkpoint.Locked, error) {
	l, err := d.opts.State.LockContext(ctx)
	if err != nil {
		return nil, err
	}
	if !l.Changed() {
		return l, nil
	}
	if uids, ok := l.Changes(); ok {
		// The lock file names the records the others changed: read those, not the directory.
		if err := d.refresh(ctx, l, uids); err != nil {
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
	d.reportCorrupt(ctx, loaded.Corrupt)
	d.reindex(loaded.Claims)
	return l, nil
}

// refresh brings the index entries of uids up to date from their records; a corrupt one is
// reported and treated as absent, as Load does.
func (d *Driver) refresh(ctx context.Context, l *checkpoint.Locked, uids []string) error {
	for _, uid := range uids {
		c, found, err := l.Get(uid)
		var bad *checkpoint.Corrupt
		switch {
		case errors.As(err, &bad):
			d.reportCorrupt(ctx, []checkpoint.Corrupt{*bad})
			d.unindex(types.UID(uid))
		case err != nil:
			return err
		case found:
			d.index(&c)
		default:
			d.unindex(types.UID(uid))
		}
	}
	return nil
}

// indexed is the record of one claim, as the index has it; under the node lock (taken with
// lock) that is what is on disk. The copy is the caller's to change.
func (d *Driver) indexed(uid string) (checkpoint.Claim, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.claims[types.UID(uid)]
	if c == nil {
		return checkpoint.Claim{}, false
	}
	cp := *c
	cp.Devices = stdslices.Clone(c.Devices)
	return cp, true
}

func (d *Driver) reportCorrupt(ctx context.Context, bad []checkpoint.Corrupt) {
	for _, c := range bad {
		d.opts.Metrics.CheckpointErrors.WithLabelValues("corrupt").Inc()
		klog.FromContext(ctx).Error(c.Err, "Checkpoint record is unreadable and was moved aside; its claim, if still in use, is prepared again when the kubelet asks", "path", c.Path, "movedTo", c.MovedTo)
		if d.opts.Events != nil {
			d.opts.Events.Warning("CorruptCheckpoint", fmt.Sprintf("%s: checkpoint record %s was unreadable and moved to %s: %v", d.opts.DriverName, c.Path, c.MovedTo, c.Err))
		}
	}
}

// ownerKey is what ownership is keyed by: the device's UUID, so that a claim keeps its physical
// device even if that device's name moved; the name for a record without UUID.
func (d *Driver) ownerKey(pd *checkpoint.PreparedDevice) string {
	if pd.MIG != nil {
		// A dynamic-MIG device has no UUID until prepared, and a new one each time.
		return "mig:" + pd.MIG.ParentUUID + "/" + pd.Device
	}
	if pd.UUID != "" {
		return pd.UUID
	}
	if dev, ok := d.devices[pd.Device]; ok {
		return dev.UUID
	}
	return "name:" + pd.Device
}

func (d *Driver) reindex(claims []checkpoint.Claim) {
	d.mu.Lock()
	d.claims = make(map[types.UID]*checkpoint.Claim, len(claims))
	d.owner = make(map[string]types.UID, len(claims))
	d.shares = map[string]map[types.UID]bool{}
	d.opaque = map[types.UID]bool{}
	d.completed = 0
	d.mu.Unlock()
	for i := range claims {
		d.index(&claims[i])
	}
}

// index records c in the index, replacing what it said about c before.
func (d *Driver) index(c *checkpoint.Claim) {
	cp := *c
	uid := types.UID(c.UID)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unindexLocked(uid)
	d.claims[uid] = &cp
	if cp.State == checkpoint.StatePrepareCompleted {
		d.completed++
	}
	if cp.Foreign != nil && cp.Foreign.Opaque {
		d.opaque[uid] = true
	}
	for i := range cp.Devices {
		pd := &cp.Devices[i]
		switch {
		case pd.AdminAccess:
		case pd.ShareID != "":
			k := d.ownerKey(pd)
			if d.shares[k] == nil {
				d.shares[k] = map[types.UID]bool{}
			}
			d.shares[k][uid] = true
		default:
			d.owner[d.ownerKey(pd)] = uid
		}
	}
	d.opts.Metrics.PreparedClaims.Set(float64(d.completed))
}

func (d *Driver) unindex(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unindexLocked(uid)
	d.opts.Metrics.PreparedClaims.Set(float64(d.completed))
}

func (d *Driver) unindexLocked(uid types.UID) {
	if c := d.claims[uid]; c != nil {
		if c.State == checkpoint.StatePrepareCompleted {
			d.completed--
		}
		for i := range c.Devices {
			k := d.ownerKey(&c.Devices[i])
			if d.owner[k] == uid {
				delete(d.owner, k)
			}
			if held := d.shares[k]; held[uid] {
				delete(held, uid)
				if len(held) == 0 {
					delete(d.shares, k)
				}
			}
		}
	}
	delete(d.claims, uid)
	delete(d.opaque, uid)
}

// writeSpec builds and writes rec's CDI spec. Called with the node lock held.
func (d *Driver) writeSpec(ctx context.Context, rec *checkpoint.Claim) error {
	spec, err := d.buildSpec(d.withMIGModes(ctx, rec))
	if err != nil {
		return err
	}
	if err := d.opts.CDI.Write(rec.UID, spec); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	return nil
}

// buildSpec builds and validates rec's CDI spec; it touches nothing, so a prepare does it before
// taking the node lock.
func (d *Driver) buildSpec(rec *checkpoint.Claim) (*specs.Spec, error) {
	var requests []cdi.Request
	index := map[string]int{}
	for _, pd := range rec.Devices {
		dev, ok := d.devices[pd.Device]
		if !ok {
			return nil, fmt.Errorf("device %s is no longer on node %s", pd.Device, d.opts.NodeName)
		}
		i, ok := index[pd.Request]
		if !ok {
			i = len(requests)
			index[pd.Request] = i
			requests = append(requests, cdi.Request{Name: pd.Request})
		}
		requests[i].Devices = append(requests[i].Devices, specDevice(dev, &pd))
	}
	control, err := d.controlNodes()
	if err != nil {
		return nil, fmt.Errorf("CDI spec: control device nodes: %w", err)
	}
	spec, err := d.opts.CDI.Build(cdi.Claim{
		UID: rec.UID, Requests: requests, Common: d.edits.Load(),
		Control: control, Env: rec.Env, Mounts: d.sharingMounts(rec),
	})
	if err != nil {
		return nil, fmt.Errorf("CDI spec: %w", err)
	}
	return spec, nil
}

// SetCommonEdits makes edits the node-common CDI edits of every spec written from now on, and
// rewrites the spec of every claim prepared on the node (by any instance) with them, so that a
// container started after a driver change gets the new driver's files, whichever claim it
// uses. Each claim is rewritten under its claim lock and the node lock, and only if its spec is
// there: a prepare in flight writes its spec after this swap (its claim lock orders it against
// the rewrite), and a spec that was removed (unprepared, or refused for a changed device) must
// not come back. It returns how many specs it rewrote; an error names the claims it could not
// rewrite, and the others are rewritten anyway.
func (d *Driver) SetCommonEdits(ctx context.Context, edits *specs.ContainerEdits) (int, error) {
	d.edits.Store(edits)
	d.mu.Lock()
	uids := make([]types.UID, 0, len(d.claims))
	for uid := range d.claims {
		uids = append(uids, uid)
	}
	d.mu.Unlock()
	stdslices.Sort(uids)
	n := 0
	var errs []error
	for _, uid := range uids {
		done, err := d.rewriteSpec(ctx, uid)
		if err != nil {
			errs = append(errs, err)
		}
		if done {
			n++
		}
	}
	return n, errors.Join(errs...)
}

func (d *Driver) rewriteSpec(ctx context.Context, uid types.UID) (bool, error) {
	lock := d.claimLock(uid)
	lock.Lock()
	defer lock.Unlock()
	l, err := d.lock(ctx)
	if err != nil {
		return false, err
	}
	defer l.Unlock()
	c, found := d.indexed(string(uid))
	if !found || c.State != checkpoint.StatePrepareCompleted || c.Foreign != nil || !d.opts.CDI.Exists(c.UID) {
		return false, nil
	}
	if err := d.writeSpec(ctx, &c); err != nil {
		return false, fmt.Errorf("claim %s/%s: rewriting CDI spec: %w", c.Namespace, c.Name, err)
	}
	return true, nil
}

// forget removes every trace of a claim, under the lock: what its sharing set on the GPUs and
// the MIG instances it created (if that fails the record stays, so that a retry can finish),
// then its CDI spec and its record, and its entry in the index. Settings of a GPU that is lost
// are left for the GPU's reset or the node's reboot (releaseSharing, releaseMIG): the claim's
// pod must be able to terminate.
func (d *Driver) forget(ctx context.Context, l *checkpoint.Locked, c *checkpoint.Claim) error {
	if err := d.releaseSharing(ctx, c); err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	if err := d.releaseMIG(ctx, c); err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	if err := d.opts.CDI.Remove(c.UID); err != nil {
		return fmt.Errorf("claim %s/%s: removing CDI spec: %w", c.Namespace, c.Name, err)
	}
	if err := l.Delete(c.UID); err != nil {
		d.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return fmt.Errorf("claim %s/%s: deleting checkpoint record: %w", c.Namespace, c.Name, err)
	}
	d.unindex(types.UID(c.UID))
	return nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Whatever is on disk for a claim is
// removed, whichever instance prepared it; a claim with nothing on disk is already unprepared,
// which is success.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	result := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		start := time.Now()
		err := d.unprepareClaim(ctx, c)
		outcome := "success"
		if err != nil {
			outcome = "error"
			klog.FromContext(ctx).Error(err, "Unprepare failed", "claim", c.NamespacedName)
		}
		d.opts.Metrics.UnprepareSeconds.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
		result[c.UID] = err
	}
	return result, nil
}

func (d *Driver) unprepareClaim(ctx context.Context, c kubeletplugin.NamespacedObject) error {
	lock := d.claimLock(c.UID)
	lock.Lock()
	defer lock.Unlock()
	d.at("unprepare:unlocked")
	// One hold for everything: a prepare of the same claim on the other instance (whose
	// context the kubelet cancelled) either published before it, and is undone here whole, or
	// comes after it and publishes nothing.
	err := d.withLock(ctx, func(l *checkpoint.Locked) error {
		cur, found := d.indexed(string(c.UID))
		if !found {
			// Nothing recorded; a spec without record is removed all the same.
			if err := d.opts.CDI.Remove(string(c.UID)); err != nil {
				return fmt.Errorf("claim %s: removing CDI spec: %w", c.NamespacedName, err)
			}
			return nil
		}
		if cur.Foreign != nil {
			// A newer plugin's claim: the kubelet's retry reaches that plugin, which undoes
			// all of it (docs/node-plugin.md). The spec goes, as in every unprepare: the
			// kubelet unprepares only claims no container uses.
			if err := d.opts.CDI.Remove(string(c.UID)); err != nil {
				return fmt.Errorf("claim %s: removing CDI spec: %w", c.NamespacedName, err)
			}
			return notOwned(&cur, "unprepare")
		}
		if cur.State != checkpoint.StatePrepareCompleted && cur.Owner == d.instance {
			// This instance's own two-phase prepare of the claim is at its unlocked step;
			// once the record is gone it finds it so and destroys what it made.
			delete(d.inflight, c.UID)
		}
		return d.forget(ctx, l, &cur)
	})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Unprepared claim", "claim", c.NamespacedName)
	return nil
}

// HandleError implements kubeletplugin.DRAPlugin. Publishing errors are retried by the helper;
// the driver validates devices before publishing, so an invalid slice here is a bug worth a loud
// log rather than an exit that would turn into a crash loop.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	kind := metrics.PublishError
	if errors.As(err, new(*resourceslice.DroppedFieldsError)) {
		kind = metrics.PublishDroppedFields
	}
	d.opts.Metrics.PublishErrors.WithLabelValues(kind).Inc()
	runtime.HandleErrorWithContext(ctx, err, msg)
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin (health.go).
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return d.watchHealth(ctx, reports)
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
