// Package nvml is the NVIDIA GPU backend: it enumerates GPUs through NVML and resolves their PCIe
// root and NUMA node through sysfs with the standard deviceattribute helpers, so that the values
// match what every other DRA driver on the node publishes.
//
// The NVML library, sysfs, /proc and the stat of device nodes are all injected: the real backend
// gets libnvidia-ml, /sys, /proc and /dev; the mock backend (pkg/backend/nvmlmock) gets go-nvml's
// function mocks, an in-memory sysfs and /proc and fixed device numbers, and runs this same code.
package nvml

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"sync"

	nvdevice "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/devnode"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// ErrLibraryNotFound is returned (wrapped) when libnvidia-ml cannot be loaded. It is the usual
// misconfiguration of a GPU plugin, so the message says what to check.
// ErrVersionMismatch is returned (wrapped) when NVML refuses to work because the driver's
// libraries are not the version of the loaded kernel module (NVML_ERROR_LIB_RM_VERSION_MISMATCH):
// the driver was upgraded on the host and the node not rebooted. It lasts until the module is
// reloaded, so the plugin serves what it prepared instead of exiting (docs/troubleshooting.md).
var ErrVersionMismatch = errors.New("NVIDIA driver/library version mismatch: the driver's libraries are not the loaded kernel module's version (upgraded without a reboot); reboot the node, or reload the nvidia kernel modules once no process uses a GPU")

var ErrLibraryNotFound = errors.New("NVML library libnvidia-ml.so.1 not found: is the NVIDIA driver installed and the library mounted into the plugin container?")

// StatFunc returns the type ("c" or "b"), numbers, group and mode of the device node at path. A
// missing node must yield an error matching fs.ErrNotExist.
type StatFunc func(path string) (devnode.Info, error)

// StatDevice is the StatFunc for real hosts: it stats the node.
func StatDevice(path string) (devnode.Info, error) { return devnode.Stat(path) }

// Backend implements device.Backend with NVML.
type Backend struct {
	lib   nvml.Interface
	sysfs fs.ReadLinkFS
	// nodes finds device nodes (devroot.go); its proc is the host's /proc: /proc/devices for
	// the majors of nodes the runtime must create (control nodes missing from every dev root,
	// control.go; the MIG devices' caps nodes, caps.go) and the driver's capabilities files.
	nodes nodeFinder

	// mu serialises NVML use: Init/Shutdown pair up once, and Enumerate may be called from more
	// than one goroutine.
	mu     sync.Mutex
	inited bool
	// process and libraryPath are where NVML comes from (WithLibrary, library.go).
	process, libraryPath string
	// fabricInfo reads a GPU's fabric info with its health mask (WithFabricInfo, fabrichealth.go).
	fabricInfo FabricInfoFunc
}

var _ device.Backend = (*Backend)(nil)

// Option changes a Backend.
type Option func(*Backend)

// WithStat replaces the stat of device nodes, for mocks whose nodes do not exist on the host.
func WithStat(f StatFunc) Option { return func(b *Backend) { b.nodes.stat = f } }

// New returns a backend over lib. sysfs is the host's /sys (os.DirFS("/sys") on a real node);
// devRoot is where the host's /dev is visible to this process, used only to stat nodes: the
// published paths are always /dev/<name>, the container's view, with the host's path where it
// differs (WithDriverRoot). NVML is initialised on the first Enumerate.
func New(lib nvml.Interface, sysfs fs.ReadLinkFS, devRoot string, opts ...Option) *Backend {
	b := &Backend{lib: lib, sysfs: sysfs, nodes: nodeFinder{devRoot: devRoot, stat: StatDevice}, fabricInfo: LibraryFabricInfo}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Kind implements device.Backend.
func (b *Backend) Kind() device.Kind { return device.KindGPU }

// Close shuts NVML down if Enumerate initialised it.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.inited {
		return nil
	}
	b.inited = false
	if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml Shutdown: %w", ret)
	}
	return nil
}

// initLocked calls nvml Init once. A failed Init is not remembered, so a later Enumerate retries
// (the driver may have been loaded in the meantime).
func (b *Backend) initLocked(ctx context.Context) (err error) {
	if b.inited {
		return nil
	}
	if err := b.bindLibrary(); err != nil {
		return err
	}
	// go-nvml loads the library with dlopen and resolves symbols on Init; on some broken
	// installations (a library of the wrong architecture or an incompatible version) that path
	// panics instead of returning an error. A plugin must report, not crash.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w (loading it panicked: %v)", ErrLibraryNotFound, r)
		}
	}()
	switch ret := b.lib.Init(); ret {
	case nvml.SUCCESS:
		b.inited = true
		klog.FromContext(ctx).V(2).Info("NVML initialised")
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w (nvml Init: %w)", ErrLibraryNotFound, ret)
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		if loaded := b.nodes.moduleVersion(); loaded != "" {
			return fmt.Errorf("%w (loaded kernel module %s; nvml Init: %w)", ErrVersionMismatch, loaded, ret)
		}
		return fmt.Errorf("%w (nvml Init: %w)", ErrVersionMismatch, ret)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("NVIDIA kernel driver is not loaded on this node (nvml Init: %w)", ret)
	default:
		return fmt.Errorf("nvml Init: %w", ret)
	}
}

// Enumerate implements device.Backend. Only a failure that makes NVML as a whole unusable (Init,
// DeviceGetCount) is an error. A GPU whose own queries fail is reported in Inventory.Failed with
// the NVML call and whatever is known of it (index, name, PCI bus ID), and the others are
// enumerated: one lost GPU (Xid 79, "GPU has fallen off the bus") must not stop the node from
// serving, and unpreparing, the other seven.
func (b *Backend) Enumerate(ctx context.Context) (*device.Inventory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initLocked(ctx); err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)

	// One value for the host, informational: without it the GPUs are published without the
	// driverVersion attribute rather than not at all.
	driverVersion, ret := b.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		logger.Error(fmt.Errorf("nvml SystemGetDriverVersion: %w", ret), "Cannot read the driver version, publishing GPUs without driverVersion")
		driverVersion = ""
	}
	count, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml DeviceGetCount: %w", ret)
	}
	// Informational too (the NVIDIA compatibility mode's cudaDriverVersion attribute), in
	// NVIDIA's form: 12080 is "12.8".
	cudaDriverVersion := ""
	if v, ret := b.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		cudaDriverVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	} else {
		logger.Info("Cannot read the CUDA driver version, leaving it out", "err", fmt.Errorf("nvml SystemGetCudaDriverVersion: %w", ret))
	}

	inv := &device.Inventory{Kind: device.KindGPU, Devices: make([]device.Device, 0, count)}
	byName := make(map[string]int, count)
	for i := 0; i < count; i++ {
		d, err := b.enumerateOne(klog.NewContext(ctx, logger.WithValues("index", i)), i, driverVersion)
		d.CUDADriverVersion = cudaDriverVersion
		if err == nil {
			if j, dup := byName[d.Name]; dup {
				// Two GPUs cannot share a minor; if NVML says so, neither answer can be trusted
				// for the second, and publishing it would give two devices one name.
				err = fmt.Errorf("gpu index %d: minor number %d is also that of gpu index %d", i, d.Number, j)
			}
		}
		// A GPU in MIG mode is not published as a whole GPU: its MIG devices are (mig.go).
		var migParent *device.MIGParent
		var migDevs []device.Device
		if err == nil {
			if migParent, err = b.enumerateMIG(ctx, i, &d); err == nil && migParent != nil {
				migDevs, err = b.staticMIGDevices(migParent)
			}
		}
		if err != nil {
			f := device.Failed{Index: i, Name: d.Name, PCIBusID: d.PCIBusID, Err: err}
			logger.Error(err, "Leaving GPU out: an NVML query for it failed", "device", f.String())
			inv.Failed = append(inv.Failed, f)
			continue
		}
		byName[d.Name] = i
		if migParent != nil {
			inv.MIGParents = append(inv.MIGParents, *migParent)
			inv.Devices = append(inv.Devices, migDevs...)
			continue
		}
		inv.Devices = append(inv.Devices, d)
	}
	sort.Slice(inv.MIGParents, func(a, c int) bool { return inv.MIGParents[a].GPU.Number < inv.MIGParents[c].GPU.Number })
	device.Sort(inv.Devices)
	b.addTopology(ctx, inv)

	// The control nodes can change after enumeration (nvidia-uvm is loaded on first use), so
	// the inventory also carries how to look them up again; each CDI spec does.
	control := b.controlResolver(logger)
	var err error
	if inv.ControlNodes, err = control.resolve(); err != nil {
		return nil, err
	}
	inv.ResolveControlNodes = control.resolve
	logger.V(2).Info("Enumerated GPUs", "count", len(inv.Devices), "failed", len(inv.Failed), "driverVersion", driverVersion)
	return inv, nil
}

// callError names the NVML call and the device index, the two things needed to find a failing
// GPU in nvidia-smi or the kernel log.
func callError(call string, index int, ret nvml.Return) error {
	return fmt.Errorf("gpu index %d: nvml %s: %w", index, call, ret)
}

// enumerateOne reads GPU i. On error the returned device holds what was learnt before the
// failing call (its name once the minor number is read, its PCI bus ID once PciInfo is), so that
// the failure can name the GPU; the minor number and bus ID are therefore read first.
func (b *Backend) enumerateOne(ctx context.Context, i int, driverVersion string) (device.Device, error) {
	logger := klog.FromContext(ctx)
	d := device.Device{Kind: device.KindGPU, Index: i, DriverVersion: driverVersion}
	h, ret := b.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return d, callError("DeviceGetHandleByIndex", i, ret)
	}
	// The name comes from the minor number (the N of /dev/nvidiaN), which the kernel driver
	// assigns to the GPU and which does not move when NVML's index order does (NVML orders by
	// PCI bus ID unless CUDA_DEVICE_ORDER or a driver change says otherwise).
	devMinor, ret := h.GetMinorNumber()
	if ret != nvml.SUCCESS {
		return d, callError("GetMinorNumber", i, ret)
	}
	d.Number = devMinor
	d.Name = device.NameFor(device.KindGPU, devMinor)
	pci, ret := h.GetPciInfo()
	if ret != nvml.SUCCESS {
		return d, callError("GetPciInfo", i, ret)
	}
	busID, err := NormalizePCIBusID(cString(pci.BusId[:]))
	if err != nil {
		return d, fmt.Errorf("gpu index %d: nvml GetPciInfo: %w", i, err)
	}
	d.PCIBusID = busID
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return d, callError("GetUUID", i, ret)
	}
	if d.ProductName, ret = h.GetName(); ret != nvml.SUCCESS {
		return d, callError("GetName", i, ret)
	}
	// The architecture is informational and old drivers answer NOT_SUPPORTED, so it may be left
	// out rather than losing the GPU.
	if arch, ret := h.GetArchitecture(); ret == nvml.SUCCESS {
		if d.Architecture = ArchitectureName(arch); d.Architecture == "" {
			logger.Info("Unknown GPU architecture, leaving it out", "architecture", uint32(arch))
		}
	} else {
		logger.Info("Cannot read GPU architecture, leaving it out", "err", callError("GetArchitecture", i, ret))
	}
	// As NVIDIA's tools spell it (go-nvlib, which NVIDIA's DRA driver uses for its brand
	// attribute); informational, so a GPU that cannot tell is published without it.
	if brand, err := nvdevice.New(b.lib).NewDevice(h); err == nil {
		if d.Brand, err = brand.GetBrandAsString(); err != nil {
			logger.Info("Cannot read GPU brand, leaving it out", "err", fmt.Errorf("gpu index %d: %w", i, err))
		}
	}
	major, minor, ret := h.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return d, callError("GetCudaComputeCapability", i, ret)
	}
	d.CUDAComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return d, callError("GetMemoryInfo", i, ret)
	}
	d.MemoryBytes = int64(mem.Total)
	n, built, err := b.nodes.gpuNode(devMinor)
	if err != nil {
		return d, fmt.Errorf("gpu index %d: %w", i, err)
	}
	if built {
		logger.Info("GPU device node in no dev root: giving containers one built from /proc/devices and NVML's minor (nvidia-modprobe -c="+strconv.Itoa(devMinor)+" or nvidia-ctk system create-device-nodes makes it on the host)", "node", n.Path, "major", n.Major, "minor", n.Minor)
	}
	d.Nodes = append([]device.Node{n}, b.driNodes(ctx, busID)...)

	sysfs := deviceattribute.WithFS(b.sysfs)
	if attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, sysfs); err == nil && attr.Value.StringValue != nil {
		d.PCIeRoot = *attr.Value.StringValue
	} else {
		// Without it the GPU is still usable; only pcieRoot alignment constraints cannot match.
		logger.Info("Cannot resolve PCIe root, publishing none", "pciBusID", busID, "err", err)
	}
	// An error here is mostly numa_node = -1 (no affinity, e.g. single-socket hosts and many
	// VMs); the helper says "do not publish" for it, which is what a nil NUMANode means.
	if attr, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(busID, deviceattribute.ScalarAttribute, sysfs); err == nil && attr.Value.IntValue != nil {
		numa := *attr.Value.IntValue
		d.NUMANode = &numa
	} else {
		logger.V(2).Info("No NUMA node for GPU, publishing none", "pciBusID", busID, "err", err)
	}
	return d, nil
}

// ArchitectureName maps NVML's architecture enum to the marketing name used in the
// `architecture` attribute; unknown values map to "".
func ArchitectureName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "Kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "Maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "Pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "Volta"
	case nvml.DEVICE_ARCH_TURING:
		return "Turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "Ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "Ada"
	case nvml.DEVICE_ARCH_HOPPER:
		return "Hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "Blackwell"
	}
	return ""
}

// cString returns the NUL-terminated string in b.
func cString(b []uint8) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
