// Package nvmlmock provides mock NVML machines ("profiles") built on go-nvml's function mocks,
// each with a matching in-memory sysfs and fixed device node numbers, so that the real NVML
// backend (pkg/backend/nvml) runs unchanged against them: the same NVML calls, the same bus ID
// normalisation, and the same deviceattribute helpers resolving pcieRoot and numaNode.
//
// GPU UUIDs are derived from sha256(nodeName/profile/minor): stable across restarts of one node,
// different between nodes, as real UUIDs are. Variant profiles of one machine (reordered NVML
// indices, swapped boards, a lost GPU) derive them from the base profile's name, so that the same
// board keeps its UUID across a restart onto a variant.
package nvmlmock

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing/fstest"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/stableid"
	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// Device numbers of the NVIDIA nodes as the driver registers them: nvidiaN is 195:N, nvidiactl
// 195:255, nvidia-modeset 195:254. nvidia-uvm's major is allocated dynamically; 508 is a
// typical value.
const (
	nvidiaMajor      = 195
	nvidiaCtlMinor   = 255
	nvidiaModesetMin = 254
	uvmMajor         = 508
)

// Server is one mock NVML machine. Its embedded *mock.Interface and its Devices are go-nvml
// function mocks: a test may replace any *Func field (for example to make one call fail) before
// building a backend with Backend.
type Server struct {
	*mock.Interface
	// Devices are the GPUs by NVML index.
	Devices []*mock.Device
	// SysFS is the machine's /sys: bus/pci/devices/<bdf> symlinks into devices/pci<root>/...
	// and each GPU's vendor, device, class and numa_node files.
	SysFS fstest.MapFS

	profile profile
	// nodeName and uuidProfile make the GPU and MIG UUIDs.
	nodeName, uuidProfile string

	// MIG state (mig.go): migMu guards migState; stateFile, if set, is where it persists.
	migMu     sync.Mutex
	migState  *migState
	stateFile string
	// moduleFile, with the state directory, is the loaded kernel module (module.go).
	moduleFile string

	dev *devNodes
	// faults are the injected faults (health.go), nil without a fault directory.
	faults *faults
}

// NewServer builds the mock machine of a profile for a node.
func NewServer(profileName, nodeName string) (*Server, error) {
	p, ok := lookupProfile(profileName)
	if file, isShape := strings.CutPrefix(profileName, ShapePrefix); isShape {
		shape, err := ReadShape(file)
		if err != nil {
			return nil, err
		}
		p, _ = shape.profile()
		ok = true
	}
	if !ok {
		return nil, fmt.Errorf("unknown NVML mock profile %q: valid profiles are %s, bench-<N> (N GPUs, 1..%d), or %s<file> (a declared machine)", profileName, strings.Join(Profiles(), ", "), maxBenchGPUs, ShapePrefix)
	}
	if nodeName == "" {
		return nil, fmt.Errorf("NVML mock profile %s: node name is required (it makes the GPU UUIDs)", profileName)
	}
	uuidProfile := p.uuidProfile
	if uuidProfile == "" {
		uuidProfile = profileName
	}
	if file, isShape := strings.CutPrefix(profileName, ShapePrefix); isShape {
		// A file name may hold a "/", which stableid's parts must not.
		uuidProfile = fmt.Sprintf("shape-%x", sha256.Sum256([]byte(file)))
	}
	s := &Server{Interface: &mock.Interface{}, SysFS: fstest.MapFS{}, profile: p, nodeName: nodeName, uuidProfile: uuidProfile,
		dev: &devNodes{modeset: p.modeset, dri: map[string]int64{}}}
	for i, g := range p.gpus {
		minor := p.minor(i)
		s.dev.minors = append(s.dev.minors, minor)
		board := minor
		if m, ok := p.uuidOf[minor]; ok {
			board = m
		}
		d := s.newDevice(i, minor, g, stableid.UUID("GPU", nodeName, uuidProfile, strconv.Itoa(board)))
		s.setMIGFuncs(d, i)
		s.setComputeModeFuncs(d)
		s.setNVLinkFuncs(d, i)
		if p.lost[minor] {
			loseDevice(d)
		}
		s.Devices = append(s.Devices, d)
		s.addSysfs(g, minor)
	}
	s.setInterfaceFuncs()
	s.addCoherentMemory(profileName)
	return s, nil
}

// Backend returns the real NVML backend wired to this mock machine; opts (a test's own stat,
// for one) apply after the mock's.
func (s *Server) Backend(opts ...nvmlbackend.Option) *nvmlbackend.Backend {
	return nvmlbackend.New(s.Interface, s.SysFS, "/dev", append([]nvmlbackend.Option{nvmlbackend.WithStat(s.dev.stat), nvmlbackend.WithProc(s.ProcFS()), nvmlbackend.WithFabricInfo(s.FabricInfoV3)}, opts...)...)
}

// UseStateDir keeps the machine's MIG state in dir (see WithStateDir).
func (s *Server) UseStateDir(dir string) {
	s.migMu.Lock()
	defer s.migMu.Unlock()
	s.stateFile = filepath.Join(dir, StateFileName)
	s.moduleFile = filepath.Join(dir, ModuleFileName)
	s.migState = nil
}

// Option changes what New builds.
type Option func(*options)

type options struct {
	driverVersions   map[int]string
	faultDir         string
	noRecoveryAction bool
	stateDir         string
	uvm              *UVMState
	driverRoot       string
	host             *hostLayout
	devNodes         string
}

// hostLayout is where the machine's device nodes are looked up on this host (WithHost).
type hostLayout struct{ devRoot, driverRoot, hostDriverRoot string }

// WithHost makes the machine's device nodes files on this host, found as the real backend finds
// a real node's: in the driver root's dev/ when it has one (driverRoot as this process sees it,
// hostDriverRoot as the host does), else under devRoot, the host's /dev; each read by StatFile.
// Only the nodes laid out there are found (WriteDevNodes, WithDevNodes, or a test's mknod).
// Without it, the machine's nodes are those of a host whose /dev holds them (Server.Stat).
func WithHost(devRoot, driverRoot, hostDriverRoot string) Option {
	return func(o *options) { o.host = &hostLayout{devRoot, driverRoot, hostDriverRoot} }
}

// WithDevNodes has the machine's driver install lay its device nodes and DRM nodes out under
// dir at start (WriteDevNodes, WriteDRMNodes), as nvidia-modprobe does on a real node: for a
// mock node whose driver the mock installs itself, in the driver root it generates.
func WithDevNodes(dir string) Option { return func(o *options) { o.devNodes = dir } }

// WithDeviceDriverVersion makes the GPU at index report version as its driver version, for
// tests that one device with a bad version is left out while the others are published. NVML
// has one driver version per host, so this is applied to the real backend's inventory, not
// inside the mock.
func WithDeviceDriverVersion(index int, version string) Option {
	return func(o *options) {
		if o.driverVersions == nil {
			o.driverVersions = map[int]string{}
		}
		o.driverVersions[index] = version
	}
}

// New returns the real NVML backend over the mock machine of profile for nodeName. An unknown
// profile is an error that lists the valid ones.
func New(profileName, nodeName string, opts ...Option) (device.Backend, error) {
	s, err := NewServer(profileName, nodeName)
	if err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var lib string
	if o.driverRoot != "" {
		if lib, err = s.useDriverRoot(o.driverRoot); err != nil {
			return nil, err
		}
	}
	if o.stateDir != "" {
		s.UseStateDir(o.stateDir)
	}
	var backendOpts []nvmlbackend.Option
	if lib != "" {
		// As NewFromSystem tells the real backend where its library is from.
		backendOpts = append(backendOpts, nvmlbackend.WithLibrary(s.process(o.driverRoot), lib))
	}
	if o.uvm != nil {
		s.SetUVM(*o.uvm)
	}
	if o.faultDir != "" {
		s.injectFaults(o.faultDir, o.noRecoveryAction)
	}
	if o.devNodes != "" {
		if err := s.WriteDevNodes(o.devNodes); err != nil {
			return nil, err
		}
		if err := s.WriteDRMNodes(o.devNodes); err != nil {
			return nil, err
		}
	}
	var b *nvmlbackend.Backend
	if o.host != nil {
		b = nvmlbackend.New(s.Interface, s.SysFS, o.host.devRoot, append([]nvmlbackend.Option{nvmlbackend.WithStat(StatFile), nvmlbackend.WithProc(s.ProcFS()), nvmlbackend.WithFabricInfo(s.FabricInfoV3),
			nvmlbackend.WithDriverRoot(o.host.driverRoot, o.host.hostDriverRoot)}, backendOpts...)...)
	} else {
		b = s.Backend(backendOpts...)
	}
	if len(o.driverVersions) == 0 {
		return b, nil
	}
	return &overrideBackend{Backend: b, driverVersions: o.driverVersions}, nil
}

type overrideBackend struct {
	device.Backend
	driverVersions map[int]string
}

func (b *overrideBackend) Enumerate(ctx context.Context) (*device.Inventory, error) {
	inv, err := b.Backend.Enumerate(ctx)
	if err != nil {
		return nil, err
	}
	for i := range inv.Devices {
		if v, ok := b.driverVersions[inv.Devices[i].Index]; ok {
			inv.Devices[i].DriverVersion = v
		}
	}
	return inv, nil
}

// nvmlBusID is NVML's spelling of a bus ID: 8-digit domain, upper-case hex.
func nvmlBusID(busID string) string { return strings.ToUpper("0000" + busID) }

// loseDevice makes d a GPU that has fallen off the bus. The kernel driver keeps the minor number
// and PCI location of a lost GPU, so those still answer; everything that asks the GPU fails.
func loseDevice(d *mock.Device) {
	lost := nvml.ERROR_GPU_IS_LOST
	d.GetUUIDFunc = func() (string, nvml.Return) { return "", lost }
	d.GetNameFunc = func() (string, nvml.Return) { return "", lost }
	d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return 0, lost }
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return 0, lost }
	d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return 0, 0, lost }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, lost }
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, lost }
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, lost }
	d.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) { return 0, lost }
}

func (s *Server) newDevice(index, minor int, g gpu, uuid string) *mock.Device {
	d := &mock.Device{}
	m := g.model
	var dom, bus, dev, fn uint32
	if _, err := fmt.Sscanf(g.busID, "%x:%x:%x.%x", &dom, &bus, &dev, &fn); err != nil {
		panic(fmt.Sprintf("nvmlmock: bad bus ID %q in profile: %v", g.busID, err))
	}
	pci := nvml.PciInfo{
		Domain:      dom,
		Bus:         bus,
		Device:      dev,
		PciDeviceId: uint32(m.pciDevice)<<16 | 0x10de,
	}
	copy(pci.BusId[:len(pci.BusId)-1], nvmlBusID(g.busID))
	copy(pci.BusIdLegacy[:len(pci.BusIdLegacy)-1], strings.ToUpper(g.busID))

	d.GetIndexFunc = func() (int, nvml.Return) { return index, nvml.SUCCESS }
	d.GetMinorNumberFunc = func() (int, nvml.Return) { return minor, nvml.SUCCESS }
	d.GetUUIDFunc = func() (string, nvml.Return) { return uuid, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return m.name, nvml.SUCCESS }
	d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return nvml.BRAND_NVIDIA, nvml.SUCCESS }
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return m.arch, nvml.SUCCESS }
	d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return m.ccMajor, m.ccMinor, nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: m.memory, Free: m.memory}, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pci, nvml.SUCCESS }
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		if g.numa < 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return g.numa, nvml.SUCCESS
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		if !m.mig {
			return 0, 0, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		j := s.indexOf(other)
		if j < 0 {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return commonAncestor(g, s.profile.gpus[j], index == j), nvml.SUCCESS
	}
	return d
}

func (s *Server) indexOf(d nvml.Device) int {
	for i, x := range s.Devices {
		if nvml.Device(x) == d {
			return i
		}
	}
	return -1
}

// commonAncestor is NVML's topology level between two GPUs, from their places in the tree.
func commonAncestor(a, b gpu, same bool) nvml.GpuTopologyLevel {
	switch {
	case same:
		return nvml.TOPOLOGY_INTERNAL
	case a.root == b.root && len(a.bridges) > 1 && len(a.bridges) == len(b.bridges) &&
		strings.Join(a.bridges[:len(a.bridges)-1], "/") == strings.Join(b.bridges[:len(b.bridges)-1], "/"):
		return nvml.TOPOLOGY_SINGLE
	case a.root == b.root && len(a.bridges) > 0 && len(b.bridges) > 0 && a.bridges[0] == b.bridges[0]:
		return nvml.TOPOLOGY_MULTIPLE
	case a.root == b.root:
		return nvml.TOPOLOGY_HOSTBRIDGE
	case a.numa >= 0 && a.numa == b.numa:
		return nvml.TOPOLOGY_NODE
	default:
		return nvml.TOPOLOGY_SYSTEM
	}
}

func (s *Server) setInterfaceFuncs() {
	p := s.profile
	s.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	s.ErrorStringFunc = func(r nvml.Return) string { return r.Error() }
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return p.driverVersion, nvml.SUCCESS }
	s.SystemGetNVMLVersionFunc = func() (string, nvml.Return) { return "12." + p.driverVersion, nvml.SUCCESS }
	s.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return p.cudaDriverVersion, nvml.SUCCESS }
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return len(s.Devices), nvml.SUCCESS }
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(s.Devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return s.Devices[i], nvml.SUCCESS
	}
	s.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for _, d := range s.Devices {
			if u, _ := d.GetUUID(); u == uuid {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	s.DeviceGetHandleByPciBusIdFunc = func(busID string) (nvml.Device, nvml.Return) {
		for i, g := range p.gpus {
			if strings.EqualFold(busID, g.busID) || strings.EqualFold(busID, nvmlBusID(g.busID)) {
				return s.Devices[i], nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	s.DeviceGetTopologyCommonAncestorFunc = func(a, b nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		return a.GetTopologyCommonAncestor(b)
	}
}

// addSysfs adds a GPU to the synthetic sysfs as the kernel lays it out: the device directory
// sits under its root complex and bridges in devices/, and bus/pci/devices/<bdf> is a relative
// symlink to it. With nvidia-drm loaded the GPU's DRM nodes are its children (drm.go).
func (s *Server) addSysfs(g gpu, minor int) {
	dir := path.Join(append(append([]string{"devices", g.root}, g.bridges...), g.busID)...)
	s.SysFS[path.Join("bus/pci/devices", g.busID)] = &fstest.MapFile{
		Data: []byte("../../../" + dir),
		Mode: fs.ModeSymlink | 0o777,
	}
	file := func(name, content string) {
		s.SysFS[path.Join(dir, name)] = &fstest.MapFile{Data: []byte(content + "\n"), Mode: 0o444}
	}
	file("vendor", "0x10de")
	file("device", fmt.Sprintf("0x%04x", g.model.pciDevice))
	file("class", "0x030200") // 3D controller, as data-centre GPUs report
	file("numa_node", strconv.Itoa(g.numa))
	for name, m := range s.profile.drmNodes(minor) {
		file(path.Join("drm", name, "dev"), fmt.Sprintf("%d:%d", drmMajor, m))
		s.dev.dri[name] = m
	}
}
