package nvmlmock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/devnode"
)

// UVMState is how far the nvidia-uvm kernel module is set up on the mock machine. The module is
// loaded on demand (the first CUDA program on the host, or nvidia-modprobe -u), often after the
// plugin started, and loading it with modprobe registers its character major in /proc/devices
// without creating /dev/nvidia-uvm: nvidia-modprobe -c=0, or the NVIDIA toolkit's
// `nvidia-ctk system create-device-nodes --control-devices`, makes the nodes.
type UVMState int32

const (
	// UVMReady: the module is loaded and its nodes exist (a node that has run CUDA).
	UVMReady UVMState = iota
	// UVMModuleOnly: /proc/devices lists nvidia-uvm; /dev/nvidia-uvm and -tools do not exist.
	UVMModuleOnly
	// UVMNotLoaded: neither.
	UVMNotLoaded
)

// devNodes are the machine's device nodes and /proc/devices: which nodes its driver install
// creates, with which numbers, and the kernel's list of character majors. It is apart from the
// Server so that what the plugin keeps to look at nodes again after enumeration does not hold
// the whole machine.
//
// Where the nodes are is the node's layout, not the machine's: nvidia-modprobe on a host with
// the driver installed creates them in the host's /dev; the GPU operator's driver container
// creates them under its root, which the host sees at /run/nvidia/driver/dev, and the host's
// /dev has none (NVIDIA/gpu-operator#1741; the operator's validator then takes the driver root
// as the dev root, cmd/nvidia-validator). So the mock answers a stat in two honest ways:
//   - Server.Stat, for tests of the backend alone, is a host whose /dev holds the nodes: it
//     answers for /dev/<name> and /dev/dri/<name> only, never for the same name elsewhere;
//   - StatFile, for the plugin, reads the real file system, where WriteDevNodes (or a test's
//     mknod, as the driver's installer would) laid the nodes out: only a node that is there is
//     found, so a plugin that looks in the wrong directory finds none.
//
// Containers get the nodes fully specified (type, major, minor), as on a real node, so the
// runtime stats no host path: runc creates the node in the container with mknod.
type devNodes struct {
	// minors are the GPUs' minor numbers, /dev/nvidia<minor>.
	minors []int
	// fileGID is the driver's NVreg_DeviceFileGID (SetDeviceFileGID); 0, the driver's default,
	// makes the nodes root's.
	fileGID atomic.Uint32
	modeset bool
	// dri are the /dev/dri nodes (card<N>, renderD<M>) by name, with their DRM minors.
	dri map[string]int64
	uvm atomic.Int32
}

// SetUVM changes the state of the nvidia-uvm module; the next stat and /proc/devices read see
// it, as on a host where the module is loaded (or unloaded) while the plugin runs.
func (s *Server) SetUVM(st UVMState) { s.dev.uvm.Store(int32(st)) }

// WithUVM starts the machine with nvidia-uvm in state st (default UVMReady).
func WithUVM(st UVMState) Option { return func(o *options) { o.uvm = &st } }

// Groups and modes of the machine's nodes, as the host has them. The NVIDIA driver creates
// /dev/nvidia* as root:root with mode 0666 unless its module parameters NVreg_DeviceFileUID,
// NVreg_DeviceFileGID and NVreg_DeviceFileMode say otherwise (NVIDIA's driver README,
// "Configuring device file permissions"; nvidia-modprobe applies them, with
// NVreg_ModifyDeviceFiles=1, the default); a site that keeps GPUs to a group sets the group and
// 0660 (SetDeviceFileGID). The kernel's DRM nodes get their group from udev's default rules
// (systemd's 50-udev-default.rules): card<N> video, renderD<N> render, 0660 on most
// distributions (the listing in cncf-tags/container-device-interface#175: "crw-rw---- 1 root
// video 226, 0 /dev/dri/card0", "crw-rw---- 1 root render 226, 128 /dev/dri/renderD128").
const (
	// VideoGID is Debian's and Ubuntu's static video group (base-passwd).
	VideoGID = 44
	// RenderGID is the render group, a dynamic system group (109 in the listing above).
	RenderGID = 109
	// StandInMode is the mode of WriteDevNodes' files for the NVIDIA driver's nodes: the
	// driver's default device file mode (NVreg_DeviceFileMode=0666, nvidia-modprobe's default),
	// which a node stand-in copies.
	StandInMode = 0o666
	// groupMode is the mode of a node kept to a group: the DRM nodes, and the NVIDIA nodes with
	// NVreg_DeviceFileGID set.
	groupMode = 0o660
)

// SetDeviceFileGID makes the NVIDIA driver's nodes the machine creates from now on (DevNodes,
// Stat, WriteDevNodes) group gid with mode 0660, as NVreg_DeviceFileGID=gid with
// NVreg_DeviceFileMode=0660 does; 0 is the driver's default, root's group and mode 0666.
func (s *Server) SetDeviceFileGID(gid uint32) { s.dev.fileGID.Store(gid) }

// Stat is the nvml.StatFunc of a mock host whose /dev holds the machine's nodes: it answers for
// /dev/<name> (and /dev/dri/<name>) with the numbers the NVIDIA driver uses, and fs.ErrNotExist
// for anything else: a node of the machine under another directory, the nvidia-uvm nodes while
// they are not created, and every /dev/nvidia-caps node (the plugin must build those from
// ProcFS).
func (s *Server) Stat(p string) (devnode.Info, error) { return s.dev.stat(p) }

// ProcDevices is the content of the machine's /proc/devices: the character majors of the
// NVIDIA driver's modules that are loaded.
func (s *Server) ProcDevices() ([]byte, error) { return s.dev.procDevices() }

// DevNode is a device node the machine's driver install creates, by its path relative to the
// dev root ("nvidia0", "dri/card1"), with the group and mode the host gives it.
type DevNode struct {
	Name         string
	Major, Minor int64
	GID          uint32
	Mode         fs.FileMode
}

// DevNodes returns the nodes the machine's driver install creates now, sorted by name: what
// nvidia-modprobe (or the toolkit's create-device-nodes) makes for its GPUs and loaded modules,
// and the kernel's DRM nodes where nvidia-drm is loaded. A test lays them out where its node's
// layout puts them (WriteDevNodes, or mknod as root).
func (s *Server) DevNodes() []DevNode { return s.dev.nodes() }

func (d *devNodes) nodes() []DevNode {
	gid, mode := d.fileGID.Load(), fs.FileMode(StandInMode)
	if gid != 0 {
		mode = groupMode
	}
	nv := func(name string, major, minor int64) DevNode {
		return DevNode{Name: name, Major: major, Minor: minor, GID: gid, Mode: mode}
	}
	out := []DevNode{nv("nvidiactl", nvidiaMajor, nvidiaCtlMinor)}
	for _, m := range d.minors {
		out = append(out, nv("nvidia"+strconv.Itoa(m), nvidiaMajor, int64(m)))
	}
	if UVMState(d.uvm.Load()) == UVMReady {
		out = append(out, nv("nvidia-uvm", uvmMajor, 0), nv("nvidia-uvm-tools", uvmMajor, 1))
	}
	if d.modeset {
		out = append(out, nv("nvidia-modeset", nvidiaMajor, nvidiaModesetMin))
	}
	for name, minor := range d.dri {
		group := uint32(VideoGID)
		if strings.HasPrefix(name, "renderD") {
			group = RenderGID
		}
		out = append(out, DevNode{Name: "dri/" + name, Major: drmMajor, Minor: minor, GID: group, Mode: groupMode})
	}
	slices.SortFunc(out, func(a, b DevNode) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (d *devNodes) stat(p string) (devnode.Info, error) {
	rel, ok := strings.CutPrefix(path.Clean(p), "/dev/")
	if ok {
		for _, n := range d.nodes() {
			if n.Name == rel {
				return devnode.Info{Type: "c", Major: n.Major, Minor: n.Minor, GID: n.GID, Mode: n.Mode}, nil
			}
		}
	}
	return devnode.Info{}, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
}

// WriteDevNodes lays the nodes the machine's driver install creates (DevNodes without the DRM
// nodes: nvidia-modprobe's) out under dir as stand-ins: regular files that hold "MAJOR:MINOR",
// the format of a sysfs dev attribute (as npumock's devfs does), which StatFile reads as the
// character device they stand for, with the node's mode and group. A test that may not give a
// file another group (not root) keeps its own primary group as the stand-in group of a node of
// a group; one of root's is refused. Making device special files needs CAP_MKNOD, which tests and
// unprivileged plugins lack; a test that runs as root (the kind node) makes real ones with
// mknod instead. Nodes of the machine's that are no longer created (nvidia-uvm unloaded) are
// removed, and nothing else in dir is touched.
func (s *Server) WriteDevNodes(dir string) error { return s.dev.write(dir, false) }

// WriteDRMNodes lays the machine's DRM nodes out under dir/dri the same way. The kernel's DRM
// core creates them in the host's devtmpfs when nvidia-drm binds a GPU, so they are in the
// host's /dev whichever root the driver's own nodes are under.
func (s *Server) WriteDRMNodes(dir string) error { return s.dev.write(dir, true) }

func (d *devNodes) write(dir string, drm bool) error {
	want := map[string]DevNode{}
	for _, n := range d.nodes() {
		if strings.HasPrefix(n.Name, "dri/") == drm {
			want[n.Name] = n
		}
	}
	if !drm {
		for _, name := range []string{"nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"} {
			if _, ok := want[name]; !ok {
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("mock device nodes: %w", err)
				}
			}
		}
	}
	for _, n := range want {
		p := filepath.Join(dir, filepath.FromSlash(n.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("mock device nodes: %w", err)
		}
		if err := replaceFile(p, fmt.Appendf(nil, "%d:%d\n", n.Major, n.Minor), n.Mode); err != nil {
			return fmt.Errorf("mock device nodes: %w", err)
		}
		if err := chgrp(p, n.GID); err != nil {
			return fmt.Errorf("mock device nodes: %w", err)
		}
	}
	return nil
}

// chgrp gives the stand-in at p the group gid, or keeps the test's own group where it may not
// (see WriteDevNodes).
func chgrp(p string, gid uint32) error {
	if gid == 0 {
		return nil
	}
	err := os.Lchown(p, -1, int(gid))
	if err == nil {
		return nil
	}
	if own, _, serr := devnode.Owner(p); serr != nil || own == 0 {
		return fmt.Errorf("device node stand-in %s: cannot give it group %d (%w) and its own group is root's; run as root or with a primary group other than root", p, gid, err)
	}
	return nil
}

// StatFile is the nvml.StatFunc of a mock machine whose nodes are files on this host: a device
// special file answers with its numbers (devnode.Stat), a WriteDevNodes stand-in with the
// numbers it holds, a missing file with fs.ErrNotExist, anything else with an error.
func StatFile(p string) (devnode.Info, error) {
	info, err := devnode.Stat(p)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return info, err
	}
	fi, serr := os.Stat(p)
	if serr != nil || !fi.Mode().IsRegular() || fi.Size() > 32 {
		return devnode.Info{}, err
	}
	b, rerr := os.ReadFile(p)
	if rerr != nil {
		return devnode.Info{}, rerr
	}
	major, minor, perr := devnode.ParseDev(string(b))
	if perr != nil {
		return devnode.Info{}, fmt.Errorf("%s is neither a device node nor a mock stand-in: %w", p, perr)
	}
	gid, mode, oerr := devnode.Owner(p)
	if oerr != nil {
		return devnode.Info{}, oerr
	}
	return devnode.Info{Type: "c", Major: major, Minor: minor, GID: gid, Mode: mode}, nil
}

func (d *devNodes) procDevices() ([]byte, error) {
	var b strings.Builder
	// The layout of the kernel's file, with a few of the majors every host has; drivers since
	// 550 name the GPU major "nvidia" (older ones "nvidia-frontend").
	b.WriteString("Character devices:\n  1 mem\n  4 /dev/vc/0\n  5 /dev/tty\n")
	fmt.Fprintf(&b, "%3d nvidia\n", nvidiaMajor)
	if UVMState(d.uvm.Load()) != UVMNotLoaded {
		fmt.Fprintf(&b, "%3d nvidia-uvm\n", uvmMajor)
	}
	fmt.Fprintf(&b, "%3d nvidia-caps\n%3d nvidia-caps-imex-channels\n", CapsMajor, imexChannelsMajor)
	b.WriteString("\nBlock devices:\n  7 loop\n  8 sd\n259 blkext\n")
	return []byte(b.String()), nil
}
