// Package driver implements the kubeletplugin.DRAPlugin of accel-dra: it decides which devices a
// claim gets on this node, writes one CDI spec per claim and records every step in the
// checkpoint so that a restart or reboot loses nothing and prepares nothing twice.
package driver

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	stdslices "slices"
	"sort"
	"strings"
	"sync"
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
	"github.com/accel-dra/accel-dra/pkg/metrics"
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
	// see pkg/cdi/nvidia and pkg/cdi/ascend), computed once at start-up and put in every
	// claim's spec; nil adds none.
	CommonEdits *specs.ContainerEdits
	State       *checkpoint.Store
	Metrics     *metrics.Plugin
	// Kube is used at start-up to drop claims that no longer exist; nil skips that step.
	Kube kubernetes.Interface
	// Events receives warnings about devices left out of the slices; may be nil.
	Events EventSink
}

// EventSink is the part of an event recorder the driver needs, so tests need no apiserver.
type EventSink interface {
	Warning(reason, message string)
}

// Driver is the node plugin's claim logic. It is safe for concurrent use: the kubelet plugin
// helper runs with serialisation off, because the per-claim work (checkpoint fsyncs, CDI writes)
// is independent between claims and would otherwise cap throughput at one claim per disk sync.
type Driver struct {
	opts    Options
	kind    device.Kind
	devices map[string]*device.Device
	// publishable are the devices that passed validation; only they can be prepared.
	publishable map[string]bool

	// claimLocks serialise work on one claim (the kubelet may retry a claim while a first call
	// is still running) without serialising different claims.
	claimLocks [64]sync.Mutex

	mu       sync.Mutex
	prepared map[types.UID]*checkpoint.Claim
	owner    map[string]types.UID // device name -> claim holding it
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
		prepared:    map[types.UID]*checkpoint.Claim{},
		owner:       map[string]types.UID{},
	}
	built := slices.Build(opts.Inventory, opts.NodeName)
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
	logger.Info("Devices found", "driver", opts.DriverName, "published", len(built.Published), "rejected", len(built.Rejected), "failed", len(opts.Inventory.Failed))
	return d, nil
}

// Resources is what the kubelet plugin helper should publish. It is built anew on each call
// (the build is deterministic) rather than kept: the helper holds its own copy, and a second
// one would double the plugin's largest allocation on nodes with many devices.
func (d *Driver) Resources() resourceslice.DriverResources {
	return slices.Build(d.opts.Inventory, d.opts.NodeName).Resources
}

// PreparedClaims returns the UIDs of the prepared claims, sorted.
func (d *Driver) PreparedClaims() []types.UID {
	d.mu.Lock()
	defer d.mu.Unlock()
	uids := make([]types.UID, 0, len(d.prepared))
	for uid := range d.prepared {
		uids = append(uids, uid)
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

	d.mu.Lock()
	existing := d.prepared[claim.UID]
	d.mu.Unlock()
	if existing != nil && existing.State == checkpoint.StatePrepareCompleted {
		// Idempotent: the kubelet asks again after its own restart. Only a CDI spec lost on a
		// wiped tmpfs is put back; nothing else is written.
		if !d.opts.CDI.Exists(string(claim.UID)) {
			if err := d.writeSpec(existing); err != nil {
				return nil, fmt.Errorf("claim %s: re-creating CDI spec: %w", klog.KObj(claim), err)
			}
		}
		return toKubelet(existing), nil
	}

	rec, err := d.plan(claim)
	if err != nil {
		return nil, err
	}
	if err := d.reserve(rec); err != nil {
		return nil, err
	}
	if err := d.commit(ctx, rec); err != nil {
		d.rollback(ctx, rec)
		return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
	}
	return toKubelet(rec), nil
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
		rec.Devices = append(rec.Devices, checkpoint.PreparedDevice{
			Request:      r.Request,
			Pool:         r.Pool,
			Device:       r.Device,
			CDIDeviceIDs: cdi.ResultIDs(d.kind, string(claim.UID), r.Request, r.Device, !firstOfRequest[resourceclaim.BaseRequestRef(r.Request)]),
		})
		firstOfRequest[resourceclaim.BaseRequestRef(r.Request)] = true
		requests = append(requests, r.Request)
	}
	env, err := d.resolveConfig(ref, claim.Status.Allocation.Devices.Config, requests)
	if err != nil {
		return nil, err
	}
	rec.Env = env
	return rec, nil
}

// resolveConfig finds the effective opaque configuration of each request: class configs first,
// then claim configs, the later one winning. One CDI spec per claim carries one environment,
// so requests of one claim that resolve to different settings are refused rather than given a
// container environment that would be wrong for one of them.
func (d *Driver) resolveConfig(ref string, configs []resourceapi.DeviceAllocationConfiguration, requests []string) ([]string, error) {
	ordered := append([]resourceapi.DeviceAllocationConfiguration(nil), configs...)
	sort.SliceStable(ordered, func(i, j int) bool {
		return ordered[i].Source == resourceapi.AllocationConfigSourceClass && ordered[j].Source != resourceapi.AllocationConfigSourceClass
	})
	var env []string
	var envFrom string
	for _, req := range stdslices.Compact(stdslices.Sorted(stdslices.Values(requests))) {
		var raws [][]byte
		for _, c := range ordered {
			if c.Opaque == nil || c.Opaque.Driver != d.opts.DriverName || !appliesTo(c.Requests, req) {
				continue
			}
			raws = append(raws, c.Opaque.Parameters.Raw)
		}
		cfg, err := configapi.Resolve(d.kind, raws)
		if err != nil {
			return nil, fmt.Errorf("claim %s: request %s: invalid configuration for driver %s: %w", ref, req, d.opts.DriverName, err)
		}
		e := cfg.Env()
		if envFrom == "" {
			env, envFrom = e, req
			continue
		}
		if strings.Join(e, "\n") != strings.Join(env, "\n") {
			return nil, fmt.Errorf("claim %s: requests %s and %s resolve to different configurations; one claim's devices share one container environment, so put them in separate claims", ref, envFrom, req)
		}
	}
	return env, nil
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

// reserve takes the claim's devices in memory, failing if another claim holds one. This is the
// driver's last line of defence against two workloads sharing a device.
func (d *Driver) reserve(rec *checkpoint.Claim) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, pd := range rec.Devices {
		if other, ok := d.owner[pd.Device]; ok && other != types.UID(rec.UID) {
			return fmt.Errorf("claim %s/%s: device %s is already prepared for claim %s", rec.Namespace, rec.Name, pd.Device, d.describe(other))
		}
	}
	for _, pd := range rec.Devices {
		d.owner[pd.Device] = types.UID(rec.UID)
	}
	d.prepared[types.UID(rec.UID)] = rec
	return nil
}

func (d *Driver) describe(uid types.UID) string {
	if c := d.prepared[uid]; c != nil {
		return fmt.Sprintf("%s/%s (%s)", c.Namespace, c.Name, uid)
	}
	return string(uid)
}

// commit makes the preparation durable: the PrepareStarted record first, so that a crash in
// between leaves something the next start can roll back, then the CDI spec, then
// PrepareCompleted.
func (d *Driver) commit(ctx context.Context, rec *checkpoint.Claim) error {
	if err := d.opts.State.Put(*rec); err != nil {
		d.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := d.writeSpec(rec); err != nil {
		return err
	}
	done := *rec
	done.State = checkpoint.StatePrepareCompleted
	if err := d.opts.State.Put(done); err != nil {
		d.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return fmt.Errorf("checkpoint: %w", err)
	}
	d.mu.Lock()
	d.prepared[types.UID(rec.UID)] = &done
	d.opts.Metrics.PreparedClaims.Set(float64(len(d.prepared)))
	d.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Prepared claim", "claim", klog.KRef(rec.Namespace, rec.Name), "devices", len(rec.Devices))
	return nil
}

func (d *Driver) writeSpec(rec *checkpoint.Claim) error {
	var requests []cdi.Request
	index := map[string]int{}
	for _, pd := range rec.Devices {
		dev, ok := d.devices[pd.Device]
		if !ok {
			return fmt.Errorf("device %s is no longer on node %s", pd.Device, d.opts.NodeName)
		}
		i, ok := index[pd.Request]
		if !ok {
			i = len(requests)
			index[pd.Request] = i
			requests = append(requests, cdi.Request{Name: pd.Request})
		}
		requests[i].Devices = append(requests[i].Devices, *dev)
	}
	spec, err := d.opts.CDI.Build(cdi.Claim{
		UID: rec.UID, Requests: requests, Common: d.opts.CommonEdits,
		Control: d.opts.Inventory.ControlNodes, Env: rec.Env,
	})
	if err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	if err := d.opts.CDI.Write(rec.UID, spec); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	return nil
}

// rollback undoes a failed or half-done preparation; every step is idempotent.
func (d *Driver) rollback(ctx context.Context, rec *checkpoint.Claim) {
	logger := klog.FromContext(ctx)
	if err := d.opts.CDI.Remove(rec.UID); err != nil {
		logger.Error(err, "Rollback: removing CDI spec", "claim", klog.KRef(rec.Namespace, rec.Name))
	}
	if err := d.opts.State.Delete(rec.UID); err != nil {
		logger.Error(err, "Rollback: deleting checkpoint record", "claim", klog.KRef(rec.Namespace, rec.Name))
	}
	d.release(types.UID(rec.UID))
}

func (d *Driver) release(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rec := d.prepared[uid]; rec != nil {
		for _, pd := range rec.Devices {
			if d.owner[pd.Device] == uid {
				delete(d.owner, pd.Device)
			}
		}
	}
	delete(d.prepared, uid)
	d.opts.Metrics.PreparedClaims.Set(float64(len(d.prepared)))
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. A claim this driver does not
// know is already unprepared, which is success.
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
	d.mu.Lock()
	_, known := d.prepared[c.UID]
	d.mu.Unlock()
	if !known {
		return nil
	}
	// The spec goes first: once the record is gone nothing would remove a leftover spec.
	if err := d.opts.CDI.Remove(string(c.UID)); err != nil {
		return fmt.Errorf("claim %s: removing CDI spec: %w", c.NamespacedName, err)
	}
	if err := d.opts.State.Delete(string(c.UID)); err != nil {
		d.opts.Metrics.CheckpointErrors.WithLabelValues("write").Inc()
		return fmt.Errorf("claim %s: checkpoint: %w", c.NamespacedName, err)
	}
	d.release(c.UID)
	klog.FromContext(ctx).V(2).Info("Unprepared claim", "claim", c.NamespacedName)
	return nil
}

// HandleError implements kubeletplugin.DRAPlugin. Publishing errors are retried by the helper;
// the driver validates devices before publishing, so an invalid slice here is a bug worth a loud
// log rather than an exit that would turn into a crash loop.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin; device health is not reported yet.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func toKubelet(rec *checkpoint.Claim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(rec.Devices))
	for _, pd := range rec.Devices {
		out = append(out, kubeletplugin.Device{
			Requests:     []string{pd.Request},
			PoolName:     pd.Pool,
			DeviceName:   pd.Device,
			CDIDeviceIDs: append([]string(nil), pd.CDIDeviceIDs...),
		})
	}
	return out
}
