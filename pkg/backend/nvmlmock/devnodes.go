package nvmlmock

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
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

// devNodes are the machine's /dev and /proc/devices: what a stat of a node and the kernel's
// list of character majors answer. It is apart from the Server so that what the plugin keeps to
// look at nodes again after enumeration does not hold the whole machine.
//
// The nodes exist only here, never on the host: the plugin gives them to the runtime fully
// specified (type, major, minor, no host path), as it does on a real node, and a runtime needs
// no host node for such a spec. The CDI library stats the host path only to fill in what a spec
// leaves out (and keeps the host node's mode, which runc's default 0666 equals), runc creates
// the node in the container with mknod, and where runc bind-mounts nodes instead (in a user
// namespace) it takes them from the container path on the host, which no mock node elsewhere
// would feed. A node the mock made at /dev/nvidia<N> on a host with real GPUs could only be the
// real one. Containers find their GPUs by these nodes (the mock's nvidia-smi lists those it sees).
type devNodes struct {
	gpus    int
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

// Stat is the nvml.StatFunc of the mock machine: it answers for the machine's device nodes
// (by base name, wherever the dev root is) with the numbers the NVIDIA driver uses, and
// fs.ErrNotExist for anything else, including the nvidia-uvm nodes while they are not created
// and every /dev/nvidia-caps node (the plugin must build those from ProcFS).
func (s *Server) Stat(p string) (string, int64, int64, error) { return s.dev.stat(p) }

// ProcDevices is the content of the machine's /proc/devices: the character majors of the
// NVIDIA driver's modules that are loaded.
func (s *Server) ProcDevices() ([]byte, error) { return s.dev.procDevices() }

func (d *devNodes) stat(p string) (string, int64, int64, error) {
	name := path.Base(p)
	switch name {
	case "nvidiactl":
		return "c", nvidiaMajor, nvidiaCtlMinor, nil
	case "nvidia-uvm", "nvidia-uvm-tools":
		if UVMState(d.uvm.Load()) == UVMReady {
			minor := int64(0)
			if name == "nvidia-uvm-tools" {
				minor = 1
			}
			return "c", uvmMajor, minor, nil
		}
	case "nvidia-modeset":
		if d.modeset {
			return "c", nvidiaMajor, nvidiaModesetMin, nil
		}
	}
	if minor, ok := d.dri[name]; ok && path.Base(path.Dir(p)) == "dri" {
		return "c", drmMajor, minor, nil
	}
	if m := deviceNode.FindStringSubmatch(name); m != nil {
		if minor, err := strconv.Atoi(m[1]); err == nil && minor < d.gpus {
			return "c", nvidiaMajor, int64(minor), nil
		}
	}
	return "", 0, 0, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
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
