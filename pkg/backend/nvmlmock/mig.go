package nvmlmock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/stableid"
)

// MIG on the mock: a GPU of a MIG-capable model whose profile entry says migMode is in MIG mode
// (the plugin never changes that, so neither can the mock). Its GPU and compute instances live
// in a migState which, when the server has a state file (WithStateDir), is read before and
// written after every NVML call, so that instances created or destroyed by one plugin process
// are what the next one finds, as on a real GPU, where they outlive the plugin.

// StateFileName is the file in the state directory holding the mock's MIG instances.
const StateFileName = "nvml-mig-state.json"

// CrashFileName, if it exists in the state directory, makes the mock kill its own process
// (SIGKILL) right after it created a compute instance, once (the file is removed first): the
// e2e tests' way to crash the real plugin binary between creating a MIG instance and recording
// it, which no signal sent from outside can hit reliably.
const CrashFileName = "crash-after-create-ci"

// migInstance is an instance a profile creates before the plugin starts (as mig-parted would).
type migInstance struct {
	profile int // NVML GI profile index
	start   uint32
}

type migState struct {
	// GPUs by minor number, as a decimal string (JSON keys).
	GPUs map[string]*migGPU `json:"gpus"`
	// ComputeModes are the compute modes set on GPUs, by UUID (computemode.go); a GPU not
	// listed has DEFAULT.
	ComputeModes map[string]string `json:"computeModes,omitempty"`
}

type migGPU struct {
	// Generation counts GPU instances ever created, so that a re-created instance gets a new
	// UUID as on real hardware.
	Generation int     `json:"generation"`
	GIs        []migGI `json:"gis"`
}

type migGI struct {
	ID           int     `json:"id"`
	ProfileIndex int     `json:"profileIndex"`
	Start        uint32  `json:"start"`
	Size         uint32  `json:"size"`
	Generation   int     `json:"generation"`
	CIs          []migCI `json:"cis"`
}

type migCI struct {
	ID           int    `json:"id"`
	ProfileIndex int    `json:"profileIndex"`
	UUID         string `json:"uuid"`
}

// WithStateDir keeps the mock's MIG state in dir/StateFileName, so that it outlives the process.
// The file is created, with the profile's initial instances, if it does not exist.
func WithStateDir(dir string) Option {
	return func(o *options) { o.stateDir = dir }
}

// migEnabled reports whether the GPU at NVML index i is in MIG mode.
func (s *Server) migEnabled(i int) bool {
	g := s.profile.gpus[i]
	return g.model.mig && g.model.migTable != nil && g.migMode
}

// initialMIGState is the profile's state before anything was created.
func (s *Server) initialMIGState() *migState {
	st := &migState{GPUs: map[string]*migGPU{}}
	for i, g := range s.profile.gpus {
		if !s.migEnabled(i) {
			continue
		}
		mg := &migGPU{}
		st.GPUs[strconv.Itoa(s.profile.minor(i))] = mg
		for _, in := range g.instances {
			p, ok := g.model.migTable.profile(in.profile)
			if !ok {
				panic(fmt.Sprintf("nvmlmock: profile index %d not in the table of %s", in.profile, g.model.name))
			}
			pl := nvml.GpuInstancePlacement{Start: in.start, Size: p.placements[0].Size}
			if ret := s.createGI(mg, i, p, pl); ret != nvml.SUCCESS {
				panic(fmt.Sprintf("nvmlmock: initial instance %+v of gpu %d: %v", in, i, ret))
			}
			gi := &mg.GIs[len(mg.GIs)-1]
			if _, ret := s.createCI(mg, i, gi, fullCI(g.model.migTable, p)); ret != nvml.SUCCESS {
				panic(fmt.Sprintf("nvmlmock: initial compute instance %+v of gpu %d: %v", in, i, ret))
			}
		}
	}
	return st
}

// fullCI is the compute-instance profile spanning a GI of profile p.
func fullCI(t *migTable, p migGIProfile) nvml.ComputeInstanceProfileInfo {
	for _, c := range t.ci {
		if c.SliceCount == p.info.SliceCount {
			return c
		}
	}
	panic(fmt.Sprintf("nvmlmock: no compute-instance profile of %d slices", p.info.SliceCount))
}

// withMIG runs f on the current MIG state under the server's lock, and saves the state if f
// says it changed it.
func (s *Server) withMIG(f func(st *migState) (changed bool)) error {
	s.migMu.Lock()
	defer s.migMu.Unlock()
	if s.migState == nil || s.stateFile != "" {
		st, err := s.loadMIG()
		if err != nil {
			return err
		}
		s.migState = st
	}
	if !f(s.migState) || s.stateFile == "" {
		return nil
	}
	return s.saveMIG(s.migState)
}

func (s *Server) loadMIG() (*migState, error) {
	if s.stateFile == "" {
		return s.initialMIGState(), nil
	}
	data, err := os.ReadFile(s.stateFile)
	if errors.Is(err, fs.ErrNotExist) {
		st := s.initialMIGState()
		return st, s.saveMIG(st)
	}
	if err != nil {
		return nil, fmt.Errorf("mock MIG state: %w", err)
	}
	st := &migState{}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("mock MIG state %s: %w", s.stateFile, err)
	}
	if st.GPUs == nil {
		st.GPUs = map[string]*migGPU{}
	}
	return st, nil
}

func (s *Server) saveMIG(st *migState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.stateFile), 0o755); err != nil {
		return fmt.Errorf("mock MIG state: %w", err)
	}
	tmp := s.stateFile + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("mock MIG state: %w", err)
	}
	return os.Rename(tmp, s.stateFile)
}

// gpuState returns the state of the GPU at index i; nil if it is not in MIG mode.
func (s *Server) gpuState(st *migState, i int) *migGPU {
	if !s.migEnabled(i) {
		return nil
	}
	key := strconv.Itoa(s.profile.minor(i))
	if st.GPUs[key] == nil {
		st.GPUs[key] = &migGPU{}
	}
	return st.GPUs[key]
}

// createGI applies NVML's rules for a new GPU instance: a placement the profile offers, no
// memory slice shared with another instance, at most InstanceCount of the profile, at most the
// GPU's compute slices, and no more media engines (decoders, encoders, JPEG, OFA) than the
// whole GPU has.
func (s *Server) createGI(mg *migGPU, i int, p migGIProfile, pl nvml.GpuInstancePlacement) nvml.Return {
	t := s.profile.gpus[i].model.migTable
	valid := false
	for _, q := range p.placements {
		if q == pl {
			valid = true
		}
	}
	if !valid {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	full := t.full().info
	count := 0
	slices := p.info.SliceCount
	dec, enc, jpg, ofa := p.info.DecoderCount, p.info.EncoderCount, p.info.JpegCount, p.info.OfaCount
	for _, gi := range mg.GIs {
		if gi.Start < pl.Start+pl.Size && pl.Start < gi.Start+gi.Size {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		q, _ := t.profile(gi.ProfileIndex)
		if q.index == p.index {
			count++
		}
		slices += q.info.SliceCount
		dec += q.info.DecoderCount
		enc += q.info.EncoderCount
		jpg += q.info.JpegCount
		ofa += q.info.OfaCount
	}
	if count >= int(p.info.InstanceCount) || int(slices) > t.computeSlices ||
		dec > full.DecoderCount || enc > full.EncoderCount || jpg > full.JpegCount || ofa > full.OfaCount {
		return nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	id := 1
	for used := true; used; {
		used = false
		for _, gi := range mg.GIs {
			if gi.ID == id {
				used = true
				id++
			}
		}
	}
	mg.Generation++
	mg.GIs = append(mg.GIs, migGI{ID: id, ProfileIndex: p.index, Start: pl.Start, Size: pl.Size, Generation: mg.Generation})
	sort.Slice(mg.GIs, func(a, b int) bool { return mg.GIs[a].ID < mg.GIs[b].ID })
	return nvml.SUCCESS
}

// createCI adds a compute instance of profile c to gi; only one per GI, spanning it, is
// supported by the mock (which is what the plugin creates and what mig-parted's common
// configurations make).
func (s *Server) createCI(mg *migGPU, i int, gi *migGI, c nvml.ComputeInstanceProfileInfo) (int, nvml.Return) {
	t := s.profile.gpus[i].model.migTable
	p, _ := t.profile(gi.ProfileIndex)
	if c.SliceCount > p.info.SliceCount {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	if len(gi.CIs) > 0 {
		return 0, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	ciIndex := -1
	for k, x := range t.ci {
		if x.Id == c.Id {
			ciIndex = k
		}
	}
	if ciIndex < 0 {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	minor := s.profile.minor(i)
	uuid := stableid.UUID("MIG", s.nodeName, s.uuidProfile, strconv.Itoa(minor), "mig", strconv.Itoa(gi.Generation))
	gi.CIs = append(gi.CIs, migCI{ID: 0, ProfileIndex: ciIndex, UUID: uuid})
	return 0, nvml.SUCCESS
}

func (s *Server) crashIfAsked() {
	if s.stateFile == "" {
		return
	}
	f := filepath.Join(filepath.Dir(s.stateFile), CrashFileName)
	if os.Remove(f) == nil {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously; never return into the caller.
	}
}

// setMIGFuncs gives the device at index i the NVML MIG calls of its model.
func (s *Server) setMIGFuncs(d *mock.Device, i int) {
	g := s.profile.gpus[i]
	t := g.model.migTable
	// Changing MIG mode needs a GPU reset and is the operator's decision; the plugin must never
	// do it, and on the mock it cannot do it unnoticed.
	d.SetMigModeFunc = func(int) (nvml.Return, nvml.Return) {
		panic("nvmlmock: SetMigMode called; the plugin must never change a GPU's MIG mode")
	}
	if !g.model.mig || t == nil {
		return
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		if g.migMode {
			return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
		}
		return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return t.computeSlices, nvml.SUCCESS }
	d.GetGpuInstanceProfileInfoFunc = func(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		if index < 0 || index >= nvml.GPU_INSTANCE_PROFILE_COUNT {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		p, ok := t.profile(index)
		if !ok {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return p.info, nvml.SUCCESS
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		p, ok := t.profileByID(info.Id)
		if !ok {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return append([]nvml.GpuInstancePlacement(nil), p.placements...), nvml.SUCCESS
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		p, ok := t.profileByID(info.Id)
		if !ok || pl == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		ret := nvml.ERROR_NOT_SUPPORTED
		var id int
		err := s.withMIG(func(st *migState) bool {
			mg := s.gpuState(st, i)
			if mg == nil {
				return false
			}
			if ret = s.createGI(mg, i, p, *pl); ret != nvml.SUCCESS {
				return false
			}
			for _, gi := range mg.GIs {
				if gi.Start == pl.Start && gi.Size == pl.Size {
					id = gi.ID
				}
			}
			return true
		})
		if err != nil {
			return nil, nvml.ERROR_UNKNOWN
		}
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return s.gpuInstance(d, i, id), nvml.SUCCESS
	}
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		var ids []int
		ret := nvml.SUCCESS
		if err := s.withMIG(func(st *migState) bool {
			mg := s.gpuState(st, i)
			if mg == nil {
				ret = nvml.ERROR_NOT_SUPPORTED
				return false
			}
			for _, gi := range mg.GIs {
				if p, _ := t.profile(gi.ProfileIndex); p.info.Id == info.Id {
					ids = append(ids, gi.ID)
				}
			}
			return false
		}); err != nil {
			return nil, nvml.ERROR_UNKNOWN
		}
		out := make([]nvml.GpuInstance, 0, len(ids))
		for _, id := range ids {
			out = append(out, s.gpuInstance(d, i, id))
		}
		return out, ret
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		found := false
		if err := s.withMIG(func(st *migState) bool {
			if mg := s.gpuState(st, i); mg != nil {
				for _, gi := range mg.GIs {
					found = found || gi.ID == id
				}
			}
			return false
		}); err != nil {
			return nil, nvml.ERROR_UNKNOWN
		}
		if !found {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return s.gpuInstance(d, i, id), nvml.SUCCESS
	}
	// MIG device handles by index: the compute instances in GI, CI order.
	d.GetMigDeviceHandleByIndexFunc = func(n int) (nvml.Device, nvml.Return) {
		var h nvml.Device
		ret := nvml.ERROR_NOT_FOUND
		if err := s.withMIG(func(st *migState) bool {
			mg := s.gpuState(st, i)
			if mg == nil {
				ret = nvml.ERROR_NOT_SUPPORTED
				return false
			}
			k := 0
			for _, gi := range mg.GIs {
				for _, ci := range gi.CIs {
					if k == n {
						h, ret = s.migDevice(d, i, gi, ci), nvml.SUCCESS
					}
					k++
				}
			}
			return false
		}); err != nil {
			return nil, nvml.ERROR_UNKNOWN
		}
		return h, ret
	}
}

// lookupGI finds GI id of the GPU at index i in st.
func (s *Server) lookupGI(st *migState, i, id int) (*migGPU, *migGI) {
	mg := s.gpuState(st, i)
	if mg == nil {
		return nil, nil
	}
	for k := range mg.GIs {
		if mg.GIs[k].ID == id {
			return mg, &mg.GIs[k]
		}
	}
	return mg, nil
}

// gpuInstance is a handle on GI id; like NVML's, it goes stale when the GI is destroyed.
func (s *Server) gpuInstance(parent *mock.Device, i, id int) *mock.GpuInstance {
	t := s.profile.gpus[i].model.migTable
	gih := &mock.GpuInstance{}
	gih.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		var info nvml.GpuInstanceInfo
		ret := nvml.ERROR_NOT_FOUND
		if err := s.withMIG(func(st *migState) bool {
			if _, gi := s.lookupGI(st, i, id); gi != nil {
				p, _ := t.profile(gi.ProfileIndex)
				info = nvml.GpuInstanceInfo{Device: parent, Id: uint32(gi.ID), ProfileId: p.info.Id, Placement: nvml.GpuInstancePlacement{Start: gi.Start, Size: gi.Size}}
				ret = nvml.SUCCESS
			}
			return false
		}); err != nil {
			return info, nvml.ERROR_UNKNOWN
		}
		return info, ret
	}
	gih.GetComputeInstanceProfileInfoFunc = func(ciIndex, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		if ciIndex < 0 || ciIndex >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT || eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		var out nvml.ComputeInstanceProfileInfo
		ret := nvml.ERROR_NOT_FOUND
		if err := s.withMIG(func(st *migState) bool {
			_, gi := s.lookupGI(st, i, id)
			if gi == nil {
				return false
			}
			p, _ := t.profile(gi.ProfileIndex)
			ret = nvml.ERROR_NOT_SUPPORTED
			for _, c := range t.ci {
				if int(c.Id) == ciIndex && c.SliceCount <= p.info.SliceCount {
					out, ret = c, nvml.SUCCESS
				}
			}
			return false
		}); err != nil {
			return out, nvml.ERROR_UNKNOWN
		}
		return out, ret
	}
	gih.CreateComputeInstanceFunc = func(c *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		ret := nvml.ERROR_NOT_FOUND
		ciID := 0
		if err := s.withMIG(func(st *migState) bool {
			mg, gi := s.lookupGI(st, i, id)
			if gi == nil {
				return false
			}
			ciID, ret = s.createCI(mg, i, gi, *c)
			return ret == nvml.SUCCESS
		}); err != nil {
			return nil, nvml.ERROR_UNKNOWN
		}
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		s.crashIfAsked()
		return s.computeInstance(parent, gih, i, id, ciID), nvml.SUCCESS
	}
	gih.GetComputeInstancesFunc = func(c *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		var ids []int
		ret := nvml.ERROR_NOT_FOUND
		if err := s.withMIG(func(st *migState) bool {
			_, gi := s.lookupGI(st, i, id)
			if gi == nil {
				return false
			}
			ret = nvml.SUCCESS
			for _, ci := range gi.CIs {
				if t.ci[ci.ProfileIndex].Id == c.Id {
					ids = append(ids, ci.ID)
				}
			}
			return false
		}); err != nil {
			return nil, nvml.ERROR_UNKNOWN
		}
		var out []nvml.ComputeInstance
		for _, ciID := range ids {
			out = append(out, s.computeInstance(parent, gih, i, id, ciID))
		}
		return out, ret
	}
	gih.GetComputeInstanceByIdFunc = func(ciID int) (nvml.ComputeInstance, nvml.Return) {
		found := false
		if err := s.withMIG(func(st *migState) bool {
			if _, gi := s.lookupGI(st, i, id); gi != nil {
				for _, ci := range gi.CIs {
					found = found || ci.ID == ciID
				}
			}
			return false
		}); err != nil {
			return nil, nvml.ERROR_UNKNOWN
		}
		if !found {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return s.computeInstance(parent, gih, i, id, ciID), nvml.SUCCESS
	}
	// NVML refuses to destroy a GI that still has compute instances.
	gih.DestroyFunc = func() nvml.Return {
		ret := nvml.ERROR_NOT_FOUND
		if err := s.withMIG(func(st *migState) bool {
			mg, gi := s.lookupGI(st, i, id)
			if gi == nil {
				return false
			}
			if len(gi.CIs) > 0 {
				ret = nvml.ERROR_IN_USE
				return false
			}
			for k := range mg.GIs {
				if mg.GIs[k].ID == id {
					mg.GIs = append(mg.GIs[:k], mg.GIs[k+1:]...)
					break
				}
			}
			ret = nvml.SUCCESS
			return true
		}); err != nil {
			return nvml.ERROR_UNKNOWN
		}
		return ret
	}
	return gih
}

func (s *Server) computeInstance(parent *mock.Device, gih *mock.GpuInstance, i, giID, ciID int) *mock.ComputeInstance {
	t := s.profile.gpus[i].model.migTable
	cih := &mock.ComputeInstance{}
	cih.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		var info nvml.ComputeInstanceInfo
		ret := nvml.ERROR_NOT_FOUND
		if err := s.withMIG(func(st *migState) bool {
			if _, gi := s.lookupGI(st, i, giID); gi != nil {
				for _, ci := range gi.CIs {
					if ci.ID == ciID {
						info = nvml.ComputeInstanceInfo{Device: parent, GpuInstance: gih, Id: uint32(ci.ID), ProfileId: t.ci[ci.ProfileIndex].Id}
						ret = nvml.SUCCESS
					}
				}
			}
			return false
		}); err != nil {
			return info, nvml.ERROR_UNKNOWN
		}
		return info, ret
	}
	cih.DestroyFunc = func() nvml.Return {
		ret := nvml.ERROR_NOT_FOUND
		if err := s.withMIG(func(st *migState) bool {
			_, gi := s.lookupGI(st, i, giID)
			if gi == nil {
				return false
			}
			for k := range gi.CIs {
				if gi.CIs[k].ID == ciID {
					gi.CIs = append(gi.CIs[:k], gi.CIs[k+1:]...)
					ret = nvml.SUCCESS
					return true
				}
			}
			return false
		}); err != nil {
			return nvml.ERROR_UNKNOWN
		}
		return ret
	}
	return cih
}

// migDevice is the MIG device handle of a compute instance.
func (s *Server) migDevice(parent *mock.Device, i int, gi migGI, ci migCI) *mock.Device {
	t := s.profile.gpus[i].model.migTable
	p, _ := t.profile(gi.ProfileIndex)
	m := &mock.Device{}
	m.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	m.GetUUIDFunc = func() (string, nvml.Return) { return ci.UUID, nvml.SUCCESS }
	m.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return gi.ID, nvml.SUCCESS }
	m.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return ci.ID, nvml.SUCCESS }
	m.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS }
	m.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		b := p.info.MemorySizeMB << 20
		return nvml.Memory{Total: b, Free: b}, nvml.SUCCESS
	}
	return m
}

// Instances lists the mock's MIG instances as "gpu<minor>/gi<id>/<profile index>@<start>"
// with "/ci<id>" per compute instance, sorted: what tests compare before and after a restart.
func (s *Server) Instances() ([]string, error) {
	var out []string
	err := s.withMIG(func(st *migState) bool {
		for i := range s.profile.gpus {
			mg := s.gpuState(st, i)
			if mg == nil {
				continue
			}
			for _, gi := range mg.GIs {
				e := fmt.Sprintf("gpu%d/gi%d/%d@%d", s.profile.minor(i), gi.ID, gi.ProfileIndex, gi.Start)
				for _, ci := range gi.CIs {
					e += fmt.Sprintf("/ci%d", ci.ID)
				}
				out = append(out, e)
			}
		}
		return false
	})
	sort.Strings(out)
	return out, err
}
