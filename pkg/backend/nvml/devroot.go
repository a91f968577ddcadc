package nvml

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/devnode"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// Where a GPU node's device nodes are depends on how its driver was installed:
//   - a driver installed on the host (packages, the .run installer): nvidia-modprobe creates
//     /dev/nvidia* in the host's /dev;
//   - the GPU operator's driver container: nvidia-modprobe runs in the container, whose root the
//     host sees at /run/nvidia/driver, so the nodes exist only under /run/nvidia/driver/dev and
//     the host's /dev has none of them (NVIDIA/gpu-operator#1741, checkpoint-restore/criu#2509);
//     the operator's validator only adds /dev/char/<major>:<minor> links to them.
//
// NVIDIA's tools settle it one way: a driver root is also the dev root when it has a dev/
// directory (the operator's cmd/nvidia-validator getDriverInfo, NVIDIA's DRA driver's
// cmd/gpu-kubelet-plugin/root.go isDevRoot), else the host's. So a node is looked up in the
// driver root's dev/ first, then in the host's /dev: the kernel's DRM nodes, for one, are in
// the host's devtmpfs whatever the driver's layout.

// WithDriverRoot says where the NVIDIA driver's root is, as this process sees it (root) and as
// the host sees it (hostRoot; "" means the same path), so that device nodes are found under its
// dev/ when it has one. A root of "/" on the host is the host itself, whose /dev is devRoot.
func WithDriverRoot(root, hostRoot string) Option {
	return func(b *Backend) { b.nodes.driverRoot, b.nodes.hostDriverRoot = root, hostRoot }
}

// nodeFinder looks device nodes up where the driver's layout puts them. It holds no NVML, so
// it answers after the backend is closed.
type nodeFinder struct {
	stat StatFunc
	// devRoot is where the host's /dev is visible to this process.
	devRoot                    string
	driverRoot, hostDriverRoot string
	// proc is the host's /proc, for the majors of nodes that exist nowhere (WithProc).
	proc fs.FS
}

// driverDevDir returns the driver root's dev/ as this process sees it, and as the host sees it,
// when the driver root is a dev root; "" otherwise. It is asked at each look-up: the operator's
// driver root appears (and is replaced by an upgrade) while the plugin runs.
func (f *nodeFinder) driverDevDir() (seen, host string) {
	hostRoot := f.hostDriverRoot
	if hostRoot == "" {
		hostRoot = f.driverRoot
	}
	if f.driverRoot == "" || path.Clean(hostRoot) == "/" {
		return "", ""
	}
	seen = filepath.Join(f.driverRoot, "dev")
	if fi, err := os.Stat(seen); err != nil || !fi.IsDir() {
		return "", ""
	}
	return seen, path.Join(hostRoot, "dev")
}

// find returns the node /dev/<name>: from the driver root's dev/ (with that as its host path,
// which is where the host has it) or else the host's /dev. A node in neither yields an error
// matching fs.ErrNotExist; the returned Node's Path is set even on error, for logs.
func (f *nodeFinder) find(name string) (device.Node, error) {
	n := device.Node{Path: path.Join("/dev", name)}
	if seen, host := f.driverDevDir(); seen != "" {
		info, err := f.stat(filepath.Join(seen, name))
		switch {
		case err == nil:
			n.HostPath = path.Join(host, name)
			return withInfo(n, info), nil
		case !errors.Is(err, fs.ErrNotExist):
			return n, fmt.Errorf("device node %s (%s on the host): %w", n.Path, path.Join(host, name), err)
		}
	}
	info, err := f.stat(filepath.Join(f.devRoot, name))
	if err != nil {
		return n, fmt.Errorf("device node %s: %w", n.Path, err)
	}
	return withInfo(n, info), nil
}

// withInfo is n with the numbers of the node stat found, and its group and mode where its group
// is not root's (NVreg_DeviceFileGID; render and video for /dev/dri): a runtime gives the
// container's node no group of the host's unless the spec says (device.Node.GID).
func withInfo(n device.Node, info devnode.Info) device.Node {
	n.Type, n.Major, n.Minor = info.Type, info.Major, info.Minor
	if info.GID != 0 {
		n.GID, n.FileMode = info.GID, info.Mode
	}
	return n
}

// majors returns the character majors of the host's /proc/devices.
func (f *nodeFinder) majors() (map[string]int64, error) {
	if f.proc == nil {
		return nil, errors.New("no proc filesystem configured")
	}
	r, err := f.proc.Open("devices")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return devnode.CharMajors(r)
}

// gpuModules are the names /proc/devices lists the GPUs' major under ("nvidia-frontend" before
// driver 550).
var gpuModules = []string{"nvidia", "nvidia-frontend"}

// gpuNode returns the GPU's /dev/nvidia<minor>. Where no layout has the node (nothing ran
// nvidia-modprobe for it yet), it is fully specified from the major the kernel lists for the
// driver and NVML's minor, as the toolkit's create-device-nodes makes it: the runtime creates
// it in the container, and the GPU is not lost for a node the host lacks.
func (f *nodeFinder) gpuNode(minor int) (device.Node, bool, error) {
	n, err := f.find(fmt.Sprintf("nvidia%d", minor))
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return n, false, err
	}
	majors, merr := f.majors()
	if merr != nil {
		return n, false, fmt.Errorf("%w; and no major for it: /proc/devices: %w", err, merr)
	}
	if major, ok := majorOf(majors, gpuModules); ok {
		return device.Node{Path: n.Path, Type: "c", Major: major, Minor: int64(minor)}, true, nil
	}
	return n, false, fmt.Errorf("%w; and /proc/devices lists no %v driver", err, gpuModules)
}

// majorOf returns the major majors lists for the first of modules that it lists.
func majorOf(majors map[string]int64, modules []string) (int64, bool) {
	for _, m := range modules {
		if major, ok := majors[m]; ok {
			return major, true
		}
	}
	return 0, false
}

// moduleVersion is the loaded kernel module's version from the host's /proc/driver/nvidia/version
// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  ..."), for messages; "" where it
// cannot be read.
func (f *nodeFinder) moduleVersion() string {
	if f.proc == nil {
		return ""
	}
	b, err := fs.ReadFile(f.proc, "driver/nvidia/version")
	if err != nil {
		return ""
	}
	return ModuleVersion(b)
}

// ModuleVersion reads the loaded module's version out of /proc/driver/nvidia/version's first
// line ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  ..."); "" if it has none.
func ModuleVersion(procVersion []byte) string {
	m := moduleVersionOf.FindSubmatch(procVersion)
	if m == nil {
		return ""
	}
	return string(m[1])
}

var moduleVersionOf = regexp.MustCompile(`Kernel Module(?: for [a-z0-9_]+)?\s+([0-9]+(?:\.[0-9]+)+)`)
