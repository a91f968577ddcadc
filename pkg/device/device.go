// Package device holds the node-local model of an accelerator that every backend produces and
// every consumer (ResourceSlice builder, CDI writer, checkpoint) reads. It has no Kubernetes
// dependencies so that backends stay small and testable.
package device

import (
	"context"
	"fmt"
	"sort"
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
	// Type, Major and Minor are filled in so that a runtime need not stat the host path; mock
	// backends rely on that because their nodes do not exist on the host.
	Type  string `json:"type,omitempty"`
	Major int64  `json:"major,omitempty"`
	Minor int64  `json:"minor,omitempty"`
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
	Index        int    `json:"index"`
	UUID         string `json:"uuid"`
	ProductName  string `json:"productName"`
	Architecture string `json:"architecture,omitempty"`
	// DriverVersion as the driver reports it, e.g. "570.124.06"; it is published as a version
	// value only if it can be made semver, otherwise the device is left out with a warning.
	DriverVersion string `json:"driverVersion,omitempty"`
	// CUDAComputeCapability is "major.minor" for GPUs, empty for NPUs.
	CUDAComputeCapability string `json:"cudaComputeCapability,omitempty"`
	// PCIBusID is the extended BDF, lower case: "0000:17:00.0".
	PCIBusID string `json:"pciBusID,omitempty"`
	// PCIeRoot is the root complex, "pci0000:16"; empty if it could not be resolved.
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// NUMANode is nil when sysfs reports no affinity (-1).
	NUMANode    *int64 `json:"numaNode,omitempty"`
	MemoryBytes int64  `json:"memoryBytes"`
	// Nodes are the per-device special files (/dev/nvidia3, /dev/davinci3).
	Nodes []Node `json:"nodes"`
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
	// (nvidiactl, nvidia-uvm..., davinci_manager, devmm_svm, hisi_hdc).
	ControlNodes []Node `json:"controlNodes"`
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
