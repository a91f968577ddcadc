// Package npumock generates fake Ascend hosts as real files in a directory, a sysfs tree and a
// devfs tree, so that the real NPU backend (pkg/backend/npu) runs unchanged against them.
//
// Layout under <dir>/<profile>/:
//
//	sys/devices/pci<dom>:<bus>/<bridges...>/<bdf>/{vendor,device,class,numa_node[,serial_number]}
//	sys/devices/.../<bdf>/{dev_id,devdrv_sysfs_bdf_to_devid}   (NPUs only)
//	sys/bus/pci/devices/<bdf> -> ../../../devices/pci<dom>:<bus>/.../<bdf>
//	sys/class/devdrv-class/davinci<N>/dev
//	dev/davinci<N>, dev/davinci_manager, dev/devmm_svm, dev/hisi_hdc
//	driver/version.info
//
// The NPU attributes and the davinci nodes are what the Ascend driver makes (see the Ascend part
// of the project's GPU node facts): the PCIe driver gives each NPU a dev_id (a profile's
// davinciOrder, else bus order) and writes it to the function's dev_id attribute and to the
// devdrv_sysfs_bdf_to_devid table; /dev/davinci<N> has the dev_id as its minor and N is the
// logic ID, the dev_id's rank (equal to it, as dev_ids here are 0..n-1).
//
// Creating device special files needs privileges, so the dev entries are regular files holding
// "MAJOR:MINOR", the format of a sysfs dev attribute, which the NPU backend reads for nodes that
// are not devices. They carry the group and mode the Ascend driver gives its nodes (nodeMode,
// DriverGID), so that the backend learns a node's group from its stat as on a real host. Each profile also has non-NPU PCI functions (a Huawei NIC, a Mellanox NIC)
// that the backend must ignore.
package npumock

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/accel-dra/accel-dra/pkg/backend/npu"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// Device numbers of the generated nodes. The Ascend driver allocates its majors dynamically;
// these are plausible, fixed values so that output is reproducible.
const (
	davinciMajor        = 236
	davinciManagerMajor = 237
	devmmSvmMajor       = 238
	hisiHdcMajor        = 239
)

// pciFunction is one PCI function in the generated tree.
type pciFunction struct {
	busID string
	// root is the root complex directory under devices/, "pci0000:80".
	root string
	// bridges are the bridge functions between the root and the function, outermost first.
	bridges []string
	vendor  uint16
	device  uint16
	class   uint32
	numa    int
	// serial says whether the function gets a serial_number file.
	serial bool
	// unreadable makes the device attribute a directory, so that reading it fails for every
	// user, root included, as an attribute whose read fails with EIO does on a real host.
	unreadable bool
}

type profile struct {
	description   string
	driverVersion string
	functions     []pciFunction
	// davinciOrder lists the NPUs' bus IDs in the order of the dev_ids the driver gives them
	// (/dev/davinci0 first); nil means ascending bus ID order.
	davinciOrder []string
}

func ascend(deviceID uint16, busID, root string, bridges []string, numa int, serial bool) pciFunction {
	return pciFunction{busID: busID, root: root, bridges: bridges, vendor: npu.HuaweiVendorID, device: deviceID, class: 0x120000, numa: numa, serial: serial}
}

var profiles = map[string]profile{
	// An Atlas 800T A2-like training server: 8 Ascend 910B, each on its own root port, two per
	// root complex, NUMA 0 = npu-0..3 and NUMA 1 = npu-4..7. The NPUs carry serial numbers.
	"ascend910b-8x": {
		description:   "8x Ascend 910B (d802): NUMA 0 = npu-0..3 under pci0000:00 and pci0000:40, NUMA 1 = npu-4..7 under pci0000:80 and pci0000:c0; serial numbers; plus a Huawei and a Mellanox NIC",
		driverVersion: "24.1.rc2",
		functions: []pciFunction{
			ascend(0xd802, "0000:01:00.0", "pci0000:00", []string{"0000:00:00.0"}, 0, true),
			ascend(0xd802, "0000:02:00.0", "pci0000:00", []string{"0000:00:08.0"}, 0, true),
			ascend(0xd802, "0000:41:00.0", "pci0000:40", []string{"0000:40:00.0"}, 0, true),
			ascend(0xd802, "0000:42:00.0", "pci0000:40", []string{"0000:40:08.0"}, 0, true),
			ascend(0xd802, "0000:81:00.0", "pci0000:80", []string{"0000:80:00.0"}, 1, true),
			ascend(0xd802, "0000:82:00.0", "pci0000:80", []string{"0000:80:08.0"}, 1, true),
			ascend(0xd802, "0000:c1:00.0", "pci0000:c0", []string{"0000:c0:00.0"}, 1, true),
			ascend(0xd802, "0000:c2:00.0", "pci0000:c0", []string{"0000:c0:08.0"}, 1, true),
			// Huawei HNS network function: Huawei vendor, not an NPU.
			{busID: "0000:7d:00.0", root: "pci0000:7c", bridges: []string{"0000:7c:00.0"}, vendor: npu.HuaweiVendorID, device: 0xa222, class: 0x020000, numa: 0},
			// Mellanox ConnectX-6 on NUMA 1.
			{busID: "0000:85:00.0", root: "pci0000:80", bridges: []string{"0000:80:10.0"}, vendor: 0x15b3, device: 0x101b, class: 0x020700, numa: 1},
		},
	},
	// An Atlas 800 training server (model 9000): 8 Ascend 910 over four Kunpeng 920 sockets,
	// two per NUMA node, each on its own root port; two HCCS rings of four, npu-0..3 and
	// npu-4..7 (by the chips' physical IDs, hccs.go in the npu backend). Bus IDs illustrative.
	"ascend910-8x": {
		description:   "8x Ascend 910 (d801), Atlas 800 training server: two HCCS rings, npu-0..3 and npu-4..7; NUMA 0..3, two NPUs each",
		driverVersion: "23.0.0",
		functions: []pciFunction{
			ascend(0xd801, "0000:01:00.0", "pci0000:00", []string{"0000:00:00.0"}, 0, true),
			ascend(0xd801, "0000:02:00.0", "pci0000:00", []string{"0000:00:08.0"}, 0, true),
			ascend(0xd801, "0000:41:00.0", "pci0000:40", []string{"0000:40:00.0"}, 1, true),
			ascend(0xd801, "0000:42:00.0", "pci0000:40", []string{"0000:40:08.0"}, 1, true),
			ascend(0xd801, "0000:81:00.0", "pci0000:80", []string{"0000:80:00.0"}, 2, true),
			ascend(0xd801, "0000:82:00.0", "pci0000:80", []string{"0000:80:08.0"}, 2, true),
			ascend(0xd801, "0000:c1:00.0", "pci0000:c0", []string{"0000:c0:00.0"}, 3, true),
			ascend(0xd801, "0000:c2:00.0", "pci0000:c0", []string{"0000:c0:08.0"}, 3, true),
		},
	},
	// Two Atlas 300I Pro inference cards (Ascend 310P) in an x86 server, one per socket. No
	// serial numbers, so the UUIDs come from node name and bus ID.
	"ascend310p-2x": {
		description:   "2x Ascend 310P (d500): npu-0 on NUMA 0 under pci0000:3a, npu-1 on NUMA 1 under pci0000:ae; no serial numbers; plus a Huawei NIC",
		driverVersion: "23.0.0",
		functions: []pciFunction{
			ascend(0xd500, "0000:3b:00.0", "pci0000:3a", []string{"0000:3a:00.0"}, 0, false),
			ascend(0xd500, "0000:af:00.0", "pci0000:ae", []string{"0000:ae:02.0"}, 1, false),
			{busID: "0000:18:00.0", root: "pci0000:17", bridges: []string{"0000:17:00.0"}, vendor: npu.HuaweiVendorID, device: 0x1822, class: 0x020000, numa: 0},
		},
	},
}

func init() {
	// The 910B server with npu-3's sysfs unreadable: npu-3 is reported as failed and keeps its
	// number, the other seven are published under their usual names.
	p := profiles["ascend910b-8x"]
	p.description = "ascend910b-8x where npu-3's (0000:42:00.0) PCI device ID cannot be read"
	p.functions = append([]pciFunction(nil), p.functions...)
	for i := range p.functions {
		if p.functions[i].busID == "0000:42:00.0" {
			p.functions[i].unreadable = true
		}
	}
	profiles["ascend910b-8x-one-unreadable"] = p

	// The same server with the device numbering of an Atlas 800T A2 (910B3): npu-smi there lists
	// NPU 0..3 at buses C1, 01, C2, 02 (vllm-project/vllm-ascend#1903); the other four follow the
	// same pattern here (assumed, not seen).
	p = profiles["ascend910b-8x"]
	p.description = "ascend910b-8x numbered as on an Atlas 800T A2: /dev/davinci0..7 are the NPUs at buses c1, 01, c2, 02, 81, 41, 82, 42"
	p.davinciOrder = []string{"0000:c1:00.0", "0000:01:00.0", "0000:c2:00.0", "0000:02:00.0", "0000:81:00.0", "0000:41:00.0", "0000:82:00.0", "0000:42:00.0"}
	profiles["ascend910b-8x-a2-order"] = p
}

// Profiles returns the names of the NPU mock profiles, sorted.
func Profiles() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Describe returns a one-line description of a profile, "" if unknown.
func Describe(name string) string { return profiles[name].description }

// paths are the roots of a generated tree.
type paths struct {
	SysRoot, DevRoot, DriverVersionFile string
}

// Generate writes the tree of profile for nodeName under dir/<profile> and returns its sysfs
// and devfs roots. It is idempotent: running it again (for the same or another node) rewrites
// the same files in place.
func Generate(dir, profileName, nodeName string) (sysRoot, devRoot string, err error) {
	p, err := generate(dir, profileName, nodeName)
	return p.SysRoot, p.DevRoot, err
}

func generate(dir, profileName, nodeName string) (paths, error) {
	prof, dirName, err := lookup(profileName)
	if err != nil {
		return paths{}, err
	}
	if dir == "" || nodeName == "" {
		return paths{}, errors.New("NPU mock: directory and node name are required")
	}
	base := filepath.Join(dir, dirName)
	out := paths{
		SysRoot:           filepath.Join(base, "sys"),
		DevRoot:           filepath.Join(base, "dev"),
		DriverVersionFile: filepath.Join(base, "driver", "version.info"),
	}
	w := &writer{}
	var npuBusIDs []string
	rels := map[string]string{}
	for _, f := range prof.functions {
		rel := filepath.Join(append(append([]string{"devices", f.root}, f.bridges...), f.busID)...)
		fdir := filepath.Join(out.SysRoot, rel)
		w.file(filepath.Join(fdir, "vendor"), fmt.Sprintf("0x%04x\n", f.vendor))
		if f.unreadable {
			w.dir(filepath.Join(fdir, "device"))
		} else {
			w.file(filepath.Join(fdir, "device"), fmt.Sprintf("0x%04x\n", f.device))
		}
		w.file(filepath.Join(fdir, "class"), fmt.Sprintf("0x%06x\n", f.class))
		w.file(filepath.Join(fdir, "numa_node"), strconv.Itoa(f.numa)+"\n")
		if f.serial {
			// A board serial in Huawei's style; derived so that it differs per node and slot.
			sum := sha256.Sum256([]byte(nodeName + "/" + f.busID))
			w.file(filepath.Join(fdir, "serial_number"), fmt.Sprintf("0331%X\n", sum[:5]))
		}
		w.symlink(filepath.Join(out.SysRoot, "bus", "pci", "devices", f.busID), filepath.Join("..", "..", "..", rel))
		rels[f.busID] = rel
		if _, ok := npu.LookupProduct(f.device); ok && f.vendor == npu.HuaweiVendorID {
			npuBusIDs = append(npuBusIDs, f.busID)
		}
	}
	order, err := davinciOrder(prof, npuBusIDs)
	if err != nil {
		return paths{}, fmt.Errorf("NPU mock %s: %w", profileName, err)
	}
	w.driverAttributes(out.SysRoot, out.DevRoot, rels, order)
	w.node(filepath.Join(out.DevRoot, "davinci_manager"), davinciManagerMajor, 0)
	w.node(filepath.Join(out.DevRoot, "devmm_svm"), devmmSvmMajor, 0)
	w.node(filepath.Join(out.DevRoot, "hisi_hdc"), hisiHdcMajor, 0)
	w.file(out.DriverVersionFile, fmt.Sprintf("Version=%s\npackage_version=%s\n", prof.driverVersion, prof.driverVersion))
	if w.err != nil {
		return paths{}, fmt.Errorf("generating NPU mock %s in %s: %w", profileName, base, w.err)
	}
	return out, nil
}

// davinciOrder returns the NPUs' bus IDs in dev_id order.
func davinciOrder(prof profile, npuBusIDs []string) ([]string, error) {
	sort.Strings(npuBusIDs)
	if prof.davinciOrder == nil {
		return npuBusIDs, nil
	}
	sorted := slices.Sorted(slices.Values(prof.davinciOrder))
	if !slices.Equal(sorted, npuBusIDs) {
		return nil, fmt.Errorf("davinci order %v does not list the NPUs %v", prof.davinciOrder, npuBusIDs)
	}
	return prof.davinciOrder, nil
}

// driverAttributes writes what the Ascend driver adds for the NPUs in order (dev_id order): each
// function's dev_id and devdrv_sysfs_bdf_to_devid attributes, the devdrv-class devices and the
// /dev/davinci<N> nodes, whose minor is the dev_id.
func (w *writer) driverAttributes(sysRoot, devRoot string, rels map[string]string, order []string) {
	// The driver's table: a header, then bus:dev.fn without the domain, udevid, add_id.
	table := "bdf      udevid add_id\n"
	for id, busID := range order {
		table += fmt.Sprintf("%s  %-6d %-5d\n", busID[strings.Index(busID, ":")+1:], id, id)
	}
	for id, busID := range order {
		fdir := filepath.Join(sysRoot, rels[busID])
		w.file(filepath.Join(fdir, "dev_id"), fmt.Sprintf("%d\n", id))
		w.file(filepath.Join(fdir, "devdrv_sysfs_bdf_to_devid"), table)
		dev := fmt.Sprintf("%d:%d\n", davinciMajor, id)
		w.file(filepath.Join(sysRoot, "class", "devdrv-class", fmt.Sprintf("davinci%d", id), "dev"), dev)
		w.node(filepath.Join(devRoot, fmt.Sprintf("davinci%d", id)), davinciMajor, int64(id))
	}
}

// New generates the tree of profile for nodeName under dir and returns the real NPU backend
// reading it.
func New(dir, profileName, nodeName string) (device.Backend, error) {
	p, err := generate(dir, profileName, nodeName)
	if err != nil {
		return nil, err
	}
	return npu.New(npu.Config{SysRoot: p.SysRoot, DevRoot: p.DevRoot, NodeName: nodeName, DriverVersionFile: p.DriverVersionFile,
		FaultDir: filepath.Join(dir, health.FaultDir)})
}

// writer creates files and symlinks, keeping the first error.
type writer struct{ err error }

func (w *writer) file(p, content string) {
	if w.err != nil {
		return
	}
	if w.err = os.MkdirAll(filepath.Dir(p), 0o755); w.err != nil {
		return
	}
	w.err = os.WriteFile(p, []byte(content), 0o644)
}

// DriverGID is the group of the mock's device nodes where the test may give it (as root, as CI
// and the kind nodes run): Huawei's driver package runs as user and group HwHiAiUser, which the
// administrator creates with groupadd before installing, so its number is the host's (1000 on a
// host where it is the first group made; "Installing the NPU Driver", hiascend.com
// CANNCommunityEdition softwareinst instg_0108), and the driver creates /dev/davinci<N>,
// davinci_manager, devmm_svm and hisi_hdc as crw-rw---- HwHiAiUser HwHiAiUser (the listing in
// Ascend/ascend-device-plugin's dsmi code: "crw-rw---- 1 HwHiAiUser HwHiAiUser 239, 0 ...
// /dev/davinci0"); a non-root user reaches them by joining the group (usermod -a -G HwHiAiUser,
// instg_000052).
//
// A test that may not chown (not root, and not in that group) keeps the group the file was
// created with, its own primary group, as the stand-in group; a stand-in group of root's would
// not be the driver's layout, so Generate refuses it.
const DriverGID = 1000

// nodeMode is the mode the Ascend driver gives its device nodes (crw-rw----, see DriverGID).
const nodeMode = 0o660

// node writes the stand-in of a device node with the driver's numbers, mode and group.
func (w *writer) node(p string, major, minor int64) {
	w.file(p, fmt.Sprintf("%d:%d\n", major, minor))
	if w.err != nil {
		return
	}
	if w.err = os.Chmod(p, nodeMode); w.err != nil {
		return
	}
	err := os.Lchown(p, -1, DriverGID)
	if err == nil {
		return
	}
	var st syscall.Stat_t
	if w.err = syscall.Stat(p, &st); w.err == nil && st.Gid == 0 {
		w.err = fmt.Errorf("device node stand-in %s: cannot give it the driver's group (%w) and its own group is root's; run as root or with a primary group other than root", p, err)
	}
}

func (w *writer) dir(p string) {
	if w.err != nil {
		return
	}
	w.err = os.MkdirAll(p, 0o755)
}

func (w *writer) symlink(p, target string) {
	if w.err != nil {
		return
	}
	if cur, err := os.Readlink(p); err == nil && cur == target {
		return
	}
	if w.err = os.MkdirAll(filepath.Dir(p), 0o755); w.err != nil {
		return
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.err = err
		return
	}
	w.err = os.Symlink(target, p)
}
