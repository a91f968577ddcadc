// Package npu is the Huawei Ascend NPU backend. It reads only sysfs and devfs, with injectable
// roots, so that it needs no vendor library and a generated tree (pkg/backend/npumock) drives
// the same code as a real host.
//
// Discovery, step by step:
//  1. Every entry of <SysRoot>/bus/pci/devices whose vendor is 0x19e5 and whose device ID is in
//     the product table (products.go) is an NPU. Huawei functions with other IDs are ignored;
//     unknown IDs of class 0x12 (processing accelerator) are logged, as they are probably NPUs
//     this backend does not know yet.
//  2. Each NPU is published as npu-<N> after its node /dev/davinci<N>, never after anything else,
//     so that a name always means the same node. Which function a node is comes from the driver
//     (mapping.go): the node's minor is the udevid that the driver's attributes give the
//     function. Where they do not, the function in position i of bus ID order gets
//     /dev/davinci<i>, as this backend assumed before, and is published without bus ID, PCIe
//     root or NUMA node. A Huawei processing accelerator (class 0x12) whose device ID cannot be
//     read still takes its place in that order, so that one unreadable function does not
//     rename the NPUs after it. An NPU whose sysfs cannot be read, or whose node is missing or
//     unreadable, is reported in Inventory.Failed (name where known, PCI bus ID, error) and left
//     out; the others are enumerated.
//  3. /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc are the control nodes every NPU
//     container needs; a missing one is logged and left out.
//  4. A node's type and numbers come from stat. A node that is a regular file (a generated mock
//     tree, where creating device nodes would need privileges) holds them as text, in the format
//     of a sysfs `dev` attribute ("MAJOR:MINOR"). A node whose group is not root's (the driver's
//     HwHiAiUser) gives its group and mode to the container's node (device.Node.GID).
//  5. pcieRoot and numaNode come from the deviceattribute helpers over SysRoot, as for GPUs, for
//     NPUs whose function is verified (step 2).
//  6. The UUID is "NPU-" + a hash of the PCI function's serial_number file where the tree has one
//     (stock Ascend drivers are not known to provide it), else of node name and PCI bus ID, for
//     the function of step 2: stable across restarts either way, unique across nodes, and the
//     same as before the mapping on nodes numbered in bus order.
//  7. The driver version is the Version= line of the Ascend driver's version.info
//     (DefaultDriverVersionFile); if it is missing, driverVersion is left empty.
package npu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/devnode"
	"github.com/accel-dra/accel-dra/pkg/backend/internal/stableid"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// DefaultDriverVersionFile is where the Ascend driver installer records its version
// ("Version=24.1.rc2"); /usr/local/Ascend is the default install path, and Ascend container
// set-ups mount /usr/local/Ascend/driver into containers that use NPUs.
const DefaultDriverVersionFile = "/usr/local/Ascend/driver/version.info"

// controlNodes are the nodes every Ascend container needs: the device manager, the shared
// virtual memory manager and the host-device communication channel.
var controlNodes = []string{"davinci_manager", "devmm_svm", "hisi_hdc"}

// Config says where the backend looks.
type Config struct {
	// SysRoot is the host's /sys as this process sees it.
	SysRoot string
	// DevRoot is the host's /dev as this process sees it; it is only statted: published paths
	// are always /dev/<name>.
	DevRoot string
	// NodeName makes the UUIDs of NPUs without a serial number unique across nodes.
	NodeName string
	// DriverVersionFile is the Ascend version.info; empty means DefaultDriverVersionFile.
	DriverVersionFile string
	// FaultDir is where the npu-mock backend's injected faults are (health.FaultDir); empty on
	// a real node, whose NPUs have no health source (see HealthSource).
	FaultDir string
}

// Backend implements device.Backend for Ascend NPUs.
type Backend struct {
	cfg Config
}

var _ device.Backend = (*Backend)(nil)

// New returns a backend over the given roots. It checks the configuration only; the roots are
// read by Enumerate.
func New(cfg Config) (*Backend, error) {
	if cfg.SysRoot == "" || cfg.DevRoot == "" {
		return nil, fmt.Errorf("npu backend: sysfs root %q and devfs root %q must both be set", cfg.SysRoot, cfg.DevRoot)
	}
	if cfg.NodeName == "" {
		return nil, errors.New("npu backend: node name is required (it makes the UUIDs of NPUs without a serial number)")
	}
	if cfg.DriverVersionFile == "" {
		cfg.DriverVersionFile = DefaultDriverVersionFile
	}
	return &Backend{cfg: cfg}, nil
}

// Kind implements device.Backend.
func (b *Backend) Kind() device.Kind { return device.KindNPU }

// Close implements device.Backend; the backend holds nothing open.
func (b *Backend) Close() error { return nil }

// pciFunction is one Huawei NPU found in sysfs.
type pciFunction struct {
	busID   string
	product Product
	// err says why the function is an NPU that cannot be enumerated.
	err error
	// udevid is the driver's ID of the function, the minor of its /dev/davinci node; -1 when
	// sysfs does not say (why says why).
	udevid int
	why    string
}

// Enumerate implements device.Backend. A node with no Ascend NPU yields an empty inventory; an
// unreadable sysfs is an error.
func (b *Backend) Enumerate(ctx context.Context) (*device.Inventory, error) {
	logger := klog.FromContext(ctx)
	npus, err := b.scan(ctx)
	if err != nil {
		return nil, err
	}
	driverVersion := b.driverVersion(ctx)

	inv := &device.Inventory{Kind: device.KindNPU, Devices: make([]device.Device, 0, len(npus))}
	sysfs := deviceattribute.WithFSFromRoot(b.cfg.SysRoot)
	for _, a := range b.assign(ctx, npus) {
		f := a.fn
		d := device.Device{
			Name:          device.NameFor(device.KindNPU, a.number),
			Kind:          device.KindNPU,
			Number:        a.number,
			Index:         a.number,
			ProductName:   f.product.Name,
			Architecture:  f.product.Architecture,
			DriverVersion: driverVersion,
			MemoryBytes:   f.product.MemoryBytes,
		}
		err := f.err
		if err == nil {
			err = a.err
		}
		if err != nil {
			fail := device.Failed{Index: a.number, Name: d.Name, PCIBusID: f.busID, Err: fmt.Errorf("%s (PCI %s): %w", d.Name, f.busID, err)}
			if a.number < 0 {
				fail.Name, fail.Err = "", fmt.Errorf("NPU at PCI %s: %w", f.busID, err)
			}
			logger.Error(fail.Err, "Leaving NPU out: it cannot be read", "device", fail.Name, "pciBusID", f.busID)
			inv.Failed = append(inv.Failed, fail)
			continue
		}
		d.Nodes = []device.Node{a.node}
		// The UUID is derived as it always was, from the function the node is mapped to (or, not
		// verified, from the function in its bus order position), so that no UUID changes on a
		// node whose numbering followed bus order.
		d.UUID = b.uuid(ctx, f.busID)
		if a.verified && a.number < len(npus) && npus[a.number].busID != f.busID {
			// Before the mapping, /dev/davinciN was taken for the N-th function in bus order
			// and published with that function's UUID: a claim prepared then holds it.
			d.FormerUUIDs = []string{b.uuid(ctx, npus[a.number].busID)}
		}
		if !a.verified {
			logger.Info("Cannot verify which PCI function is this NPU's, publishing no PCI bus ID, PCIe root or NUMA node",
				"device", d.Name, "node", a.node.Path, "reason", a.why)
			inv.Devices = append(inv.Devices, d)
			continue
		}
		d.PCIBusID = f.busID
		d.Topology = hccsTopology(f.product, f.udevid)
		if attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(f.busID, sysfs); err == nil && attr.Value.StringValue != nil {
			d.PCIeRoot = *attr.Value.StringValue
		} else {
			logger.Info("Cannot resolve PCIe root, publishing none", "device", d.Name, "pciBusID", f.busID, "err", err)
		}
		// An error is mostly numa_node = -1, for which the helper says not to publish one.
		if attr, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(f.busID, deviceattribute.ScalarAttribute, sysfs); err == nil && attr.Value.IntValue != nil {
			numa := *attr.Value.IntValue
			d.NUMANode = &numa
		} else {
			logger.V(2).Info("No NUMA node for NPU, publishing none", "device", d.Name, "pciBusID", f.busID, "err", err)
		}
		inv.Devices = append(inv.Devices, d)
	}
	device.Sort(inv.Devices)

	inv.ControlNodes = make([]device.Node, 0, len(controlNodes))
	if len(npus) > 0 {
		for _, name := range controlNodes {
			n, err := b.node(name)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				logger.Info("Control device node not present on the host, skipping", "node", n.Path, "err", err)
			case err != nil:
				return nil, err
			default:
				inv.ControlNodes = append(inv.ControlNodes, n)
			}
		}
	}
	logger.V(2).Info("Enumerated NPUs", "count", len(inv.Devices), "failed", len(inv.Failed), "driverVersion", driverVersion)
	return inv, nil
}

// scan finds the Ascend NPUs under SysRoot, sorted by PCI bus ID.
func (b *Backend) scan(ctx context.Context) ([]pciFunction, error) {
	logger := klog.FromContext(ctx)
	dir := filepath.Join(b.cfg.SysRoot, "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	var npus []pciFunction
	for _, e := range entries {
		busID := e.Name()
		vendor, err := readHex(filepath.Join(dir, busID, "vendor"))
		if err != nil {
			// Devices can go away between the listing and the read (hot unplug, SR-IOV).
			logger.V(4).Info("Skipping PCI device without readable vendor", "pciBusID", busID, "err", err)
			continue
		}
		if vendor != HuaweiVendorID {
			continue
		}
		id, err := readHex(filepath.Join(dir, busID, "device"))
		if err != nil {
			if class, cerr := readHex(filepath.Join(dir, busID, "class")); cerr == nil && class>>16 == 0x12 {
				// Probably an NPU: it keeps its place in the numbering and is reported.
				npus = append(npus, pciFunction{busID: busID, err: fmt.Errorf("reading PCI device ID: %w", err)})
				continue
			}
			logger.Info("Skipping Huawei PCI device without readable device ID", "pciBusID", busID, "err", err)
			continue
		}
		product, ok := LookupProduct(uint16(id))
		if !ok || id > 0xffff { // a 16-bit register; a wider value is not one of ours
			class, _ := readHex(filepath.Join(dir, busID, "class"))
			if class>>16 == 0x12 {
				logger.Info("Ignoring Huawei processing accelerator with unknown device ID; add it to the product table if it is an Ascend NPU",
					"pciBusID", busID, "deviceID", fmt.Sprintf("%#04x", id))
			} else {
				logger.V(5).Info("Ignoring Huawei PCI device that is not an NPU", "pciBusID", busID, "deviceID", fmt.Sprintf("%#04x", id))
			}
			continue
		}
		npus = append(npus, pciFunction{busID: busID, product: product})
	}
	// sysfs lists in bus ID order already; sorting makes the numbering independent of that.
	sort.Slice(npus, func(i, j int) bool { return npus[i].busID < npus[j].busID })
	return npus, nil
}

// uuid is stable across restarts: from the hardware serial where sysfs has one, else from the
// node name and the PCI bus ID (stable as long as the NPU stays in its slot).
func (b *Backend) uuid(ctx context.Context, busID string) string {
	data, err := os.ReadFile(filepath.Join(b.cfg.SysRoot, "bus", "pci", "devices", busID, "serial_number"))
	if serial := strings.TrimSpace(string(data)); err == nil && serial != "" {
		return stableid.UUID("NPU", "serial", serial)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		klog.FromContext(ctx).Info("Cannot read NPU serial number, deriving UUID from node and PCI bus ID", "pciBusID", busID, "err", err)
	}
	return stableid.UUID("NPU", b.cfg.NodeName, busID)
}

// driverVersion reads the Version= line of the driver's version.info; "" when there is none.
func (b *Backend) driverVersion(ctx context.Context) string {
	logger := klog.FromContext(ctx)
	data, err := os.ReadFile(b.cfg.DriverVersionFile)
	if err != nil {
		logger.V(2).Info("No Ascend driver version file, publishing no driver version", "file", b.cfg.DriverVersionFile, "err", err)
		return ""
	}
	v := ParseVersionInfo(string(data))
	if v == "" {
		logger.Info("Ascend driver version file has no Version= line", "file", b.cfg.DriverVersionFile)
	}
	return v
}

// ParseVersionInfo returns the value of the Version= line of an Ascend version.info file.
func ParseVersionInfo(content string) string {
	for _, line := range strings.Split(content, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// node returns /dev/<name> with the type and numbers of DevRoot/<name>. The returned Node's
// Path is set even on error so that callers can log it.
func (b *Backend) node(name string) (device.Node, error) {
	n := device.Node{Path: path.Join("/dev", name)}
	p := filepath.Join(b.cfg.DevRoot, name)
	fi, err := os.Stat(p)
	if err != nil {
		return n, fmt.Errorf("device node %s: %w", n.Path, err)
	}
	switch {
	case fi.Mode()&fs.ModeDevice != 0:
		info, err := devnode.Stat(p)
		if err != nil {
			return n, fmt.Errorf("device node %s: %w", n.Path, err)
		}
		n.Type, n.Major, n.Minor = info.Type, info.Major, info.Minor
	case fi.Mode().IsRegular():
		data, err := os.ReadFile(p)
		if err != nil {
			return n, fmt.Errorf("device node %s: %w", n.Path, err)
		}
		major, minor, err := devnode.ParseDev(string(data))
		if err != nil {
			return n, fmt.Errorf("device node %s: regular file (mock tree) without MAJOR:MINOR: %w", n.Path, err)
		}
		n.Type, n.Major, n.Minor = "c", major, minor
	default:
		return n, fmt.Errorf("device node %s: %s is neither a device nor a mock node file (mode %v)", n.Path, p, fi.Mode())
	}
	gid, mode, err := devnode.Owner(p)
	if err != nil {
		return n, fmt.Errorf("device node %s: %w", n.Path, err)
	}
	if gid != 0 {
		// The driver's group (HwHiAiUser): the runtime gives the container's node the spec's
		// group or none of the host's, and a non-root process in the group needs it.
		n.GID, n.FileMode = gid, mode
	}
	return n, nil
}

// readHex reads a sysfs attribute such as vendor ("0x19e5\n").
func readHex(p string) (uint64, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: invalid hex value %q", p, s)
	}
	return v, nil
}
