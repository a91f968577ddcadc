package nvml

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
)

var _ device.Partitioner = (*Backend)(nil)

// ProfileName is NVIDIA's name of a GPU-instance profile, "<slices>g.<memory>gb" with the
// suffix of its revision ("+me" for the media-extension profiles), computed as NVIDIA's tools
// compute it: the profile's memory rounded up to eighths of the GPU's memory, in GB of a GPU
// whose memory is rounded up to whole GB.
func ProfileName(index int, info nvml.GpuInstanceProfileInfo, gpuMemoryBytes int64) string {
	const gb = 1 << 30
	frac := float64(info.MemorySizeMB<<20) / float64(gpuMemoryBytes)
	frac = math.Ceil(frac*8) / 8
	totalGB := float64((gpuMemoryBytes + gb - 1) / gb)
	name := fmt.Sprintf("%dg.%dgb", info.SliceCount, int(math.Round(frac*totalGB)))
	switch index {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		name += "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		name += "+me.all"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		name += "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		name += "+gfx"
	}
	return name
}

// enumerateMIG reads the MIG state of the GPU at index i, enumerated as d. A GPU that does not
// support MIG or is not in MIG mode gives nil. A GPU in MIG mode gives its profile table and
// its MIG devices; if any of that cannot be read the GPU fails as a whole, since publishing it
// as a whole GPU would hand out a GPU no container can use.
func (b *Backend) enumerateMIG(ctx context.Context, i int, d *device.Device) (*device.MIGParent, error) {
	h, ret := b.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, callError("DeviceGetHandleByIndex", i, ret)
	}
	cur, _, ret := h.GetMigMode()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		return nil, nil
	case ret != nvml.SUCCESS:
		return nil, callError("GetMigMode", i, ret)
	case cur != nvml.DEVICE_MIG_ENABLE:
		return nil, nil
	}
	p := &device.MIGParent{GPU: *d}
	profiles, err := b.migProfiles(h, i, d.MemoryBytes)
	if err != nil {
		return nil, err
	}
	p.Profiles = profiles
	for _, pr := range profiles {
		for _, pl := range pr.Placements {
			p.MemorySlices = max(p.MemorySlices, pl.Start+pl.Size)
		}
	}
	if p.Instances, err = b.migInstances(h, i, d, profiles); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("GPU is in MIG mode", "device", d.Name, "profiles", len(profiles), "instances", len(p.Instances))
	return p, nil
}

func (b *Backend) migProfiles(h nvml.Device, i int, memory int64) ([]device.MIGProfile, error) {
	var out []device.MIGProfile
	for idx := 0; idx < nvml.GPU_INSTANCE_PROFILE_COUNT; idx++ {
		info, ret := h.GetGpuInstanceProfileInfo(idx)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, callError(fmt.Sprintf("GetGpuInstanceProfileInfo(%d)", idx), i, ret)
		}
		pls, ret := h.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, callError(fmt.Sprintf("GetGpuInstancePossiblePlacements(%d)", idx), i, ret)
		}
		pr := device.MIGProfile{
			Name: ProfileName(idx, info, memory), ID: idx, GIProfileID: int(info.Id),
			SliceCount: int(info.SliceCount), InstanceCount: int(info.InstanceCount),
			Multiprocessors: int(info.MultiprocessorCount), CopyEngines: int(info.CopyEngineCount),
			Decoders: int(info.DecoderCount), Encoders: int(info.EncoderCount),
			JPEGEngines: int(info.JpegCount), OFAEngines: int(info.OfaCount),
			MemoryBytes: int64(info.MemorySizeMB) << 20,
		}
		for _, pl := range pls {
			pr.Placements = append(pr.Placements, device.MIGPlacement{Start: int(pl.Start), Size: int(pl.Size)})
		}
		sort.Slice(pr.Placements, func(a, b int) bool { return pr.Placements[a].Start < pr.Placements[b].Start })
		out = append(out, pr)
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].SliceCount != out[b].SliceCount {
			return out[a].SliceCount < out[b].SliceCount
		}
		if out[a].MemoryBytes != out[b].MemoryBytes {
			return out[a].MemoryBytes < out[b].MemoryBytes
		}
		return out[a].Name < out[b].Name
	})
	return out, nil
}

// migInstances lists the GPU instances of GPU h with their compute instances, sorted by
// placement; a GPU instance without a compute instance is listed with CI -1.
func (b *Backend) migInstances(h nvml.Device, i int, d *device.Device, profiles []device.MIGProfile) ([]device.MIGInstance, error) {
	uuids, err := migUUIDs(h, i)
	if err != nil {
		return nil, err
	}
	var out []device.MIGInstance
	for _, pr := range profiles {
		info, ret := h.GetGpuInstanceProfileInfo(pr.ID)
		if ret != nvml.SUCCESS {
			return nil, callError(fmt.Sprintf("GetGpuInstanceProfileInfo(%d)", pr.ID), i, ret)
		}
		gis, ret := h.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, callError(fmt.Sprintf("GetGpuInstances(%s)", pr.Name), i, ret)
		}
		for _, gi := range gis {
			giInfo, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, callError("GpuInstance.GetInfo", i, ret)
			}
			base := device.MIGInstance{
				ParentUUID: d.UUID, Profile: pr.Name, ProfileID: pr.ID,
				Placement: device.MIGPlacement{Start: int(giInfo.Placement.Start), Size: int(giInfo.Placement.Size)},
				GI:        int(giInfo.Id), CI: -1,
			}
			cis, err := computeInstances(gi, i)
			if err != nil {
				return nil, err
			}
			if len(cis) == 0 {
				out = append(out, base)
				continue
			}
			for _, ci := range cis {
				in := base
				in.CI, in.CIProfileID, in.CISliceCount = ci.id, ci.profile, ci.slices
				in.UUID = uuids[[2]int{in.GI, in.CI}]
				out = append(out, in)
			}
		}
	}
	sort.Slice(out, func(a, c int) bool {
		if out[a].Placement.Start != out[c].Placement.Start {
			return out[a].Placement.Start < out[c].Placement.Start
		}
		if out[a].GI != out[c].GI {
			return out[a].GI < out[c].GI
		}
		return out[a].CI < out[c].CI
	})
	return out, nil
}

type ciRef struct{ id, profile, slices int }

func computeInstances(gi nvml.GpuInstance, i int) ([]ciRef, error) {
	var out []ciRef
	for idx := 0; idx < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; idx++ {
		info, ret := gi.GetComputeInstanceProfileInfo(idx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, callError(fmt.Sprintf("GetComputeInstanceProfileInfo(%d)", idx), i, ret)
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, callError("GetComputeInstances", i, ret)
		}
		for _, ci := range cis {
			ciInfo, ret := ci.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, callError("ComputeInstance.GetInfo", i, ret)
			}
			out = append(out, ciRef{id: int(ciInfo.Id), profile: idx, slices: int(info.SliceCount)})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].id < out[b].id })
	return out, nil
}

// migUUIDs maps (GI, CI) to the UUID of the MIG device, from NVML's MIG device handles.
func migUUIDs(h nvml.Device, i int) (map[[2]int]string, error) {
	n, ret := h.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, callError("GetMaxMigDeviceCount", i, ret)
	}
	out := map[[2]int]string{}
	for k := 0; k < n; k++ {
		m, ret := h.GetMigDeviceHandleByIndex(k)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, callError(fmt.Sprintf("GetMigDeviceHandleByIndex(%d)", k), i, ret)
		}
		gi, ret := m.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return nil, callError("MIG GetGpuInstanceId", i, ret)
		}
		ci, ret := m.GetComputeInstanceId()
		if ret != nvml.SUCCESS {
			return nil, callError("MIG GetComputeInstanceId", i, ret)
		}
		uuid, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, callError("MIG GetUUID", i, ret)
		}
		out[[2]int{gi, ci}] = uuid
	}
	return out, nil
}

// StaticMIGDevices are the devices of a MIG-mode GPU's existing MIG devices: each gets the
// parent's identity attributes (product, index, PCI, NUMA), its own UUID and memory, and the
// parent's nodes plus its GPU- and compute-instance caps nodes.
func (b *Backend) staticMIGDevices(p *device.MIGParent) ([]device.Device, error) {
	var out []device.Device
	byGI := map[int]int{}
	for _, in := range p.Instances {
		byGI[in.GI]++
	}
	for _, in := range p.Instances {
		if in.CI < 0 || in.UUID == "" {
			// A GPU instance without a compute instance runs nothing; it is not a device.
			continue
		}
		var prof device.MIGProfile
		for _, pr := range p.Profiles {
			if pr.ID == in.ProfileID {
				prof = pr
			}
		}
		caps, err := b.capNodes(p.GPU.Number, in.GI, in.CI)
		if err != nil {
			return nil, fmt.Errorf("%s MIG device %s: %w", p.GPU.Name, in.UUID, err)
		}
		inst := in
		inst.CapNodes = caps
		d := p.GPU
		d.Name = device.MIGName(p.GPU.Name, in.Profile, in.Placement.Start)
		if byGI[in.GI] > 1 || in.CISliceCount != prof.SliceCount {
			// A GPU instance split into compute instances has a device per compute instance.
			d.Name += fmt.Sprintf("-ci%d", in.CI)
		}
		d.UUID = in.UUID
		d.MemoryBytes = prof.MemoryBytes
		// The parent's /dev/nvidiaN, not its DRM nodes, which belong to the whole GPU.
		d.Nodes = append(device.WithoutDRM(p.GPU.Nodes), caps...)
		d.MIG = &device.MIG{Parent: p.GPU.Name, ParentUUID: p.GPU.UUID, Profile: prof, Placement: in.Placement, Instance: &inst}
		out = append(out, d)
	}
	return out, nil
}

// migHandle returns the handle of the GPU with uuid, which must be in MIG mode.
func (b *Backend) migHandle(ctx context.Context, uuid string) (nvml.Device, error) {
	if err := b.initLocked(ctx); err != nil {
		return nil, err
	}
	h, ret := b.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu %s: nvml DeviceGetHandleByUUID: %w", uuid, ret)
	}
	cur, _, ret := h.GetMigMode()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu %s: nvml GetMigMode: %w", uuid, ret)
	}
	if cur != nvml.DEVICE_MIG_ENABLE {
		// The plugin never enables MIG mode; it is the operator's decision (it needs a GPU reset).
		return nil, fmt.Errorf("gpu %s is not in MIG mode", uuid)
	}
	return h, nil
}

// CreateGI implements device.Partitioner.
func (b *Backend) CreateGI(ctx context.Context, parentUUID string, profileID int, placement device.MIGPlacement) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, err := b.migHandle(ctx, parentUUID)
	if err != nil {
		return 0, err
	}
	info, ret := h.GetGpuInstanceProfileInfo(profileID)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("gpu %s: nvml GetGpuInstanceProfileInfo(%d): %w", parentUUID, profileID, ret)
	}
	pl := nvml.GpuInstancePlacement{Start: uint32(placement.Start), Size: uint32(placement.Size)}
	gi, ret := h.CreateGpuInstanceWithPlacement(&info, &pl)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("gpu %s: nvml CreateGpuInstanceWithPlacement(profile %d, start %d, size %d): %w", parentUUID, profileID, placement.Start, placement.Size, ret)
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("gpu %s: nvml GpuInstance.GetInfo: %w", parentUUID, ret)
	}
	klog.FromContext(ctx).V(2).Info("Created GPU instance", "gpu", parentUUID, "profile", profileID, "start", placement.Start, "gi", giInfo.Id)
	return int(giInfo.Id), nil
}

// CreateCI implements device.Partitioner.
func (b *Backend) CreateCI(ctx context.Context, parentUUID string, giID int) (device.MIGInstance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, err := b.migHandle(ctx, parentUUID)
	if err != nil {
		return device.MIGInstance{}, err
	}
	gi, ret := h.GetGpuInstanceById(giID)
	if ret != nvml.SUCCESS {
		return device.MIGInstance{}, fmt.Errorf("gpu %s: nvml GetGpuInstanceById(%d): %w", parentUUID, giID, ret)
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return device.MIGInstance{}, fmt.Errorf("gpu %s: nvml GpuInstance.GetInfo: %w", parentUUID, ret)
	}
	// The compute-instance profile spanning the GPU instance: the one with the most slices.
	var best *nvml.ComputeInstanceProfileInfo
	for idx := 0; idx < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; idx++ {
		info, ret := gi.GetComputeInstanceProfileInfo(idx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		if best == nil || info.SliceCount > best.SliceCount {
			best = &info
		}
	}
	if best == nil {
		return device.MIGInstance{}, fmt.Errorf("gpu %s GPU instance %d: no compute-instance profile", parentUUID, giID)
	}
	ci, ret := gi.CreateComputeInstance(best)
	if ret != nvml.SUCCESS {
		return device.MIGInstance{}, fmt.Errorf("gpu %s GPU instance %d: nvml CreateComputeInstance: %w", parentUUID, giID, ret)
	}
	ciInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return device.MIGInstance{}, fmt.Errorf("gpu %s GPU instance %d: nvml ComputeInstance.GetInfo: %w", parentUUID, giID, ret)
	}
	minor, ret := h.GetMinorNumber()
	if ret != nvml.SUCCESS {
		return device.MIGInstance{}, fmt.Errorf("gpu %s: nvml GetMinorNumber: %w", parentUUID, ret)
	}
	uuids, err := migUUIDs(h, -1)
	if err != nil {
		return device.MIGInstance{}, err
	}
	in := device.MIGInstance{
		ParentUUID: parentUUID,
		Placement:  device.MIGPlacement{Start: int(giInfo.Placement.Start), Size: int(giInfo.Placement.Size)},
		GI:         giID, CI: int(ciInfo.Id), CIProfileID: int(best.Id), CISliceCount: int(best.SliceCount),
		UUID: uuids[[2]int{giID, int(ciInfo.Id)}],
	}
	if in.UUID == "" {
		return in, fmt.Errorf("gpu %s GPU instance %d: NVML lists no MIG device for compute instance %d", parentUUID, giID, in.CI)
	}
	if in.CapNodes, err = b.capNodes(minor, giID, in.CI); err != nil {
		return in, err
	}
	klog.FromContext(ctx).V(2).Info("Created compute instance", "gpu", parentUUID, "gi", giID, "ci", in.CI, "uuid", in.UUID)
	return in, nil
}

// DestroyMIG implements device.Partitioner.
func (b *Backend) DestroyMIG(ctx context.Context, parentUUID string, giID int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, err := b.migHandle(ctx, parentUUID)
	if err != nil {
		return err
	}
	gi, ret := h.GetGpuInstanceById(giID)
	if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
		return nil
	}
	if ret != nvml.SUCCESS {
		return fmt.Errorf("gpu %s: nvml GetGpuInstanceById(%d): %w", parentUUID, giID, ret)
	}
	cis, err := computeInstances(gi, -1)
	if err != nil {
		return fmt.Errorf("gpu %s GPU instance %d: %w", parentUUID, giID, err)
	}
	for _, c := range cis {
		ci, ret := gi.GetComputeInstanceById(c.id)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("gpu %s GPU instance %d: nvml GetComputeInstanceById(%d): %w", parentUUID, giID, c.id, ret)
		}
		if ret := ci.Destroy(); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_FOUND {
			return fmt.Errorf("gpu %s GPU instance %d: destroying compute instance %d: %w", parentUUID, giID, c.id, ret)
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_FOUND {
		return fmt.Errorf("gpu %s: destroying GPU instance %d: %w", parentUUID, giID, ret)
	}
	klog.FromContext(ctx).V(2).Info("Destroyed GPU instance", "gpu", parentUUID, "gi", giID)
	return nil
}

// ListMIG implements device.Partitioner. Each GPU is listed on its own: one that fails is
// reported in a device.GPUErrors and the others are listed all the same, so that one lost GPU
// does not stop the sweep, the unprepares and the checks of every other GPU's instances.
func (b *Backend) ListMIG(ctx context.Context) ([]device.MIGInstance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initLocked(ctx); err != nil {
		return nil, err
	}
	count, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml DeviceGetCount: %w", ret)
	}
	var out []device.MIGInstance
	var failed device.GPUErrors
	for i := 0; i < count; i++ {
		ins, uuid, err := b.listMIG(i)
		if err != nil {
			if errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
				err = fmt.Errorf("%w: %w", device.ErrGPULost, err)
			}
			failed = append(failed, device.GPUError{Index: i, UUID: uuid, Err: err})
			continue
		}
		out = append(out, ins...)
	}
	if len(failed) > 0 {
		return out, failed
	}
	return out, nil
}

// listMIG lists the instances of the GPU at index i, none if it is not in MIG mode. uuid is
// the GPU's, if it could be read.
func (b *Backend) listMIG(i int) (ins []device.MIGInstance, uuid string, err error) {
	h, ret := b.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, "", callError("DeviceGetHandleByIndex", i, ret)
	}
	cur, _, ret := h.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED || (ret == nvml.SUCCESS && cur != nvml.DEVICE_MIG_ENABLE) {
		return nil, "", nil
	}
	if ret != nvml.SUCCESS {
		return nil, "", callError("GetMigMode", i, ret)
	}
	d := device.Device{}
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return nil, "", callError("GetUUID", i, ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, d.UUID, callError("GetMemoryInfo", i, ret)
	}
	profiles, err := b.migProfiles(h, i, int64(mem.Total))
	if err != nil {
		return nil, d.UUID, err
	}
	if ins, err = b.migInstances(h, i, &d, profiles); err != nil {
		return nil, d.UUID, err
	}
	// The caps nodes, for a spec written again from a record, which holds no modes. Best
	// effort: a listing is for finding instances, and one whose capabilities file cannot be
	// read is still an instance.
	if minor, ret := h.GetMinorNumber(); ret == nvml.SUCCESS {
		for j := range ins {
			if ins[j].CI >= 0 {
				ins[j].CapNodes, _ = b.capNodes(minor, ins[j].GI, ins[j].CI)
			}
		}
	}
	return ins, d.UUID, nil
}
