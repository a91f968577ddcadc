package driver

import (
	"context"

	"errors"
	"fmt"
	"maps"
	stdslices "slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// EnvMemoryLimits names, in a claim's CDI spec, the memory share of each device the claim got
// by consumable capacity: "<uuid>=<bytes>[,<uuid>=<bytes>...]", sorted by UUID. Nothing on the
// GPU enforces it by itself (see docs/sharing.md): it tells the workload, and whatever it runs
// (a framework's allocator limit, an MPS client limit), what the scheduler gave it.
const EnvMemoryLimits = "ACCEL_DRA_GPU_MEMORY_LIMITS"

// sharingStep is the step of a claim's preparation for how its GPUs are shared: consumable
// memory shares (planned from the allocation), and GpuConfig.sharing (time-slicing, MPS) set
// on the GPUs under the node lock right after the record is published, and put back on
// release unless another claim still needs it so. It knows the claims only through the
// holdings.
type sharingStep struct {
	n    *node
	held *holdings
	// health, if device health is on (Driver.EnableHealth), tells a lost GPU (lost).
	health *healthState
}

// shareOptions are the slices.Build options of the sharing modes.
func shareOptions(o *Options) []slices.Option {
	if !o.ConsumableMemory {
		return nil
	}
	return []slices.Option{slices.WithConsumableMemory()}
}

// share copies a result's share of a device that allows multiple allocations into pd.
func share(pd *checkpoint.PreparedDevice, r *resourceapi.DeviceRequestAllocationResult) {
	if r.ShareID == nil {
		return
	}
	pd.ShareID = string(*r.ShareID)
	if len(r.ConsumedCapacity) > 0 {
		pd.ConsumedCapacity = make(map[string]resource.Quantity, len(r.ConsumedCapacity))
		for name, q := range r.ConsumedCapacity {
			pd.ConsumedCapacity[string(name)] = q.DeepCopy()
		}
	}
}

// memoryLimitEnv is the EnvMemoryLimits entry of a claim, if any of its devices is a share
// with consumed memory. A device shared twice by one claim (two requests) counts both shares.
func memoryLimitEnv(devs []checkpoint.PreparedDevice) []string {
	limits := map[string]int64{}
	for _, pd := range devs {
		if pd.ShareID == "" {
			continue
		}
		if q, ok := pd.ConsumedCapacity[string(slices.CapacityMemory)]; ok {
			limits[pd.UUID] += q.Value()
		}
	}
	if len(limits) == 0 {
		return nil
	}
	uuids := make([]string, 0, len(limits))
	for u := range limits {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	parts := make([]string, 0, len(uuids))
	for _, u := range uuids {
		parts = append(parts, fmt.Sprintf("%s=%d", u, limits[u]))
	}
	return []string{EnvMemoryLimits + "=" + strings.Join(parts, ",")}
}

// plan is the sharing step's part of planning rec: it checks the claim's sharing
// configuration s against its devices and this plugin and sets what the record keeps, and
// returns what the claim's containers' environment gets from it (EnvMemoryLimits for shares,
// the MPS variables). Errors name the field.
func (sh *sharingStep) plan(ref string, rec *checkpoint.Claim, s *configapi.Sharing) ([]string, error) {
	var err error
	if rec.Sharing, err = sh.planConfig(ref, rec, s); err != nil {
		return nil, err
	}
	return append(memoryLimitEnv(rec.Devices), sh.env(rec)...), nil
}

// planConfig checks a claim's sharing configuration against its devices and this plugin, and
// returns what its record keeps.
func (sh *sharingStep) planConfig(ref string, rec *checkpoint.Claim, s *configapi.Sharing) (*checkpoint.Sharing, error) {
	if s == nil {
		return nil, nil
	}
	for _, pd := range rec.Devices {
		if pd.AdminAccess {
			return nil, fmt.Errorf("claim %s: sharing: device %s is allocated with admin access, which must not change how the GPU is shared by the workloads that hold it; remove sharing from the config of request %s", ref, pd.Device, pd.Request)
		}
	}
	switch s.Strategy {
	case configapi.StrategyTimeSlicing:
		if sh.n.opts.TimeSlicer == nil {
			return nil, fmt.Errorf("claim %s: sharing.strategy: %s is not available on node %s: the plugin has no nvidia-smi to set time-slices with (--nvidia-smi-path)", ref, s.Strategy, sh.n.opts.NodeName)
		}
		return &checkpoint.Sharing{Strategy: string(s.Strategy), Interval: string(s.TimeSlicing.Interval)}, nil
	case configapi.StrategyMPS:
		return sh.planMPS(ref, rec, s.MPS)
	default:
		return nil, fmt.Errorf("claim %s: sharing.strategy: %s is not supported by this version of the plugin (see docs/sharing.md)", ref, s.Strategy)
	}
}

// mibUp is q in MiB, rounded up, as MPS limits are given.
func mibUp(q resource.Quantity) int64 { return (q.Value() + (1<<20 - 1)) >> 20 }

// planMPS checks an MPS config against the claim's devices and turns its limits into what the
// daemon is told: per GPU UUID, in MiB (rounded up).
func (sh *sharingStep) planMPS(ref string, rec *checkpoint.Claim, m *configapi.MPS) (*checkpoint.Sharing, error) {
	if sh.n.opts.MPS == nil {
		return nil, fmt.Errorf("claim %s: sharing.strategy: MPS is not available on node %s: the plugin has no nvidia-cuda-mps-control (--nvidia-mps-control-path)", ref, sh.n.opts.NodeName)
	}
	for _, pd := range rec.Devices {
		if pd.ShareID != "" {
			return sh.planMPSShare(ref, rec, m)
		}
	}
	out := &checkpoint.Sharing{Strategy: string(configapi.StrategyMPS)}
	if m == nil {
		return out, nil
	}
	if m.DefaultActiveThreadPercentage != nil {
		out.ActiveThreadPercentage = *m.DefaultActiveThreadPercentage
	}
	byName := map[string]string{}
	for _, pd := range rec.Devices {
		byName[pd.Device] = pd.UUID
	}
	limits := map[string]int64{}
	if q := m.DefaultPinnedDeviceMemoryLimit; q != nil {
		for _, u := range byName {
			limits[u] = mibUp(*q)
		}
	}
	for _, n := range stdslices.Sorted(maps.Keys(m.DefaultPerDevicePinnedMemoryLimit)) {
		u, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("claim %s: sharing.mps.defaultPerDevicePinnedMemoryLimit[%s]: device %s is not one of the claim's devices", ref, n, n)
		}
		limits[u] = mibUp(m.DefaultPerDevicePinnedMemoryLimit[n])
	}
	if len(limits) > 0 {
		out.PinnedMemoryMiB = limits
	}
	return out, nil
}

// planMPSShare plans MPS for a claim of consumable-memory shares. A GPU in EXCLUSIVE_PROCESS
// mode runs one MPS server, so all MPS shares of a GPU use one daemon, the GPU's (mpsDaemon),
// and a claim's limits cannot be the daemon's: they go to the claim's containers as the MPS
// client variables, which the server applies to each client process (env). The pinned
// memory limit is the claim's share unless the config asks for less; a client reaches one
// daemon, so the claim must hold shares of one GPU only.
func (sh *sharingStep) planMPSShare(ref string, rec *checkpoint.Claim, m *configapi.MPS) (*checkpoint.Sharing, error) {
	var gpu *checkpoint.PreparedDevice
	var shareBytes int64
	for i := range rec.Devices {
		pd := &rec.Devices[i]
		switch {
		case pd.ShareID == "":
			return nil, fmt.Errorf("claim %s: sharing.strategy: MPS on consumable-memory shares needs every device of the claim to be a share, but device %s is allocated whole; put it in a claim of its own", ref, pd.Device)
		case gpu != nil && pd.UUID != gpu.UUID:
			return nil, fmt.Errorf("claim %s: sharing.strategy: MPS on consumable-memory shares serves one GPU per claim (a container reaches one MPS daemon, and each GPU's daemon serves all of its shares), but the claim has shares of devices %s and %s; use one claim per GPU", ref, gpu.Device, pd.Device)
		}
		gpu = pd
		if q, ok := pd.ConsumedCapacity[string(slices.CapacityMemory)]; ok {
			shareBytes += q.Value()
		}
	}
	out := &checkpoint.Sharing{Strategy: string(configapi.StrategyMPS)}
	// Rounded down: the limit must not give the client more than its share.
	limit := shareBytes >> 20
	if m != nil {
		if m.DefaultActiveThreadPercentage != nil {
			out.ActiveThreadPercentage = *m.DefaultActiveThreadPercentage
		}
		check := func(field string, q resource.Quantity) error {
			if shareBytes > 0 && q.Value() > shareBytes {
				return fmt.Errorf("claim %s: sharing.mps.%s: %s is more than the claim's share of device %s (%s of memory); ask for at most the share, or for a larger share", ref, field, q.String(), gpu.Device, resource.NewQuantity(shareBytes, resource.BinarySI).String())
			}
			limit = mibUp(q)
			if shareBytes > 0 {
				limit = min(limit, shareBytes>>20)
			}
			return nil
		}
		if q := m.DefaultPinnedDeviceMemoryLimit; q != nil {
			if err := check("defaultPinnedDeviceMemoryLimit", *q); err != nil {
				return nil, err
			}
		}
		for _, n := range stdslices.Sorted(maps.Keys(m.DefaultPerDevicePinnedMemoryLimit)) {
			if n != gpu.Device {
				return nil, fmt.Errorf("claim %s: sharing.mps.defaultPerDevicePinnedMemoryLimit[%s]: device %s is not one of the claim's devices", ref, n, n)
			}
			if err := check("defaultPerDevicePinnedMemoryLimit["+n+"]", m.DefaultPerDevicePinnedMemoryLimit[n]); err != nil {
				return nil, err
			}
		}
	}
	if limit > 0 {
		out.PinnedMemoryMiB = map[string]int64{gpu.UUID: limit}
	}
	return out, nil
}

// mpsShareGPU is the GPU whose shared MPS daemon serves c, if c is an MPS claim of shares.
func mpsShareGPU(c *checkpoint.Claim) (string, bool) {
	if !isMPS(c) {
		return "", false
	}
	for _, pd := range c.Devices {
		if pd.ShareID != "" {
			return pd.UUID, true
		}
	}
	return "", false
}

// mpsDaemon is the key of the MPS daemon that serves c: its own (its UID), or for shares of a
// GPU the GPU's (its UUID, which no claim UID can be), shared by all MPS shares of that GPU.
func mpsDaemon(c *checkpoint.Claim) string {
	if uuid, ok := mpsShareGPU(c); ok {
		return uuid
	}
	return c.UID
}

// mpsDaemons is the MPS daemon that serves c, if c is an MPS claim, as usedByOther counts it.
func mpsDaemons(c *checkpoint.Claim) []string {
	if !isMPS(c) {
		return nil
	}
	return []string{mpsDaemon(c)}
}

// stopDaemon stops the MPS daemon of c unless another claim is served by it (a GPU's daemon of
// shares, whose last claim stops it). Called with the node lock held, so that no other
// instance starts or counts on the daemon meanwhile.
func (sh *sharingStep) stopDaemon(ctx context.Context, c *checkpoint.Claim) error {
	key := mpsDaemon(c)
	if sh.usedByOther(key, types.UID(c.UID), mpsDaemons) {
		klog.FromContext(ctx).V(2).Info("Leaving the GPU's MPS control daemon to its other shares", "claim", klog.KRef(c.Namespace, c.Name), "daemon", key)
		return nil
	}
	if err := sh.n.opts.MPS.Stop(ctx, key); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Stopped MPS control daemon", "claim", klog.KRef(c.Namespace, c.Name), "daemon", key)
	return nil
}

func isMPS(c *checkpoint.Claim) bool {
	return c.Sharing != nil && c.Sharing.Strategy == string(configapi.StrategyMPS)
}

// gpuUUIDs are the distinct GPUs of c, sorted.
func gpuUUIDs(c *checkpoint.Claim) []string {
	var uuids []string
	for _, pd := range c.Devices {
		if !pd.AdminAccess && pd.UUID != "" && !stdslices.Contains(uuids, pd.UUID) {
			uuids = append(uuids, pd.UUID)
		}
	}
	sort.Strings(uuids)
	return uuids
}

// mpsGPUs are the GPUs of c served by its MPS daemon, if it has one.
func mpsGPUs(c *checkpoint.Claim) []string {
	if !isMPS(c) {
		return nil
	}
	return gpuUUIDs(c)
}

// env is what the claim's sharing adds to its containers' environment: the MPS daemon's
// directories, and for shares the claim's limits as MPS client variables. The pinned memory
// limit names the GPU by ordinal: the GPU's daemon serves that one GPU (CUDA_VISIBLE_DEVICES),
// so it is device 0 of every client.
func (sh *sharingStep) env(rec *checkpoint.Claim) []string {
	if !isMPS(rec) || sh.n.opts.MPS == nil {
		return nil
	}
	env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + sharing.PipeDir, "CUDA_MPS_LOG_DIRECTORY=" + sharing.LogDir}
	uuid, shared := mpsShareGPU(rec)
	if !shared {
		return env
	}
	if mib, ok := rec.Sharing.PinnedMemoryMiB[uuid]; ok {
		env = append(env, fmt.Sprintf("%s=0=%dM", EnvMPSPinnedMemoryLimit, mib))
	}
	if p := rec.Sharing.ActiveThreadPercentage; p > 0 {
		env = append(env, fmt.Sprintf("%s=%d", EnvMPSActiveThreadPercentage, p))
	}
	return env
}

// The MPS client variables a share's containers get. A client may lower them, never raise
// them above what its server allows; the GPU's daemon has no limits of its own (docs/sharing.md).
const (
	EnvMPSPinnedMemoryLimit      = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSActiveThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
)

// mounts are the claim's MPS directories, at sharing.PipeDir and sharing.LogDir in the
// container (where NVIDIA's driver mounts them: a container of any user reaches them, not
// through the host's /var/lib/kubelet), and the daemon's tmpfs as the container's /dev/shm (it
// replaces the runtime's own /dev/shm mount).
func (sh *sharingStep) mounts(rec *checkpoint.Claim) []*specs.Mount {
	if !isMPS(rec) || sh.n.opts.MPS == nil {
		return nil
	}
	key := mpsDaemon(rec)
	pipe, log := sh.n.opts.MPS.Dirs(key)
	return []*specs.Mount{
		{HostPath: pipe, ContainerPath: sharing.PipeDir, Type: "bind", Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		{HostPath: log, ContainerPath: sharing.LogDir, Type: "bind", Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		{HostPath: sh.n.opts.MPS.ShmDir(key), ContainerPath: "/dev/shm", Type: "bind", Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
	}
}

// computeModeGPUs are the GPUs of c whose compute mode its sharing sets: its whole GPUs, by
// UUID, sorted. A compute mode belongs to a whole GPU; as in NVIDIA's driver, a MIG device's
// parent is left as it is (MPS on a MIG device runs without it), and so is a GPU in MIG mode
// given out whole (dynamic MIG), where CUDA runs only on MIG devices. The UUID tells a whole
// GPU (GPU-...) from a MIG device (MIG-...) from the record alone, so that a record whose
// device has left the inventory is still put back.
func (sh *sharingStep) computeModeGPUs(c *checkpoint.Claim) []string {
	var out []string
	for _, u := range gpuUUIDs(c) {
		if !strings.HasPrefix(u, "GPU-") {
			continue
		}
		migParent := stdslices.ContainsFunc(sh.n.opts.Inventory.MIGParents, func(p device.MIGParent) bool { return p.GPU.UUID == u })
		if !migParent {
			out = append(out, u)
		}
	}
	return out
}

// setComputeModes sets mode on the GPUs uuids and returns those it set; it stops at the first
// failure.
func (sh *sharingStep) setComputeModes(ctx context.Context, uuids []string, mode device.ComputeMode) ([]string, error) {
	if sh.n.opts.ComputeMode == nil {
		return nil, nil
	}
	for i, u := range uuids {
		if err := sh.n.opts.ComputeMode.SetComputeMode(ctx, u, mode); err != nil {
			return uuids[:i], fmt.Errorf("setting compute mode %s on GPU %s: %w", mode, u, err)
		}
		klog.FromContext(ctx).V(2).Info("Set GPU compute mode", "uuid", u, "mode", mode)
	}
	return uuids, nil
}

// restoreComputeModes puts DEFAULT back on the GPUs uuids that no other MPS claim of self's
// GPUs needs exclusive.
func (sh *sharingStep) restoreComputeModes(ctx context.Context, self types.UID, uuids []string) error {
	var keep []string
	for _, u := range uuids {
		// Another claim's MPS daemon on the GPU needs it EXCLUSIVE_PROCESS still.
		if !sh.usedByOther(u, self, mpsGPUs) {
			keep = append(keep, u)
		}
	}
	_, err := sh.setComputeModes(ctx, keep, device.ComputeModeDefault)
	return err
}

// mpsLimits are the limits c's daemon is started with: a claim's own daemon takes the claim's;
// a GPU's daemon of shares takes none, its claims' limits are their clients' (env).
func mpsLimits(c *checkpoint.Claim) sharing.MPSLimits {
	if _, shared := mpsShareGPU(c); shared {
		return sharing.MPSLimits{}
	}
	return sharing.MPSLimits{ActiveThreadPercentage: c.Sharing.ActiveThreadPercentage, PinnedMemoryMiB: c.Sharing.PinnedMemoryMiB}
}

// ensure, at start-up and when the kubelet prepares a prepared claim again, brings back
// what a prepared claim's sharing runs: its MPS daemon is adopted if it outlived the plugin, or
// started again (with its limits) if it did not. A failure is logged and left for the claim's
// unprepare: the claim's containers may already run. Both callers hold the node lock; starting
// a daemon is rare and takes until it is ready (its pod started and its pipe answering, bounded
// by mpspod.DefaultReadyTimeout).
func (sh *sharingStep) ensure(ctx context.Context, c *checkpoint.Claim) {
	if !isMPS(c) || sh.n.opts.MPS == nil {
		return
	}
	logger := klog.FromContext(ctx)
	// Set again in case the plugin crashed between writing the record and setting it.
	if _, err := sh.setComputeModes(ctx, sh.computeModeGPUs(c), device.ComputeModeExclusiveProcess); err != nil {
		logger.Error(err, "Cannot set the compute mode of a prepared MPS claim's GPUs", "claim", klog.KRef(c.Namespace, c.Name))
	}
	started, err := sh.n.opts.MPS.Ensure(ctx, mpsDaemon(c), gpuUUIDs(c), mpsLimits(c))
	switch {
	case err != nil:
		logger.Error(err, "Cannot restart the MPS control daemon of a prepared claim", "claim", klog.KRef(c.Namespace, c.Name))
	case started:
		logger.Info("Restarted the MPS control daemon of a prepared claim", "claim", klog.KRef(c.Namespace, c.Name))
	default:
		logger.V(2).Info("Adopted the running MPS control daemon of a prepared claim", "claim", klog.KRef(c.Namespace, c.Name))
	}
}

// sharingKey is what two claims on one GPU must agree on: the strategy and its GPU-wide
// settings; "none" for a claim without sharing.
func sharingKey(s *checkpoint.Sharing) string {
	if s == nil {
		return "none"
	}
	if s.Interval != "" {
		return s.Strategy + " (interval " + s.Interval + ")"
	}
	return s.Strategy
}

// reserve refuses rec if a claim holding a share of one of its GPUs was prepared with another
// sharing strategy or time-slice: both are set on the whole GPU, so one of the two claims would
// not get what it asked for. An MPS share whose GPU's daemon another share is starting (its
// record PrepareStarted, start) waits for it: that claim is in the way, rolled back if it was
// abandoned, else awaited (startingError). Called with the node lock held.
func (sh *sharingStep) reserve(l *checkpoint.Locked, ref string, rec *checkpoint.Claim, _ *standing) ([]inTheWay, error) {
	mine := sharingKey(rec.Sharing)
	var inWay []inTheWay
	for i := range rec.Devices {
		pd := &rec.Devices[i]
		if pd.ShareID == "" {
			continue
		}
		for _, oc := range sh.held.sharers(pd, types.UID(rec.UID)) {
			if isMPS(rec) && isMPS(oc) && oc.State == checkpoint.StatePrepareStarted && !stdslices.ContainsFunc(inWay, func(w inTheWay) bool { return w.claim.UID == oc.UID }) {
				inWay = append(inWay, inTheWay{claim: oc, err: &startingError{
					msg:     fmt.Sprintf("claim %s: device %s is shared with claim %s/%s (%s), whose preparation is starting the GPU's MPS control daemon", ref, pd.Device, oc.Namespace, oc.Name, oc.UID),
					settled: sh.held.settledAfter(l),
				}})
			}
			if theirs := sharingKey(oc.Sharing); theirs != mine {
				return nil, fmt.Errorf("claim %s: device %s is shared with claim %s/%s (%s), which uses sharing %s; claim %s asks for sharing %s, and a GPU has one setting for all its claims",
					ref, pd.Device, oc.Namespace, oc.Name, oc.UID, theirs, ref, mine)
			}
		}
	}
	return inWay, nil
}

// startsDaemon reports whether preparing rec starts an MPS daemon, which takes until the
// daemon's pod runs and its pipe answers (up to mpspod.DefaultReadyTimeout): such a claim is
// prepared in two phases (finish), the daemon started and awaited without the node lock.
func (sh *sharingStep) startsDaemon(rec *checkpoint.Claim) bool {
	return isMPS(rec) && sh.n.opts.MPS != nil
}

// start sets the compute mode of rec's GPUs and starts its MPS daemon, awaiting it, without the
// node lock: rec's PrepareStarted record is published and indexed, so every other claim's
// release leaves the GPUs and the daemon to it (usedByOther), the sweep keeps the daemon, and
// reserve refuses another MPS share of its GPU until it completes (the GPU's one daemon has one
// starter). MPS needs the GPUs exclusive to its server before the daemon starts, as NVIDIA's
// driver does it; the record says to put DEFAULT back. It returns the GPUs whose compute mode
// it set; on failure nothing is put back here: the caller does it under the lock
// (preparer.abort, abandon), on those GPUs only.
func (sh *sharingStep) start(ctx context.Context, rec *checkpoint.Claim) ([]string, error) {
	if !sh.startsDaemon(rec) {
		return nil, nil
	}
	set, err := sh.setComputeModes(ctx, sh.computeModeGPUs(rec), device.ComputeModeExclusiveProcess)
	if err != nil {
		return set, fmt.Errorf("sharing.mps: %w", err)
	}
	if _, err := sh.n.opts.MPS.Ensure(ctx, mpsDaemon(rec), gpuUUIDs(rec), mpsLimits(rec)); err != nil {
		return set, fmt.Errorf("sharing.mps: %w", err)
	}
	return set, nil
}

// abandon stops rec's MPS daemon and puts back the default compute mode of the GPUs set (those
// rec's prepare set), unless another claim counts on them, for a prepare that failed or whose
// record is gone. Called with the node lock held; failures are logged, the prepare's own error
// is what the kubelet sees.
func (sh *sharingStep) abandon(ctx context.Context, rec *checkpoint.Claim, set []string) {
	if !sh.startsDaemon(rec) {
		return
	}
	if err := sh.stopDaemon(ctx, rec); err != nil {
		klog.FromContext(ctx).Error(err, "Stopping the MPS control daemon after a failed prepare")
	}
	if err := sh.restoreComputeModes(ctx, types.UID(rec.UID), set); err != nil {
		klog.FromContext(ctx).Error(err, "Putting back the default compute mode after a failed prepare")
	}
}

// timeSliced are the distinct GPUs (UUIDs) of c whose time-slice its sharing sets.
func timeSliced(c *checkpoint.Claim) []string {
	if c.Sharing == nil || c.Sharing.Strategy != string(configapi.StrategyTimeSlicing) {
		return nil
	}
	return gpuUUIDs(c)
}

// apply sets what a newly prepared claim's sharing asks on its GPUs. On failure it puts
// back the GPUs it had already set, unless another claim needs them so. Called with the node
// lock held, right after the claim's record was published: a GPU's settings and its MPS daemon
// (started by its first share and stopped by its last, which either instance of the plugin may
// prepare) change only together with the records that say which claims count on them.
func (sh *sharingStep) apply(ctx context.Context, _ *checkpoint.Locked, rec *checkpoint.Claim) error {
	if isMPS(rec) {
		// The daemon was started and awaited between the holds (start); it is adopted here,
		// or started again if it died meanwhile.
		started, err := sh.n.opts.MPS.Ensure(ctx, mpsDaemon(rec), gpuUUIDs(rec), mpsLimits(rec))
		if err != nil {
			sh.abandon(ctx, rec, sh.computeModeGPUs(rec))
			return fmt.Errorf("sharing.mps: %w", err)
		}
		klog.FromContext(ctx).V(2).Info("MPS control daemon ready", "claim", klog.KRef(rec.Namespace, rec.Name), "daemon", mpsDaemon(rec), "started", started)
		return nil
	}
	// Time-slicing applies to processes of the GPU's DEFAULT compute mode, which NVIDIA's driver
	// sets first; it is the driver's default, so nothing is put back.
	uuids := timeSliced(rec)
	if len(uuids) == 0 {
		return nil
	}
	if _, err := sh.setComputeModes(ctx, sh.computeModeGPUs(rec), device.ComputeModeDefault); err != nil {
		return fmt.Errorf("sharing.timeSlicing: %w", err)
	}
	for i, uuid := range uuids {
		err := sh.n.opts.TimeSlicer.SetTimeSlice(ctx, uuid, configapi.TimeSliceInterval(rec.Sharing.Interval))
		if err == nil {
			klog.FromContext(ctx).V(2).Info("Set GPU time-slice", "claim", klog.KRef(rec.Namespace, rec.Name), "uuid", uuid, "interval", rec.Sharing.Interval)
			continue
		}
		for _, done := range uuids[:i] {
			if sh.usedByOther(done, types.UID(rec.UID), timeSliced) {
				continue
			}
			if uerr := sh.n.opts.TimeSlicer.SetTimeSlice(ctx, done, configapi.TimeSliceDefault); uerr != nil {
				klog.FromContext(ctx).Error(uerr, "Putting back the default time-slice after a failed prepare", "uuid", done)
			}
		}
		return fmt.Errorf("sharing.timeSlicing: setting interval %s on GPU %s: %w", rec.Sharing.Interval, uuid, err)
	}
	return nil
}

// usedByOther reports whether a claim other than self has uuid among of(claim): the GPUs whose
// time-slice or compute mode its sharing set, or the MPS daemon that serves it, which must stay
// until the last such claim.
func (sh *sharingStep) usedByOther(uuid string, self types.UID, of func(*checkpoint.Claim) []string) bool {
	// A record this plugin cannot read may use it (heldBy counts it).
	_, used := sh.held.heldBy(self, func(c *checkpoint.Claim) bool { return stdslices.Contains(of(c), uuid) })
	return used
}

// release stops c's MPS daemon and puts back the default time-slice and compute mode on
// each GPU of c that no other claim needs so, before c's record goes: if that fails the record
// stays, and the kubelet's next unprepare (or start-up reconciliation, for a claim that is
// gone) tries again. A GPU that is lost (lost) is the exception: nothing can be set on it
// until a reset or a reboot, which put its defaults back anyway, and the claim's pod must be
// able to terminate, so its failures are logged and the release goes on. Records of an earlier
// boot are not in the index and need nothing: the driver reset the GPUs when it loaded. Called
// with the node lock held.
func (sh *sharingStep) release(ctx context.Context, _ *checkpoint.Locked, c *checkpoint.Claim) error {
	if _, indexed := sh.held.get(c.UID); !indexed {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(c.Namespace, c.Name))
	// tolerate passes the failure of a lost GPU.
	tolerate := func(err error, uuids ...string) error {
		for _, u := range uuids {
			if sh.lost(u, err) {
				logger.Error(err, "Leaving a setting of a lost GPU as it is: a reset or a reboot puts its default back", "uuid", u)
				return nil
			}
		}
		return err
	}
	if isMPS(c) {
		if sh.n.opts.MPS != nil {
			if err := tolerate(sh.stopDaemon(ctx, c), gpuUUIDs(c)...); err != nil {
				return fmt.Errorf("stopping the claim's MPS control daemon: %w", err)
			}
		}
		for _, u := range sh.computeModeGPUs(c) {
			if err := tolerate(sh.restoreComputeModes(ctx, types.UID(c.UID), []string{u}), u); err != nil {
				return fmt.Errorf("putting back the default compute mode: %w", err)
			}
		}
	}
	for _, uuid := range timeSliced(c) {
		if sh.usedByOther(uuid, types.UID(c.UID), timeSliced) {
			continue
		}
		if err := sh.n.opts.TimeSlicer.SetTimeSlice(ctx, uuid, configapi.TimeSliceDefault); err != nil {
			if tolerate(err, uuid) == nil {
				continue
			}
			return fmt.Errorf("putting back the default time-slice of GPU %s: %w", uuid, err)
		}
		logger.V(2).Info("Put back the default GPU time-slice", "uuid", uuid)
	}
	return nil
}

// lost reports whether the GPU uuid is lost, as err says (device.ErrGPULost) or as device
// health last saw it (cause lost).
func (sh *sharingStep) lost(uuid string, err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, device.ErrGPULost) {
		return true
	}
	if sh.health == nil {
		return false
	}
	for _, h := range sh.health.tracker.Snapshot() {
		dev, ok := sh.n.devices[h.Device]
		if !ok || dev.UUID != uuid || h.State != health.Unhealthy {
			continue
		}
		for _, cond := range h.Conditions {
			if cond.Cause == health.CauseLost {
				return true
			}
		}
	}
	return false
}

// sweep stops the MPS daemons that no record counts on and removes their directories (a
// record of an earlier boot needs nothing released, so its daemon's directory is left for
// this). A daemon that cannot be stopped is logged and left for the next start: it holds no
// device that a claim could be given. Called with the node lock held, after the index was
// loaded, so that the other instance's records count too.
func (sh *sharingStep) sweep(ctx context.Context) []string {
	if sh.n.opts.MPS == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	keys, err := sh.n.opts.MPS.Keys(ctx)
	if err != nil {
		logger.Error(err, "Cannot look for MPS control daemons that no claim uses")
		return nil
	}
	needed := map[string]bool{}
	// No claim holds anything of its own here: heldBy answers only for an opaque record.
	if uid, ok := sh.held.heldBy("", func(*checkpoint.Claim) bool { return false }); ok {
		logger.Info("Stopping no MPS control daemon: a checkpoint record this plugin cannot read may count on any", "claim", uid)
		return nil
	}
	for _, c := range sh.held.all() {
		for _, key := range mpsDaemons(&c) {
			needed[key] = true
		}
	}
	var stopped []string
	for _, key := range keys {
		if needed[key] {
			continue
		}
		if err := sh.n.opts.MPS.Stop(ctx, key); err != nil {
			logger.Error(err, "Cannot stop an MPS control daemon that no claim uses", "daemon", key)
			continue
		}
		logger.Info("Stopped an MPS control daemon that no claim uses", "daemon", key)
		stopped = append(stopped, key)
	}
	return stopped
}
