// Package driver implements the kubeletplugin.DRAPlugin of accel-dra: it decides which devices a
// claim gets on this node, writes one CDI spec per claim and records every step in the
// checkpoint so that a restart or reboot loses nothing and prepares nothing twice.
//
// Who owns what: the checkpoint directory (pkg/checkpoint) is the truth of who holds what on
// the node; holdings is this process's only index of it, changed only under the node lock;
// preparer owns the sequence of one claim's preparation and release; specStep, sharingStep and
// migStep own what their concern changes on the node (CDI specs; GPU sharing settings and MPS
// daemons; MIG instances); healthState owns the devices' health; collector owns its grace
// periods. docs/node-plugin.md opens with the picture.
package driver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	stdslices "slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

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

// Driver is the node plugin: the kubeletplugin.DRAPlugin the helper calls, and the wiring of
// the parts that do the work (docs/node-plugin.md opens with the picture):
//
//   - holdings (holdings.go): the one index of the checkpoint, who holds which device, kept
//     under the node lock;
//   - preparer (prepare.go, plan.go, identity.go): one claim's preparation and release, in
//     phases: plan, stage, reserve, commit, apply, release;
//   - the spec (specStep, spec.go) and the steps of the other concerns behind the step
//     interface, each in its own file and type, run in each phase for the claims they apply
//     to (stepsFor): sharingStep (sharing.go, consumable-memory shares, time-slicing, MPS),
//     migStep (mig.go, dynamic MIG);
//   - reconciler (reconcile.go, start-up), collector (gc.go, every minute) and healthState
//     (health.go), which talk to the holdings and the steps.
//
// It is safe for concurrent use and for running next to another instance of itself on the
// same node (a rolling update with surge): the kubelet plugin helper's serialisation is off,
// and instead everything a claim changes on the node (checkpoint records, CDI specs, the GPUs'
// sharing settings, MPS daemons, MIG instances) is changed only under the checkpoint's
// node-wide lock (holdings.lock), one hold per prepare and per unprepare, against the
// records on disk. What needs no lock (planning, encoding the record, building the spec) is
// done before the hold, so that the hold costs little and claims on different devices prepare
// mostly in parallel.
type Driver struct {
	opts Options
	node *node

	held    *holdings
	prep    *preparer
	spec    *specStep
	mig     *migStep
	sharing *sharingStep
	rec     *reconciler
	gc      *collector
	// health is nil unless EnableHealth turned device health on (health.go).
	health *healthState

	releaseInstance func()
}

// New builds a Driver and the ResourceSlice content for its inventory. Devices that fail
// validation, and devices the backend could not enumerate (reason "enumeration"), are logged,
// counted and reported as events, and left out.
func New(ctx context.Context, opts Options) (*Driver, error) {
	if opts.DriverName == "" || opts.NodeName == "" || opts.Inventory == nil || opts.CDI == nil || opts.State == nil || opts.Metrics == nil {
		return nil, errors.New("driver: DriverName, NodeName, Inventory, CDI, State and Metrics are required")
	}
	logger := klog.FromContext(ctx)
	d := &Driver{opts: opts}
	n := &node{
		opts:        &d.opts,
		kind:        opts.Inventory.Kind,
		devices:     opts.Inventory.Lookup(),
		publishable: map[string]bool{},
		migParents:  map[string]bool{},
		instance:    newInstanceID(),
		now:         time.Now,
	}
	for _, p := range opts.Inventory.MIGParents {
		n.migParents[p.GPU.Name] = true
	}
	d.wire(n)
	d.spec.edits.Store(opts.CommonEdits)
	built := slices.Build(opts.Inventory, opts.NodeName, slices.WithAttributes(opts.Attributes))
	for _, name := range built.Published {
		n.publishable[name] = true
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
		if dev := n.devices[name]; dev != nil {
			info = append(info, metrics.DeviceInfoOf(opts.NodeName, *dev))
		}
	}
	opts.Metrics.SetDevices(info)
	logger.Info("Devices found", "driver", opts.DriverName, "published", len(built.Published), "rejected", len(built.Rejected), "failed", len(opts.Inventory.Failed))
	l, err := opts.State.Lock()
	if err != nil {
		return nil, err
	}
	d.releaseInstance, err = l.Register(n.instance)
	// The index is still empty: this hold must not count as having seen the directory, so
	// that the first decision reads it (Reconcile, which runs before serving, does anyway).
	l.NotSeen()
	l.Unlock()
	if err != nil {
		return nil, err
	}
	logger.V(2).Info("Registered plugin instance", "instance", n.instance)
	return d, nil
}

// wire makes the driver's parts, each knowing only those it talks to.
func (d *Driver) wire(n *node) {
	d.node = n
	d.held = newHoldings(n)
	d.sharing = &sharingStep{n: n, held: d.held}
	d.mig = &migStep{n: n, held: d.held}
	d.spec = &specStep{n: n, mig: d.mig, sharing: d.sharing}
	d.prep = &preparer{n: n, held: d.held, graves: newTombstones(n), spec: d.spec, mig: d.mig, sharing: d.sharing}
	d.rec = &reconciler{n: n, held: d.held, prep: d.prep}
	d.gc = &collector{n: n, held: d.held, prep: d.prep, since: map[types.UID]time.Time{}}
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
	opts := append(d.health.sliceOptions(), shareOptions(&d.opts)...)
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
	return d.held.prepared()
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	// The prepares began when the call came: a claim unprepared since must not be prepared
	// by this call (tombstones).
	began := d.node.now()
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		start := time.Now()
		devs, err := d.prep.prepare(ctx, claim, began)
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

// SetCommonEdits makes edits the node-common CDI edits of every spec written from now on, and
// rewrites the spec of every claim prepared on the node (by any instance) with them, so that a
// container started after a driver change gets the new driver's files, whichever claim it
// uses. Each claim is rewritten under its claim lock and the node lock, and only if its spec is
// there: a prepare in flight writes its spec after this swap (its claim lock orders it against
// the rewrite), and a spec that was removed (unprepared, or refused for a changed device) must
// not come back. It returns how many specs it rewrote; an error names the claims it could not
// rewrite, and the others are rewritten anyway.
func (d *Driver) SetCommonEdits(ctx context.Context, edits *specs.ContainerEdits) (int, error) {
	d.spec.edits.Store(edits)
	all := d.held.all()
	uids := make([]types.UID, 0, len(all))
	for _, c := range all {
		uids = append(uids, types.UID(c.UID))
	}
	stdslices.Sort(uids)
	n := 0
	var errs []error
	for _, uid := range uids {
		done, err := d.prep.rewriteSpec(ctx, uid)
		if err != nil {
			errs = append(errs, err)
		}
		if done {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Whatever is on disk for a claim is
// removed, whichever instance prepared it; a claim with nothing on disk is already unprepared,
// which is success.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	result := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		start := time.Now()
		err := d.prep.unprepare(ctx, c)
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
	return d.health.watch(ctx, reports)
}
