package nvmlmock

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// migTable is the MIG profile table of a GPU model as NVML reports it: the GPU-instance
// profiles by NVML profile index (the argument of GetGpuInstanceProfileInfo), each with its
// profile info and possible placements, and the compute-instance profiles.
type migTable struct {
	// memorySlices is the number of memory slices placements index.
	memorySlices int
	// computeSlices is the number of compute slices (GPCs) MIG hands out.
	computeSlices int
	gi            []migGIProfile
	// ci are the compute-instance profiles by index; a GI of SliceCount s offers those with
	// SliceCount <= s.
	ci []nvml.ComputeInstanceProfileInfo
}

type migGIProfile struct {
	index      int
	info       nvml.GpuInstanceProfileInfo
	placements []nvml.GpuInstancePlacement
}

// profile returns the GI profile of an NVML profile index.
func (t *migTable) profile(index int) (migGIProfile, bool) {
	for _, p := range t.gi {
		if p.index == index {
			return p, true
		}
	}
	return migGIProfile{}, false
}

// profileByID returns the GI profile whose info has profile ID id.
func (t *migTable) profileByID(id uint32) (migGIProfile, bool) {
	for _, p := range t.gi {
		if p.info.Id == id {
			return p, true
		}
	}
	return migGIProfile{}, false
}

// full is the profile spanning the whole GPU (7g).
func (t *migTable) full() migGIProfile {
	best := t.gi[0]
	for _, p := range t.gi {
		if p.info.SliceCount > best.info.SliceCount {
			best = p
		}
	}
	return best
}

func placements(size uint32, starts ...uint32) []nvml.GpuInstancePlacement {
	out := make([]nvml.GpuInstancePlacement, 0, len(starts))
	for _, s := range starts {
		out = append(out, nvml.GpuInstancePlacement{Start: s, Size: size})
	}
	return out
}

// ciProfiles are the compute-instance profiles with the shared engine profile, by index; the
// multiprocessor counts are those of the A100 (14 per slice) or H100 (16 per slice, 132 for 7).
func ciProfiles(smPerSlice, smFull uint32) []nvml.ComputeInstanceProfileInfo {
	out := []nvml.ComputeInstanceProfileInfo{}
	for _, p := range []struct{ id, slices uint32 }{
		{nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 1},
		{nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, 2},
		{nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 3},
		{nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, 4},
		{nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, 7},
	} {
		sm := smPerSlice * p.slices
		if p.slices == 7 {
			sm = smFull
		}
		out = append(out, nvml.ComputeInstanceProfileInfo{Id: p.id, SliceCount: p.slices, InstanceCount: 7 / p.slices, MultiprocessorCount: sm})
	}
	return out
}

// The A100-SXM4-40GB's table, as `nvidia-smi mig -lgip` and -lgipp report it on driver 570 and
// as NVIDIA's own go-nvml dgxa100 mock has it: profile IDs (19, 20, 15, 14, 9, 5, 0) are NVML's,
// memory in MiB, 8 memory slices and 7 compute slices.
var a100MIG = &migTable{
	memorySlices:  8,
	computeSlices: 7,
	gi: []migGIProfile{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GpuInstanceProfileInfo{Id: 19, SliceCount: 1, InstanceCount: 7, MultiprocessorCount: 14, CopyEngineCount: 1, MemorySizeMB: 4864}, placements(1, 0, 1, 2, 3, 4, 5, 6)},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GpuInstanceProfileInfo{Id: 20, SliceCount: 1, InstanceCount: 1, MultiprocessorCount: 14, CopyEngineCount: 1, DecoderCount: 1, JpegCount: 1, OfaCount: 1, MemorySizeMB: 4864}, placements(1, 0, 1, 2, 3, 4, 5, 6)},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, nvml.GpuInstanceProfileInfo{Id: 15, SliceCount: 1, InstanceCount: 4, MultiprocessorCount: 14, CopyEngineCount: 1, DecoderCount: 1, MemorySizeMB: 9856}, placements(2, 0, 2, 4, 6)},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GpuInstanceProfileInfo{Id: 14, SliceCount: 2, InstanceCount: 3, MultiprocessorCount: 28, CopyEngineCount: 2, DecoderCount: 1, MemorySizeMB: 9856}, placements(2, 0, 2, 4)},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GpuInstanceProfileInfo{Id: 9, SliceCount: 3, InstanceCount: 2, MultiprocessorCount: 42, CopyEngineCount: 3, DecoderCount: 2, MemorySizeMB: 19968}, placements(4, 0, 4)},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.GpuInstanceProfileInfo{Id: 5, SliceCount: 4, InstanceCount: 1, MultiprocessorCount: 56, CopyEngineCount: 4, DecoderCount: 2, MemorySizeMB: 19968}, placements(4, 0)},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.GpuInstanceProfileInfo{Id: 0, SliceCount: 7, InstanceCount: 1, MultiprocessorCount: 98, CopyEngineCount: 7, DecoderCount: 5, JpegCount: 1, OfaCount: 1, MemorySizeMB: 40192}, placements(8, 0)},
	},
	ci: ciProfiles(14, 98),
}

// The H100-SXM5-80GB's ("NVIDIA H100 80GB HBM3") table, as `nvidia-smi mig -lgip` reports it
// on driver 570: 1g.10gb x7, 1g.10gb+me x1, 1g.20gb x4, 2g.20gb x3, 3g.40gb x2, 4g.40gb x1,
// 7g.80gb x1; every compute slice has its own decoder and JPEG engine, the one OFA goes to +me
// or 7g.
var h100MIG = &migTable{
	memorySlices:  8,
	computeSlices: 7,
	gi: []migGIProfile{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GpuInstanceProfileInfo{Id: 19, SliceCount: 1, InstanceCount: 7, MultiprocessorCount: 16, CopyEngineCount: 1, DecoderCount: 1, JpegCount: 1, MemorySizeMB: 9984}, placements(1, 0, 1, 2, 3, 4, 5, 6)},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GpuInstanceProfileInfo{Id: 20, SliceCount: 1, InstanceCount: 1, MultiprocessorCount: 16, CopyEngineCount: 1, DecoderCount: 1, JpegCount: 1, OfaCount: 1, MemorySizeMB: 9984}, placements(1, 0, 1, 2, 3, 4, 5, 6)},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, nvml.GpuInstanceProfileInfo{Id: 15, SliceCount: 1, InstanceCount: 4, MultiprocessorCount: 26, CopyEngineCount: 1, DecoderCount: 1, JpegCount: 1, MemorySizeMB: 20096}, placements(2, 0, 2, 4, 6)},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GpuInstanceProfileInfo{Id: 14, SliceCount: 2, InstanceCount: 3, MultiprocessorCount: 32, CopyEngineCount: 2, DecoderCount: 2, JpegCount: 2, MemorySizeMB: 20096}, placements(2, 0, 2, 4)},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GpuInstanceProfileInfo{Id: 9, SliceCount: 3, InstanceCount: 2, MultiprocessorCount: 60, CopyEngineCount: 3, DecoderCount: 3, JpegCount: 3, MemorySizeMB: 40448}, placements(4, 0, 4)},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.GpuInstanceProfileInfo{Id: 5, SliceCount: 4, InstanceCount: 1, MultiprocessorCount: 64, CopyEngineCount: 4, DecoderCount: 4, JpegCount: 4, MemorySizeMB: 40448}, placements(4, 0)},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.GpuInstanceProfileInfo{Id: 0, SliceCount: 7, InstanceCount: 1, MultiprocessorCount: 132, CopyEngineCount: 8, DecoderCount: 7, JpegCount: 7, OfaCount: 1, MemorySizeMB: 81152}, placements(8, 0)},
	},
	ci: ciProfiles(16, 132),
}
