package npu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// Which /dev/davinciN is which PCI function. The Ascend driver numbers its chips itself, not in
// PCI bus order (an Atlas 800T A2 has davinci0 at bus c1 and davinci1 at bus 01), and gives the
// device node no sysfs link to its function. What it does expose (Huawei's open driver source:
// pbl/uda/uda_access.c and comm/pcie/host/devdrv_sysfs.c):
//   - /dev/davinciN's minor number is the chip's udevid; N is its logic ID, which can differ.
//   - Each NPU function has a dev_id attribute, the PCIe driver's ID of it, which is the udevid
//     unless the driver reorders udevids (only its UB-linked cloud_v4 chips, none of the products
//     this backend knows), and a devdrv_sysfs_bdf_to_devid table listing every probed NPU's
//     bus:dev.fn (no domain), udevid and dev_id.
//
// So a function's udevid comes from the table where there is one (it is right even with
// reordering) and from dev_id otherwise, and its node is the davinci node with that minor.
const (
	devIDAttr    = "dev_id"
	bdfTableAttr = "devdrv_sysfs_bdf_to_devid"
)

// davinciNode matches the per-chip nodes, not davinci_manager.
var davinciNode = regexp.MustCompile(`^davinci([0-9]+)$`)

// assignment is an NPU function with the device node it is published under.
type assignment struct {
	fn pciFunction
	// number is the N of /dev/davinciN, -1 where no node could be given to the function.
	number int
	node   device.Node
	// verified says the driver's attributes tie the node to fn; else the node is the one of
	// fn's position in bus order, as this backend assumed before, and why says why.
	verified bool
	why      string
	err      error
}

// assign gives each NPU function (in bus ID order) its device node: the node whose minor is the
// function's udevid where the driver says it, else /dev/davinci<position> unless a verified
// function has that node.
func (b *Backend) assign(ctx context.Context, npus []pciFunction) []assignment {
	logger := klog.FromContext(ctx)
	b.readUdevids(ctx, npus)
	byMinor, unreadable := b.davinciNodes(ctx)
	out := make([]assignment, len(npus))
	taken := map[int]bool{}
	for i, f := range npus {
		out[i] = assignment{fn: f, number: -1}
		if f.udevid < 0 {
			continue
		}
		switch nodes := byMinor[int64(f.udevid)]; len(nodes) {
		case 1:
			out[i].number, out[i].node, out[i].verified = nodes[0].number, nodes[0].node, true
			taken[nodes[0].number] = true
		case 0:
			out[i].err = fmt.Errorf("no /dev/davinci node has minor %d, the driver's udevid of this NPU (%s)", f.udevid, f.why)
			if unreadable != nil {
				out[i].err = fmt.Errorf("%w; it may be one of the unreadable nodes: %w", out[i].err, unreadable)
			}
		default:
			out[i].err = fmt.Errorf("%d /dev/davinci nodes have minor %d, the driver's udevid of this NPU", len(nodes), f.udevid)
		}
	}
	for i, f := range npus {
		if f.udevid >= 0 {
			continue
		}
		out[i].why = f.why
		if taken[i] {
			out[i].err = fmt.Errorf("cannot tell which /dev/davinci node is this NPU's (%s), and /dev/davinci%d is another NPU's", f.why, i)
			continue
		}
		out[i].number = i
		if f.err == nil {
			out[i].node, out[i].err = b.node(fmt.Sprintf("davinci%d", i))
		}
	}
	used := map[int]bool{}
	for _, a := range out {
		used[a.number] = true
	}
	for minor, nodes := range byMinor {
		for _, n := range nodes {
			if !used[n.number] {
				logger.Info("Device node is no NPU's that sysfs lists, leaving it out", "node", n.node.Path, "minor", minor)
			}
		}
	}
	return out
}

// numberedNode is a /dev/davinciN node.
type numberedNode struct {
	number int
	node   device.Node
}

// davinciNodes returns DevRoot's davinci<N> nodes by minor number, and the errors of those it
// cannot read.
func (b *Backend) davinciNodes(ctx context.Context) (map[int64][]numberedNode, error) {
	logger := klog.FromContext(ctx)
	entries, err := os.ReadDir(b.cfg.DevRoot)
	if err != nil {
		logger.Info("Cannot list device nodes, mapping no NPU to its node by minor number", "devRoot", b.cfg.DevRoot, "err", err)
		return nil, err
	}
	out := map[int64][]numberedNode{}
	var errs []error
	for _, e := range entries {
		m := davinciNode.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		node, err := b.node(e.Name())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[node.Minor] = append(out[node.Minor], numberedNode{number: n, node: node})
	}
	return out, errors.Join(errs...)
}

// readUdevids sets each function's udevid from the driver's attributes, or -1 and why not.
func (b *Backend) readUdevids(ctx context.Context, npus []pciFunction) {
	logger := klog.FromContext(ctx)
	dir := filepath.Join(b.cfg.SysRoot, "bus", "pci", "devices")
	var table map[string]int
	for _, f := range npus {
		data, err := os.ReadFile(filepath.Join(dir, f.busID, bdfTableAttr))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				logger.Info("Cannot read the Ascend driver's bus-to-udevid table", "pciBusID", f.busID, "err", err)
			}
			continue
		}
		if table, err = parseBDFTable(string(data)); err != nil {
			logger.Info("Ignoring the Ascend driver's bus-to-udevid table", "pciBusID", f.busID, "err", err)
			continue
		}
		break
	}
	// The table leaves out the domain: a bus:dev.fn that two NPUs share cannot be looked up.
	shared := map[string]int{}
	for _, f := range npus {
		shared[shortBDF(f.busID)]++
	}
	for i := range npus {
		f := &npus[i]
		f.udevid = -1
		short := shortBDF(f.busID)
		switch id, listed := table[short]; {
		case table != nil && shared[short] > 1:
			f.why = fmt.Sprintf("%s names bus:dev.fn %s, which NPUs in two PCI domains have", bdfTableAttr, short)
		case table != nil && !listed:
			// With a table, dev_id is not used: where udevids are reordered it is not the udevid.
			f.why = fmt.Sprintf("%s does not list %s", bdfTableAttr, short)
		case table != nil:
			f.udevid, f.why = id, bdfTableAttr
		default:
			data, err := os.ReadFile(filepath.Join(dir, f.busID, devIDAttr))
			v, perr := strconv.Atoi(strings.TrimSpace(string(data)))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				f.why = fmt.Sprintf("the driver exposes neither %s nor %s", bdfTableAttr, devIDAttr)
			case err != nil:
				f.why = fmt.Sprintf("reading %s: %v", devIDAttr, err)
			case perr != nil || v < 0:
				f.why = fmt.Sprintf("%s is %q, not an ID", devIDAttr, strings.TrimSpace(string(data)))
			default:
				f.udevid, f.why = v, devIDAttr
			}
		}
	}
	seen := map[int]int{}
	for _, f := range npus {
		if f.udevid >= 0 {
			seen[f.udevid]++
		}
	}
	for i := range npus {
		if f := &npus[i]; f.udevid >= 0 && seen[f.udevid] > 1 {
			f.why = fmt.Sprintf("%s gives udevid %d to %d NPUs", f.why, f.udevid, seen[f.udevid])
			f.udevid = -1
		}
	}
}

// shortBDF is a bus ID without its domain, as the driver's table writes it: "c1:00.0".
func shortBDF(busID string) string {
	if _, rest, ok := strings.Cut(busID, ":"); ok && strings.Count(busID, ":") == 2 {
		return rest
	}
	return busID
}

// parseBDFTable reads the driver's devdrv_sysfs_bdf_to_devid: a header line, then
// "bus:dev.fn udevid add_id" per probed NPU.
func parseBDFTable(content string) (map[string]int, error) {
	lines := strings.Split(strings.TrimSpace(content), "\n")
	if len(lines) == 0 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "bdf") {
		return nil, errors.New("no bdf header")
	}
	out := map[string]int{}
	for _, line := range lines[1:] {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 3 {
			return nil, fmt.Errorf("line %q: want bdf, udevid, add_id", line)
		}
		id, err := strconv.Atoi(fields[1])
		if err != nil || id < 0 {
			return nil, fmt.Errorf("line %q: udevid %q is not an ID", line, fields[1])
		}
		bdf := strings.ToLower(fields[0])
		if _, dup := out[bdf]; dup {
			return nil, fmt.Errorf("%s listed twice", bdf)
		}
		out[bdf] = id
	}
	return out, nil
}
