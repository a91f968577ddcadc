package npu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/stableid"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// fn is a PCI function of a hand-built tree.
type fn struct {
	busID, root           string
	vendor, device, cls   string
	numa                  string
	serial                string
	noSymlink, noNUMAFile bool
	// unreadableDevice makes the device attribute a directory, whose read fails even for root.
	unreadableDevice bool
	// devID is the Ascend driver's dev_id attribute, none if empty; udevid is the function's
	// udevid in the devdrv_sysfs_bdf_to_devid table, devID if empty.
	devID, udevid string
}

func npuFn(busID, root, deviceID, numa string) fn {
	return fn{busID: busID, root: root, vendor: "0x19e5", device: deviceID, cls: "0x120000", numa: numa}
}

// tree is a hand-built host: sysfs functions and the names of files under dev (each holding
// "MAJOR:MINOR"; a value of "" writes the given content verbatim as an invalid node).
type tree struct {
	fns  []fn
	devs map[string]string
	// table writes the driver's devdrv_sysfs_bdf_to_devid table, a row for each function with a
	// devID, into every function that has one.
	table bool
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (tr tree) build(t *testing.T) (sysRoot, devRoot string) {
	t.Helper()
	dir := t.TempDir()
	sysRoot, devRoot = filepath.Join(dir, "sys"), filepath.Join(dir, "dev")
	if err := os.MkdirAll(filepath.Join(sysRoot, "bus", "pci", "devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(devRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	table := "bdf      udevid add_id\n"
	for _, f := range tr.fns {
		if f.devID != "" {
			udevid := f.udevid
			if udevid == "" {
				udevid = f.devID
			}
			table += fmt.Sprintf("%s  %-6s %-5s\n", f.busID[len("0000:"):], udevid, f.devID)
		}
	}
	for _, f := range tr.fns {
		rel := filepath.Join("devices", f.root, f.busID)
		d := filepath.Join(sysRoot, rel)
		if f.devID != "" {
			write(t, filepath.Join(d, "dev_id"), f.devID+"\n")
			if tr.table {
				write(t, filepath.Join(d, "devdrv_sysfs_bdf_to_devid"), table)
			}
		}
		write(t, filepath.Join(d, "vendor"), f.vendor+"\n")
		if f.unreadableDevice {
			if err := os.MkdirAll(filepath.Join(d, "device"), 0o755); err != nil {
				t.Fatal(err)
			}
		} else {
			write(t, filepath.Join(d, "device"), f.device+"\n")
		}
		write(t, filepath.Join(d, "class"), f.cls+"\n")
		if !f.noNUMAFile {
			write(t, filepath.Join(d, "numa_node"), f.numa+"\n")
		}
		if f.serial != "" {
			write(t, filepath.Join(d, "serial_number"), f.serial+"\n")
		}
		link := filepath.Join(sysRoot, "bus", "pci", "devices", f.busID)
		if f.noSymlink {
			// A plain directory instead of the symlink: the function is listed, but its place in
			// the tree (and so its PCIe root) is unknown.
			write(t, filepath.Join(link, "vendor"), f.vendor+"\n")
			write(t, filepath.Join(link, "device"), f.device+"\n")
			if f.devID != "" {
				write(t, filepath.Join(link, "dev_id"), f.devID+"\n")
			}
			continue
		}
		if err := os.Symlink(filepath.Join("..", "..", "..", rel), link); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range tr.devs {
		write(t, filepath.Join(devRoot, name), content)
	}
	return sysRoot, devRoot
}

var ctlDevs = map[string]string{"davinci_manager": "237:0\n", "devmm_svm": "238:0\n", "hisi_hdc": "239:0\n"}

func devs(extra map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range ctlDevs {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func i64(v int64) *int64 { return &v }

func TestEnumerate(t *testing.T) {
	ctl := []device.Node{
		{Path: "/dev/davinci_manager", Type: "c", Major: 237},
		{Path: "/dev/devmm_svm", Type: "c", Major: 238},
		{Path: "/dev/hisi_hdc", Type: "c", Major: 239},
	}
	tests := map[string]struct {
		tree tree
		// want lists name:pciBusID:product:pcieRoot:numa per device, "-" for no numa.
		want    []string
		wantCtl []device.Node
		// wantFailed lists name:pciBusID:error-substring per failed device.
		wantFailed []string
		wantErr    []string
	}{
		"no pci devices": {
			tree:    tree{devs: devs(nil)},
			want:    nil,
			wantCtl: []device.Node{},
		},
		"only other vendors": {
			tree: tree{fns: []fn{
				{busID: "0000:17:00.0", root: "pci0000:16", vendor: "0x10de", device: "0xd802", cls: "0x030200", numa: "0"},
				{busID: "0000:18:00.0", root: "pci0000:16", vendor: "0x8086", device: "0x1521", cls: "0x020000", numa: "0"},
			}, devs: devs(nil)},
			want:    nil,
			wantCtl: []device.Node{},
		},
		"huawei nic and unknown accelerator ignored": {
			tree: tree{fns: []fn{
				{busID: "0000:7d:00.0", root: "pci0000:7c", vendor: "0x19e5", device: "0xa222", cls: "0x020000", numa: "0"},
				{busID: "0000:02:00.0", root: "pci0000:00", vendor: "0x19e5", device: "0xd999", cls: "0x120000", numa: "0"},
				npuFn("0000:81:00.0", "pci0000:80", "0xd802", "1"),
			}, devs: devs(map[string]string{"davinci0": "236:0\n"})},
			want:    []string{"npu-0:0000:81:00.0:Ascend 910B:pci0000:80:1"},
			wantCtl: ctl,
		},
		"numbered by bus id, one without numa": {
			tree: tree{fns: []fn{
				npuFn("0000:82:00.0", "pci0000:80", "0xd500", "-1"),
				npuFn("0000:01:00.0", "pci0000:00", "0xd500", "0"),
			}, devs: devs(map[string]string{"davinci0": "236:0\n", "davinci1": "236:1\n"})},
			want: []string{
				"npu-0:0000:01:00.0:Ascend 310P:pci0000:00:0",
				"npu-1:0000:82:00.0:Ascend 310P:pci0000:80:-",
			},
			wantCtl: ctl,
		},
		"every known product": {
			tree: tree{fns: []fn{
				npuFn("0000:01:00.0", "pci0000:00", "0xd100", "0"),
				npuFn("0000:02:00.0", "pci0000:00", "0xd500", "0"),
				npuFn("0000:03:00.0", "pci0000:00", "0xd801", "0"),
				npuFn("0000:04:00.0", "pci0000:00", "0xd802", "0"),
				npuFn("0000:05:00.0", "pci0000:00", "0xd803", "0"),
			}, devs: devs(map[string]string{"davinci0": "236:0", "davinci1": "236:1", "davinci2": "236:2", "davinci3": "236:3", "davinci4": "236:4"})},
			want: []string{
				"npu-0:0000:01:00.0:Ascend 310:pci0000:00:0",
				"npu-1:0000:02:00.0:Ascend 310P:pci0000:00:0",
				"npu-2:0000:03:00.0:Ascend 910:pci0000:00:0",
				"npu-3:0000:04:00.0:Ascend 910B:pci0000:00:0",
				"npu-4:0000:05:00.0:Ascend 910C:pci0000:00:0",
			},
			wantCtl: ctl,
		},
		"unresolvable pcie root and numa": {
			tree: tree{fns: []fn{
				{busID: "0000:01:00.0", vendor: "0x19e5", device: "0xd802", cls: "0x120000", noSymlink: true},
			}, devs: devs(map[string]string{"davinci0": "236:0"})},
			want:    []string{"npu-0:0000:01:00.0:Ascend 910B::-"},
			wantCtl: ctl,
		},
		"missing control node skipped": {
			tree: tree{fns: []fn{npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0")},
				devs: map[string]string{"davinci0": "236:0", "davinci_manager": "237:0", "hisi_hdc": "239:0"}},
			want:    []string{"npu-0:0000:01:00.0:Ascend 910B:pci0000:00:0"},
			wantCtl: []device.Node{ctl[0], ctl[2]},
		},
		"missing davinci node fails that npu": {
			tree: tree{fns: []fn{
				npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0"),
				npuFn("0000:02:00.0", "pci0000:00", "0xd802", "0"),
			}, devs: devs(map[string]string{"davinci0": "236:0"})},
			want:       []string{"npu-0:0000:01:00.0:Ascend 910B:pci0000:00:0"},
			wantCtl:    ctl,
			wantFailed: []string{":0000:02:00.0:no /dev/davinci node has minor 1"},
		},
		"mock node without numbers fails that npu": {
			tree: tree{fns: []fn{npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0")},
				devs: devs(map[string]string{"davinci0": "not a node"})},
			want:       nil,
			wantCtl:    ctl,
			wantFailed: []string{":0000:01:00.0:/dev/davinci0: regular file (mock tree) without MAJOR:MINOR"},
		},
		"unreadable device id keeps its number": {
			tree: tree{fns: []fn{
				npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0"),
				{busID: "0000:02:00.0", root: "pci0000:00", vendor: "0x19e5", cls: "0x120000", numa: "0", unreadableDevice: true},
				npuFn("0000:03:00.0", "pci0000:00", "0xd802", "0"),
			}, devs: devs(map[string]string{"davinci0": "236:0", "davinci1": "236:1", "davinci2": "236:2"})},
			want: []string{
				"npu-0:0000:01:00.0:Ascend 910B:pci0000:00:0",
				"npu-2:0000:03:00.0:Ascend 910B:pci0000:00:0",
			},
			wantCtl:    ctl,
			wantFailed: []string{"npu-1:0000:02:00.0:reading PCI device ID"},
		},
		"unreadable device id of a huawei nic is skipped": {
			tree: tree{fns: []fn{
				{busID: "0000:00:05.0", root: "pci0000:00", vendor: "0x19e5", cls: "0x020000", numa: "0", unreadableDevice: true},
				npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0"),
			}, devs: devs(map[string]string{"davinci0": "236:0"})},
			want:    []string{"npu-0:0000:01:00.0:Ascend 910B:pci0000:00:0"},
			wantCtl: ctl,
		},
		"control node without numbers": {
			tree: tree{fns: []fn{npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0")},
				devs: devs(map[string]string{"davinci0": "236:0", "hisi_hdc": ""})},
			wantErr: []string{"/dev/hisi_hdc"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.tree.fns = withDriverIDs(tc.tree.fns)
			sysRoot, devRoot := tc.tree.build(t)
			b, err := New(Config{SysRoot: sysRoot, DevRoot: devRoot, NodeName: "node-a", DriverVersionFile: filepath.Join(t.TempDir(), "none")})
			if err != nil {
				t.Fatal(err)
			}
			if b.Kind() != device.KindNPU {
				t.Errorf("Kind() = %q", b.Kind())
			}
			inv, err := b.Enumerate(context.Background())
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Enumerate succeeded with %d devices, want an error", len(inv.Devices))
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Enumerate: %v", err)
			}
			if inv.Kind != device.KindNPU || inv.Devices == nil {
				t.Errorf("inventory kind %q, devices %v; want npu and a non-nil list", inv.Kind, inv.Devices)
			}
			var failed []string
			for _, f := range inv.Failed {
				failed = append(failed, strings.Join([]string{f.Name, f.PCIBusID, f.Err.Error()}, ":"))
			}
			if len(failed) != len(tc.wantFailed) {
				t.Errorf("failed devices %q, want %q", failed, tc.wantFailed)
			}
			for i := range min(len(failed), len(tc.wantFailed)) {
				name, rest, _ := strings.Cut(tc.wantFailed[i], ":")
				if !strings.HasPrefix(failed[i], name+":") || !strings.Contains(failed[i], rest[len("0000:00:00.0:"):]) ||
					!strings.HasPrefix(failed[i][len(name)+1:], rest[:len("0000:00:00.0")]) {
					t.Errorf("failed device %q, want %q", failed[i], tc.wantFailed[i])
				}
			}
			var got []string
			for _, d := range inv.Devices {
				i := d.Number
				numa := "-"
				if d.NUMANode != nil {
					numa = fmt.Sprint(*d.NUMANode)
				}
				got = append(got, strings.Join([]string{d.Name, d.PCIBusID, d.ProductName, d.PCIeRoot, numa}, ":"))
				wantNode := device.Node{Path: fmt.Sprintf("/dev/davinci%d", i), Type: "c", Major: 236, Minor: int64(i)}
				if diff := cmp.Diff([]device.Node{wantNode}, d.Nodes); diff != "" {
					t.Errorf("%s nodes (-want +got):\n%s", d.Name, diff)
				}
				if d.Kind != device.KindNPU || d.Index != i || d.DriverVersion != "" || d.CUDAComputeCapability != "" {
					t.Errorf("%s: kind %q index %d driver %q cc %q", d.Name, d.Kind, d.Index, d.DriverVersion, d.CUDAComputeCapability)
				}
				if p, _ := LookupProduct(0xd802); d.ProductName == p.Name && d.MemoryBytes != 64<<30 {
					t.Errorf("%s: memory %d, want 64 GiB", d.Name, d.MemoryBytes)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCtl, inv.ControlNodes); diff != "" {
				t.Errorf("control nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUUID(t *testing.T) {
	tr := tree{fns: []fn{
		{busID: "0000:01:00.0", root: "pci0000:00", vendor: "0x19e5", device: "0xd802", cls: "0x120000", numa: "0", serial: "033JFR10N9000123"},
		npuFn("0000:02:00.0", "pci0000:00", "0xd802", "0"),
	}, devs: devs(map[string]string{"davinci0": "236:0", "davinci1": "236:1"})}
	sysRoot, devRoot := tr.build(t)
	uuids := func(node string) []string {
		b, err := New(Config{SysRoot: sysRoot, DevRoot: devRoot, NodeName: node})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := b.Enumerate(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return []string{inv.Devices[0].UUID, inv.Devices[1].UUID}
	}
	a, again, b := uuids("node-a"), uuids("node-a"), uuids("node-b")
	if diff := cmp.Diff(a, again); diff != "" {
		t.Errorf("UUIDs changed between two enumerations (-first +second):\n%s", diff)
	}
	if want := stableid.UUID("NPU", "serial", "033JFR10N9000123"); a[0] != want || b[0] != want {
		t.Errorf("NPU with serial: UUIDs %q (node-a), %q (node-b); want %q from the serial on both", a[0], b[0], want)
	}
	if want := stableid.UUID("NPU", "node-a", "0000:02:00.0"); a[1] != want {
		t.Errorf("NPU without serial: UUID %q, want %q from node and bus ID", a[1], want)
	}
	if a[1] == b[1] {
		t.Errorf("NPU without serial has UUID %q on both nodes", a[1])
	}
}

func TestDriverVersion(t *testing.T) {
	tr := tree{fns: []fn{npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0")}, devs: devs(map[string]string{"davinci0": "236:0"})}
	sysRoot, devRoot := tr.build(t)
	dir := t.TempDir()
	tests := map[string]struct {
		content string // "" means no file
		want    string
	}{
		"installer file":  {content: "Version=24.1.rc2\nascendhal_version=7.35.23\npackage_version=24.1.rc2\n", want: "24.1.rc2"},
		"no file":         {want: ""},
		"no version line": {content: "package_version=24.1.rc2\n", want: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if tc.content != "" {
				write(t, file, tc.content)
			}
			b, err := New(Config{SysRoot: sysRoot, DevRoot: devRoot, NodeName: "node-a", DriverVersionFile: file})
			if err != nil {
				t.Fatal(err)
			}
			inv, err := b.Enumerate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := inv.Devices[0].DriverVersion; got != tc.want {
				t.Errorf("driver version %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseVersionInfo(t *testing.T) {
	tests := map[string]string{
		"Version=24.1.rc2\n":                          "24.1.rc2",
		"ascendhal_version=7.35.23\nVersion=23.0.0\n": "23.0.0",
		"  Version= 23.0.rc3 \r\n":                    "23.0.rc3",
		"package_version=24.1.rc2\n":                  "",
		"":                                            "",
		"Innerversion=V100R001C19\nVersion=24.1.0\n": "24.1.0",
	}
	for in, want := range tests {
		if got := ParseVersionInfo(in); got != want {
			t.Errorf("ParseVersionInfo(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnreadableRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	write(t, file, "x")
	for name, sysRoot := range map[string]string{
		"missing":          filepath.Join(dir, "nope"),
		"a file":           file,
		"no bus directory": dir,
	} {
		t.Run(name, func(t *testing.T) {
			b, err := New(Config{SysRoot: sysRoot, DevRoot: dir, NodeName: "node-a"})
			if err != nil {
				t.Fatal(err)
			}
			if inv, err := b.Enumerate(context.Background()); err == nil {
				t.Errorf("Enumerate over %s succeeded with %d devices, want an error", sysRoot, len(inv.Devices))
			} else if !strings.Contains(err.Error(), "PCI devices") {
				t.Errorf("error %q does not say what it could not read", err)
			}
		})
	}
}

func TestNewConfig(t *testing.T) {
	tests := map[string]struct {
		cfg     Config
		wantErr bool
	}{
		"complete":     {cfg: Config{SysRoot: "/sys", DevRoot: "/dev", NodeName: "n"}},
		"no sys root":  {cfg: Config{DevRoot: "/dev", NodeName: "n"}, wantErr: true},
		"no dev root":  {cfg: Config{SysRoot: "/sys", NodeName: "n"}, wantErr: true},
		"no node name": {cfg: Config{SysRoot: "/sys", DevRoot: "/dev"}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := New(tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New error = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && b.cfg.DriverVersionFile != DefaultDriverVersionFile {
				t.Errorf("default driver version file = %q", b.cfg.DriverVersionFile)
			}
		})
	}
}

// TestRealDeviceNode checks the stat path for real character devices, with /dev/null standing
// in for /dev/davinci0.
func TestRealDeviceNode(t *testing.T) {
	b := &Backend{cfg: Config{DevRoot: "/dev"}}
	n, err := b.node("null")
	if err != nil {
		t.Fatal(err)
	}
	if want := (device.Node{Path: "/dev/null", Type: "c", Major: 1, Minor: 3}); n != want {
		t.Errorf("node(null) = %+v, want %+v", n, want)
	}
	if _, err := b.node("."); err == nil {
		t.Error("a directory was accepted as a device node")
	}
}

// TestNodeGroup: a node in the driver's group (HwHiAiUser, crw-rw----) gives the container's
// node its group and mode; a node of root's group leaves both to the runtime. Real device nodes
// (mknod, as root where the kernel lets it) and mock stand-ins alike.
func TestNodeGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files another group needs root")
	}
	dir := t.TempDir()
	b := &Backend{cfg: Config{DevRoot: dir}}
	mknod := func(name string) string {
		p := filepath.Join(dir, name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o660, int(unix.Mkdev(236, 0))); err != nil {
			t.Skipf("mknod: %v", err)
		}
		return p
	}
	standIn := func(name string) string {
		p := filepath.Join(dir, name)
		write(t, p, "236:0\n")
		return p
	}
	tests := map[string]struct {
		make func(string) string
		gid  int
		mode os.FileMode
		want device.Node
	}{
		"stand-in, driver's group": {standIn, 1000, 0o660, device.Node{GID: 1000, FileMode: 0o660}},
		"stand-in, root's group":   {standIn, 0, 0o666, device.Node{}},
		"device, driver's group":   {mknod, 1000, 0o660, device.Node{GID: 1000, FileMode: 0o660}},
		"device, root's group":     {mknod, 0, 0o666, device.Node{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			file := strings.ReplaceAll(name, " ", "")
			p := tc.make(file)
			if err := os.Chown(p, 0, tc.gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			n, err := b.node(file)
			if err != nil {
				t.Fatal(err)
			}
			if n.GID != tc.want.GID || n.FileMode != tc.want.FileMode {
				t.Errorf("node %s: group %d mode %v, want group %d mode %v", name, n.GID, n.FileMode, tc.want.GID, tc.want.FileMode)
			}
		})
	}
}

func TestLookupProduct(t *testing.T) {
	tests := map[uint16]string{0xd100: "Ascend 310", 0xd500: "Ascend 310P", 0xd801: "Ascend 910", 0xd802: "Ascend 910B", 0xd803: "Ascend 910C", 0xa222: ""}
	for id, want := range tests {
		p, ok := LookupProduct(id)
		if p.Name != want || ok != (want != "") {
			t.Errorf("LookupProduct(%#x) = %q, %v; want %q", id, p.Name, ok, want)
		}
		if ok && (p.Architecture == "" || p.MemoryBytes <= 0) {
			t.Errorf("product %#x has no architecture or memory: %+v", id, p)
		}
	}
}

// TestUnknownAcceleratorLogged checks that an unknown Huawei accelerator is reported at the
// default verbosity (it is probably an NPU the table lacks) while a Huawei NIC is not.
func TestUnknownAcceleratorLogged(t *testing.T) {
	tr := tree{fns: []fn{
		{busID: "0000:02:00.0", root: "pci0000:00", vendor: "0x19e5", device: "0xd999", cls: "0x120000", numa: "0"},
		{busID: "0000:7d:00.0", root: "pci0000:7c", vendor: "0x19e5", device: "0xa222", cls: "0x020000", numa: "0"},
	}, devs: devs(nil)}
	sysRoot, devRoot := tr.build(t)
	b, err := New(Config{SysRoot: sysRoot, DevRoot: devRoot, NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	inv, err := b.Enumerate(klog.NewContext(context.Background(), logger))
	if err != nil || len(inv.Devices) != 0 {
		t.Fatalf("Enumerate = %v, %v; want no devices and no error", inv, err)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(logs, "unknown device ID") || !strings.Contains(logs, "0000:02:00.0") || !strings.Contains(logs, "0xd999") {
		t.Errorf("unknown accelerator 0000:02:00.0 (0xd999) not reported; logs:\n%s", logs)
	}
	if strings.Contains(logs, "0000:7d:00.0") {
		t.Errorf("Huawei NIC reported at default verbosity; logs:\n%s", logs)
	}
}

// withDriverIDs gives the NPUs among fns the dev_ids the Ascend driver would, in bus order as on
// hosts whose numbering follows it: the functions of known products and those whose device ID
// cannot be read (the driver probed them).
func withDriverIDs(fns []fn) []fn {
	out := slices.Clone(fns)
	var npus []int
	for i, f := range out {
		if _, known := LookupProduct(uint16(mustHex(f.device))); f.vendor == "0x19e5" && f.cls == "0x120000" && (known || f.unreadableDevice) {
			npus = append(npus, i)
		}
	}
	slices.SortFunc(npus, func(a, b int) int { return strings.Compare(out[a].busID, out[b].busID) })
	for id, i := range npus {
		out[i].devID = strconv.Itoa(id)
	}
	return out
}

func mustHex(s string) uint64 {
	v, _ := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 16)
	return v
}

// withDevID gives a function the Ascend driver's dev_id attribute.
func withDevID(f fn, devID string) fn {
	f.devID = devID
	return f
}

// TestDavinciMapping checks which PCI function each /dev/davinciN is published for: the one the
// driver's attributes name (the node's minor is the function's udevid), and no topology where
// they do not say.
func TestDavinciMapping(t *testing.T) {
	// Four 910Bs numbered as on an Atlas 800T A2: davinci0..3 are the NPUs at c1, 01, c2, 02.
	a2 := []fn{
		withDevID(npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0"), "1"),
		withDevID(npuFn("0000:02:00.0", "pci0000:00", "0xd802", "0"), "3"),
		withDevID(npuFn("0000:c1:00.0", "pci0000:c0", "0xd802", "1"), "0"),
		withDevID(npuFn("0000:c2:00.0", "pci0000:c0", "0xd802", "1"), "2"),
	}
	a2Want := []string{
		"npu-0:/dev/davinci0:0000:c1:00.0:pci0000:c0:1",
		"npu-1:/dev/davinci1:0000:01:00.0:pci0000:00:0",
		"npu-2:/dev/davinci2:0000:c2:00.0:pci0000:c0:1",
		"npu-3:/dev/davinci3:0000:02:00.0:pci0000:00:0",
	}
	nodes4 := devs(map[string]string{"davinci0": "236:0", "davinci1": "236:1", "davinci2": "236:2", "davinci3": "236:3"})
	noAttrs := make([]fn, len(a2))
	for i, f := range a2 {
		noAttrs[i] = withDevID(f, "")
	}
	tests := map[string]struct {
		tree tree
		// want lists name:node:pciBusID:pcieRoot:numa per device ("-": no NUMA node).
		want []string
		// wantUUIDBus names, per device, the bus ID its UUID is derived from (node-a, bus ID).
		wantUUIDBus map[string]string
		// wantFormerBus names, per device, the bus ID of the UUID the backend published for its
		// node before it mapped nodes to chips (its node's position in bus order); a device
		// not named has none. Nil: not checked.
		wantFormerBus map[string]string
		// wantFailed lists name|pciBusID|error substring per failed NPU.
		wantFailed []string
	}{
		"atlas 800T A2 order from dev_id": {
			tree:          tree{fns: a2, devs: nodes4},
			want:          a2Want,
			wantUUIDBus:   map[string]string{"npu-0": "0000:c1:00.0", "npu-1": "0000:01:00.0", "npu-2": "0000:c2:00.0", "npu-3": "0000:02:00.0"},
			wantFormerBus: map[string]string{"npu-0": "0000:01:00.0", "npu-1": "0000:02:00.0", "npu-2": "0000:c1:00.0", "npu-3": "0000:c2:00.0"},
		},
		"atlas 800T A2 order from the bdf table": {
			tree: tree{fns: a2, devs: nodes4, table: true},
			want: a2Want,
		},
		"bus order: names and UUIDs as before": {
			tree: tree{fns: []fn{
				withDevID(npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0"), "0"),
				withDevID(npuFn("0000:81:00.0", "pci0000:80", "0xd802", "1"), "1"),
			}, devs: devs(map[string]string{"davinci0": "236:0", "davinci1": "236:1"}), table: true},
			want: []string{
				"npu-0:/dev/davinci0:0000:01:00.0:pci0000:00:0",
				"npu-1:/dev/davinci1:0000:81:00.0:pci0000:80:1",
			},
			wantUUIDBus:   map[string]string{"npu-0": "0000:01:00.0", "npu-1": "0000:81:00.0"},
			wantFormerBus: map[string]string{},
		},
		"udevid from the table, not dev_id (reordered udevids)": {
			tree: tree{fns: []fn{
				{busID: "0000:01:00.0", root: "pci0000:00", vendor: "0x19e5", device: "0xd802", cls: "0x120000", numa: "0", devID: "0", udevid: "1"},
				{busID: "0000:81:00.0", root: "pci0000:80", vendor: "0x19e5", device: "0xd802", cls: "0x120000", numa: "1", devID: "1", udevid: "0"},
			}, devs: devs(map[string]string{"davinci0": "236:0", "davinci1": "236:1"}), table: true},
			want: []string{
				"npu-0:/dev/davinci0:0000:81:00.0:pci0000:80:1",
				"npu-1:/dev/davinci1:0000:01:00.0:pci0000:00:0",
			},
		},
		"logic id is not the minor: the minor decides": {
			tree: tree{fns: []fn{
				withDevID(npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0"), "2"),
				withDevID(npuFn("0000:81:00.0", "pci0000:80", "0xd802", "1"), "0"),
			}, devs: devs(map[string]string{"davinci0": "236:0", "davinci1": "236:2"})},
			want: []string{
				"npu-0:/dev/davinci0:0000:81:00.0:pci0000:80:1",
				"npu-1:/dev/davinci1:0000:01:00.0:pci0000:00:0",
			},
		},
		"no driver attributes: no topology, names and UUIDs as before": {
			tree: tree{fns: noAttrs, devs: nodes4},
			want: []string{
				"npu-0:/dev/davinci0:::-",
				"npu-1:/dev/davinci1:::-",
				"npu-2:/dev/davinci2:::-",
				"npu-3:/dev/davinci3:::-",
			},
			wantUUIDBus:   map[string]string{"npu-0": "0000:01:00.0", "npu-1": "0000:02:00.0", "npu-2": "0000:c1:00.0", "npu-3": "0000:c2:00.0"},
			wantFormerBus: map[string]string{},
		},
		"two functions with one dev_id: neither verified": {
			tree: tree{fns: []fn{
				withDevID(npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0"), "0"),
				withDevID(npuFn("0000:81:00.0", "pci0000:80", "0xd802", "1"), "0"),
			}, devs: devs(map[string]string{"davinci0": "236:0", "davinci1": "236:1"})},
			want: []string{
				"npu-0:/dev/davinci0:::-",
				"npu-1:/dev/davinci1:::-",
			},
		},
		"dev_id without its node fails, the others map": {
			tree: tree{fns: []fn{
				withDevID(npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0"), "1"),
				withDevID(npuFn("0000:81:00.0", "pci0000:80", "0xd802", "1"), "0"),
			}, devs: devs(map[string]string{"davinci0": "236:0"})},
			want:       []string{"npu-0:/dev/davinci0:0000:81:00.0:pci0000:80:1"},
			wantFailed: []string{"|0000:01:00.0|no /dev/davinci node has minor 1"},
		},
		"unverified function whose legacy node another function has": {
			tree: tree{fns: []fn{
				npuFn("0000:01:00.0", "pci0000:00", "0xd802", "0"),
				withDevID(npuFn("0000:81:00.0", "pci0000:80", "0xd802", "1"), "0"),
			}, devs: devs(map[string]string{"davinci0": "236:0", "davinci1": "236:1"})},
			want:       []string{"npu-0:/dev/davinci0:0000:81:00.0:pci0000:80:1"},
			wantFailed: []string{"|0000:01:00.0|cannot tell which /dev/davinci node"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sysRoot, devRoot := tc.tree.build(t)
			b, err := New(Config{SysRoot: sysRoot, DevRoot: devRoot, NodeName: "node-a", DriverVersionFile: filepath.Join(t.TempDir(), "none")})
			if err != nil {
				t.Fatal(err)
			}
			inv, err := b.Enumerate(context.Background())
			if err != nil {
				t.Fatalf("Enumerate: %v", err)
			}
			var got []string
			for _, d := range inv.Devices {
				numa := "-"
				if d.NUMANode != nil {
					numa = fmt.Sprint(*d.NUMANode)
				}
				node := ""
				if len(d.Nodes) == 1 {
					node = d.Nodes[0].Path
				}
				got = append(got, strings.Join([]string{d.Name, node, d.PCIBusID, d.PCIeRoot, numa}, ":"))
				if bus, ok := tc.wantUUIDBus[d.Name]; ok && d.UUID != stableid.UUID("NPU", "node-a", bus) {
					t.Errorf("%s: UUID %q, want the one derived from node-a and %s", d.Name, d.UUID, bus)
				}
				if tc.wantFormerBus != nil {
					var want []string
					if bus, ok := tc.wantFormerBus[d.Name]; ok {
						want = []string{stableid.UUID("NPU", "node-a", bus)}
					}
					if !slices.Equal(d.FormerUUIDs, want) {
						t.Errorf("%s: former UUIDs %q, want %q (the UUID of %s)", d.Name, d.FormerUUIDs, want, tc.wantFormerBus[d.Name])
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			var failed []string
			for _, f := range inv.Failed {
				failed = append(failed, f.Name+"|"+f.PCIBusID+"|"+f.Err.Error())
			}
			if len(failed) != len(tc.wantFailed) {
				t.Fatalf("failed %q, want %q", failed, tc.wantFailed)
			}
			for i, w := range tc.wantFailed {
				name, rest, _ := strings.Cut(w, "|")
				bus, msg, _ := strings.Cut(rest, "|")
				if !strings.HasPrefix(failed[i], name+"|"+bus+"|") || !strings.Contains(failed[i], msg) {
					t.Errorf("failed device %q, want %q", failed[i], w)
				}
			}
		})
	}
}
