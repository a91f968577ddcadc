// Package device holds the node-local model of an accelerator that every backend produces and
// every consumer (ResourceSlice builder, CDI writer, checkpoint) reads. It has no Kubernetes
// dependencies so that backends stay small and testable.
package device

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// Kind is the family of a device. It becomes the `type` attribute in a ResourceSlice and selects
// how a container is given the device (NVIDIA_VISIBLE_DEVICES or ASCEND_VISIBLE_DEVICES).
type Kind string

const (
	KindGPU Kind = "gpu"
	KindNPU Kind = "npu"
)

// Node is a device special file a container must get.
type Node struct {
	// Path is where the container sees the node, e.g. /dev/nvidia0.
	Path string `json:"path"`
	// HostPath is the node on the host; empty means the same as Path.
	HostPath string `json:"hostPath,omitempty"`
	// Type, Major and Minor are filled in so that a runtime need not stat the host path: a node
	// built from /proc/devices exists on no host path, and mock nodes may be stand-ins.
	Type  string `json:"type,omitempty"`
	Major int64  `json:"major,omitempty"`
	Minor int64  `json:"minor,omitempty"`
	// FileMode is the node's permission bits where the driver prescribes them (the
	// /dev/nvidia-caps nodes: their capabilities file says), so that the runtime creates the
	// node with them instead of taking them from a host node that may not exist; zero leaves
	// them to the runtime. It is not encoded: checkpoint records hold nodes, and a field they did
	// not have would be a new record version that the plugin before it (the old pod of a rolling
	// update) moves aside; the driver takes the mode from the backend when it writes a spec.
	FileMode fs.FileMode `json:"-"`
	// GID is the group the runtime gives the node in the container: the host node's group where
	// it is not root's (Ascend's HwHiAiUser, the render and video groups of /dev/dri, NVIDIA's
	// NVreg_DeviceFileGID), with FileMode the host node's mode. A runtime copies neither owner
	// nor group from the host node: it uses the spec's, else the process's primary group, else
	// root's; a non-root process that reaches the host node through a supplementary group would
	// be refused it. Zero leaves it to the runtime. Not encoded, for the reason FileMode is not;
	// the driver takes it from the backend when it writes a spec.
	GID uint32 `json:"-"`
}

// Same reports whether n and o are the same device special file: the same path in the
// container and the same numbers. The mode and group are how the runtime creates the node, not which
// device it is, and checkpoint records hold neither (FileMode, GID). The host path is
// where the node is on the host, which the driver's layout decides (the host's /dev, or the GPU
// operator's driver root, devroot.go in the nvml backend) and an upgrade of the plugin or a
// move to the operator may change under a prepared claim: the runtime gets the numbers, so the
// device is the same.
func (n Node) Same(o Node) bool {
	n.FileMode, o.FileMode = 0, 0
	n.GID, o.GID = 0, 0
	n.HostPath, o.HostPath = "", ""
	return n == o
}

// DRMMajor is the character major of the kernel's DRM subsystem, whose nodes are
// /dev/dri/card<N> and /dev/dri/renderD<N> (Documentation/admin-guide/devices.txt: "226 char
// Direct Rendering Infrastructure (DRI)").
const DRMMajor = 226

// DRM reports whether n is a DRM node. A GPU's DRM nodes are attachments, not its identity:
// they exist only while the nvidia-drm module is loaded, which may happen (or stop) between two
// starts of the plugin, and their numbers depend on which other DRM drivers probed first. The
// GPU is its UUID and its /dev/nvidiaN.
func (n Node) DRM() bool { return n.Type == "c" && n.Major == DRMMajor }

// WithoutDRM returns nodes without their DRM nodes, in a new slice: what identifies the device,
// and what a MIG device of a GPU gets of the GPU's nodes (NVIDIA's container toolkit gives a MIG
// device its parent's /dev/nvidiaN and no DRM node: the DRM nodes reach the whole GPU).
func WithoutDRM(nodes []Node) []Node {
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		if !n.DRM() {
			out = append(out, n)
		}
	}
	return out
}

// Device is one accelerator as a backend found it. Values are final: a backend has already
// normalised the PCI bus ID and resolved pcieRoot/NUMA through sysfs.
type Device struct {
	// Name is the device's name in the ResourceSlice (a DNS label, e.g. "gpu-0"), NameFor(Kind,
	// Number): stable across restarts because it comes from the device node the kernel driver
	// gave the device, not from the order in which a library enumerated it.
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Number is the N of the device's node, /dev/nvidiaN (the NVIDIA minor number) or
	// /dev/davinciN (the Ascend device ID).
	Number int `json:"number"`
	// Index is the position in the vendor library's enumeration (the NVML index), published as
	// the index attribute because tools such as nvidia-smi speak it; it may change across
	// reboots and driver reloads, so nothing keys on it.
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// FormerUUIDs are UUIDs an earlier release of this backend published for the device behind
	// the same nodes (the Ascend backend's UUIDs before it mapped /dev/davinciN to its chip), so
	// that a claim it prepared is recognised as this device's, not refused as another's.
	FormerUUIDs  []string `json:"formerUUIDs,omitempty"`
	ProductName  string   `json:"productName"`
	Architecture string   `json:"architecture,omitempty"`
	// DriverVersion as the driver reports it, e.g. "570.124.06"; it is published as a version
	// value only if it can be made semver, otherwise the device is left out with a warning.
	DriverVersion string `json:"driverVersion,omitempty"`
	// CUDAComputeCapability is "major.minor" for GPUs, empty for NPUs.
	CUDAComputeCapability string `json:"cudaComputeCapability,omitempty"`
	// Brand is NVML's brand of a GPU as NVIDIA's tools spell it ("Nvidia", "Tesla",
	// "GeForce"...), and CUDADriverVersion the CUDA version the driver supports, "major.minor";
	// empty when unknown and for NPUs. Only the NVIDIA compatibility mode publishes them
	// (pkg/compat/nvidia), as NVIDIA's driver does.
	Brand             string `json:"brand,omitempty"`
	CUDADriverVersion string `json:"cudaDriverVersion,omitempty"`
	// PCIBusID is the extended BDF, lower case: "0000:17:00.0".
	PCIBusID string `json:"pciBusID,omitempty"`
	// PCIeRoot is the root complex, "pci0000:16"; empty if it could not be resolved.
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// NUMANode is nil when sysfs reports no affinity (-1).
	NUMANode    *int64 `json:"numaNode,omitempty"`
	MemoryBytes int64  `json:"memoryBytes"`
	// Nodes are the per-device special files (/dev/nvidia3, /dev/davinci3); for a MIG device
	// the parent GPU's nodes and then its GPU- and compute-instance /dev/nvidia-caps nodes.
	Nodes []Node `json:"nodes"`
	// MIG is set on MIG devices (static and dynamic); nil for whole GPUs and NPUs.
	MIG *MIG `json:"mig,omitempty"`
	// Consumes are the shared counters the device uses up when allocated (dynamic MIG).
	Consumes []CounterConsumption `json:"consumes,omitempty"`
	// Topology is the GPU's place in the node's NVLink graph and fabric, or the NPU's HCCS
	// group (topology.go); nil for MIG devices, GPUs without an active NVLink link and NPUs
	// whose group cannot be read.
	Topology *Topology `json:"topology,omitempty"`
}

// CounterSet is a set of shared counters of the node's pool (one per GPU in dynamic MIG mode).
type CounterSet struct {
	Name string `json:"name"`
	// Counters by name; values are plain integers (bytes for memory).
	Counters map[string]int64 `json:"counters"`
}

// CounterConsumption is what a device uses of one counter set.
type CounterConsumption struct {
	CounterSet string           `json:"counterSet"`
	Counters   map[string]int64 `json:"counters"`
}

// Failed is a device a backend found but could not enumerate: one of its queries failed. It is
// left out of the inventory's Devices, so one bad device does not take the node's other devices
// down; it is reported so that an operator learns why the node has fewer devices than expected.
type Failed struct {
	// Index is what the device's Index would have been (the NVML index; for NPUs its number);
	// -1 if unknown.
	Index int `json:"index"`
	// Name is the name the device would have had, empty if the failure came before its number
	// was known.
	Name string `json:"name,omitempty"`
	// PCIBusID is the extended BDF, empty if the failure came before it was known.
	PCIBusID string `json:"pciBusID,omitempty"`
	// Err is what failed, naming the query.
	Err error `json:"-"`
}

// String identifies the device by whatever is known about it, for logs and events.
func (f Failed) String() string {
	s := f.Name
	if s == "" {
		s = "device"
	}
	if f.Index >= 0 {
		s += fmt.Sprintf(" (index %d)", f.Index)
	}
	if f.PCIBusID != "" {
		s += " (PCI " + f.PCIBusID + ")"
	}
	return s
}

// Inventory is everything a backend found on the node.
type Inventory struct {
	Kind    Kind     `json:"kind"`
	Devices []Device `json:"devices"`
	// Failed are the devices whose queries failed, in enumeration order; they are not in
	// Devices.
	Failed []Failed `json:"failed,omitempty"`
	// ControlNodes are the special files every container with at least one device needs
	// (nvidiactl, nvidia-uvm..., davinci_manager, devmm_svm, hisi_hdc), as enumeration found
	// them.
	ControlNodes []Node `json:"controlNodes"`
	// ResolveControlNodes, if set, looks the control nodes up again: they can appear after
	// enumeration (CUDA loads nvidia-uvm on first use), so a CDI spec is written with what it
	// answers then. It needs no open backend, and may be called concurrently.
	ResolveControlNodes func() ([]Node, error) `json:"-"`
	// MIGParents are the GPUs in MIG mode; they are not in Devices, their existing MIG
	// devices are.
	MIGParents []MIGParent `json:"migParents,omitempty"`
	// CounterSets are the pool's shared counters (dynamic MIG), sorted by name.
	CounterSets []CounterSet `json:"counterSets,omitempty"`
}

// Backend enumerates the devices of one kind on this node. NVML, NPU and their mocks implement
// it; the driver knows only this interface.
type Backend interface {
	// Kind is the kind of every device this backend returns.
	Kind() Kind
	// Enumerate returns the node's devices sorted by Number. A device whose own queries fail is
	// reported in Inventory.Failed, not as an error: an error means the backend as a whole cannot
	// enumerate (the library does not load, the device count cannot be read). It may be called
	// more than once.
	Enumerate(ctx context.Context) (*Inventory, error)
	// Close releases the backend (e.g. nvml.Shutdown).
	Close() error
}

// Sort orders devices by Number, then index, then name, so that every consumer sees them in one
// order, and the same order whatever order the library enumerated them in.
func Sort(devs []Device) {
	sort.SliceStable(devs, func(i, j int) bool {
		if devs[i].Number != devs[j].Number {
			return devs[i].Number < devs[j].Number
		}
		if devs[i].Index != devs[j].Index {
			return devs[i].Index < devs[j].Index
		}
		return devs[i].Name < devs[j].Name
	})
}

// NameFor is the slice name of the device of a kind whose node is /dev/<prefix><number>
// ("gpu-3" for /dev/nvidia3, "npu-3" for /dev/davinci3).
func NameFor(kind Kind, number int) string { return fmt.Sprintf("%s-%d", kind, number) }

// Lookup indexes an inventory's devices by name.
func (inv *Inventory) Lookup() map[string]*Device {
	m := make(map[string]*Device, len(inv.Devices))
	for i := range inv.Devices {
		m[inv.Devices[i].Name] = &inv.Devices[i]
	}
	return m
}

// MIGName is the name of the MIG device of profile at placement start on GPU parent:
// "gpu-0-mig-1g5gb-3", "gpu-0-mig-1g5gb-me-3". The profile name loses its dots and turns
// "+" into "-", so that the name is a DNS label; it is stable because profile and placement
// are what the device is, in static and dynamic MIG alike.
func MIGName(parent, profile string, start int) string {
	p := strings.NewReplacer(".", "", "+", "-").Replace(profile)
	return fmt.Sprintf("%s-mig-%s-%d", parent, p, start)
}

// MIGPlacement is where a GPU instance sits in its GPU's memory slices, as NVML reports it:
// slices [Start, Start+Size).
type MIGPlacement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Overlaps reports whether two placements share a memory slice.
func (p MIGPlacement) Overlaps(q MIGPlacement) bool {
	return p.Start < q.Start+q.Size && q.Start < p.Start+p.Size
}

// MIGProfile is one GPU-instance profile of a MIG-capable GPU, with what an instance of it gets
// and where NVML can place it.
type MIGProfile struct {
	// Name is NVIDIA's profile name, "1g.5gb", "1g.10gb+me".
	Name string `json:"name"`
	// ID is NVML's GPU-instance profile index (nvml.GPU_INSTANCE_PROFILE_*), the argument of
	// GetGpuInstanceProfileInfo; GIProfileID is the ID NVML reports in the profile info and in
	// an instance's info.
	ID          int `json:"id"`
	GIProfileID int `json:"giProfileID"`
	// SliceCount is the number of compute slices ("1g" is 1).
	SliceCount      int   `json:"sliceCount"`
	InstanceCount   int   `json:"instanceCount"`
	Multiprocessors int   `json:"multiprocessors"`
	CopyEngines     int   `json:"copyEngines"`
	Decoders        int   `json:"decoders"`
	Encoders        int   `json:"encoders"`
	JPEGEngines     int   `json:"jpegEngines"`
	OFAEngines      int   `json:"ofaEngines"`
	MemoryBytes     int64 `json:"memoryBytes"`
	// Placements are NVML's possible placements, sorted by Start.
	Placements []MIGPlacement `json:"placements"`
}

// MIGInstance is an existing GPU instance with one compute instance on a GPU, as NVML lists it.
type MIGInstance struct {
	// ParentUUID is the UUID of the GPU.
	ParentUUID string `json:"parentUUID"`
	// Profile is the GPU-instance profile name.
	Profile string `json:"profile"`
	// ProfileID is the profile's index (MIGProfile.ID).
	ProfileID int          `json:"profileID"`
	Placement MIGPlacement `json:"placement"`
	// GI and CI are NVML's GPU-instance and compute-instance IDs.
	GI int `json:"gi"`
	CI int `json:"ci"`
	// CIProfileID is the compute-instance profile index; CISliceCount its compute slices.
	CIProfileID  int `json:"ciProfileID"`
	CISliceCount int `json:"ciSliceCount"`
	// UUID is the MIG device's UUID, "MIG-...".
	UUID string `json:"uuid"`
	// CapNodes are the /dev/nvidia-caps nodes of the GPU instance and the compute instance,
	// from /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<g>[/ci<c>]/access.
	CapNodes []Node `json:"capNodes"`
}

// MIG describes a device that is a MIG partition of a GPU: an existing MIG device (static) or a
// profile and placement that is created when a claim is prepared (dynamic).
type MIG struct {
	// Parent is the name of the GPU ("gpu-0"), ParentUUID its UUID.
	Parent     string       `json:"parent"`
	ParentUUID string       `json:"parentUUID"`
	Profile    MIGProfile   `json:"profile"`
	Placement  MIGPlacement `json:"placement"`
	// Dynamic devices have no instance until prepared; Instance is then nil.
	Dynamic  bool         `json:"dynamic,omitempty"`
	Instance *MIGInstance `json:"instance,omitempty"`
}

// MIGParent is a GPU in MIG mode. It is not in Inventory.Devices: in MIG mode a GPU runs work
// only through MIG devices, so it is never published as a whole allocatable GPU (except by the
// dynamic-MIG model, which publishes it as a device that consumes every counter).
type MIGParent struct {
	// GPU is the GPU as it would have been published.
	GPU Device `json:"gpu"`
	// Profiles are the GPU-instance profiles NVML supports on it, sorted by slice count, then
	// memory, then name.
	Profiles []MIGProfile `json:"profiles"`
	// MemorySlices is the number of memory slices placements index (8 on A100 and H100).
	MemorySlices int `json:"memorySlices"`
	// Instances are the MIG devices that exist now, sorted by placement.
	Instances []MIGInstance `json:"instances"`
}

// Partitioner creates and destroys MIG instances; the NVML backend implements it. It never
// changes a GPU's MIG mode. The creation is two calls so that the caller can record the GPU
// instance's ID before the compute instance is made.
type Partitioner interface {
	// CreateGI creates a GPU instance of the profile with index profileID at placement on the
	// GPU with parentUUID and returns its ID.
	CreateGI(ctx context.Context, parentUUID string, profileID int, placement MIGPlacement) (gi int, err error)
	// CreateCI creates in GPU instance gi one compute instance spanning it and returns the new
	// MIG device.
	CreateCI(ctx context.Context, parentUUID string, gi int) (MIGInstance, error)
	// DestroyMIG destroys the GPU instance's compute instances and then the GPU instance. An
	// instance that does not exist is not an error.
	DestroyMIG(ctx context.Context, parentUUID string, gi int) error
	// ListMIG returns the GPU instances that exist now on the GPUs in MIG mode, with their
	// compute instance (CI -1 and no UUID for a GPU instance without one). A GPU that cannot
	// be read is left out and named in a GPUErrors error, returned with the instances of the
	// others (errors.Is ErrGPULost for a GPU that fell off the bus); any other error means
	// nothing could be listed.
	ListMIG(ctx context.Context) ([]MIGInstance, error)
}
