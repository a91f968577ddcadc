package nvml

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"

	"github.com/go-logr/logr"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// controlNodes are the nodes every GPU container needs. nvidia-modeset exists only where the
// display part of the driver is loaded, so its absence is normal and logged quietly.
//
// The others may be missing from /dev although their module is loaded: the NVIDIA driver
// creates no nodes itself (nvidia-modprobe, or the toolkit's `nvidia-ctk system
// create-device-nodes --control-devices`, does), and nvidia-uvm in particular is loaded on
// demand, often after the plugin started. Such a node is given to the runtime fully specified,
// with the major the kernel lists in /proc/devices for modules and the driver's fixed minor, the
// numbers the toolkit's create-device-nodes uses (pkg/system/nvdevices): the runtime then
// creates the node in the container and no node on the host is needed.
var controlNodes = []struct {
	name     string
	optional bool
	// modules are the names /proc/devices may list the node's major under, in order
	// ("nvidia-frontend" before driver 550); minor is the driver's fixed minor.
	modules []string
	minor   int64
}{
	{name: "nvidiactl", modules: gpuModules, minor: 255},
	{name: "nvidia-uvm", modules: []string{"nvidia-uvm"}, minor: 0},
	{name: "nvidia-uvm-tools", modules: []string{"nvidia-uvm"}, minor: 1},
	{name: "nvidia-modeset", optional: true},
}

// controlResolver looks the control nodes up: a stat each (where the driver's layout puts
// them, devroot.go), and /proc/devices for a missing one.
// It holds no NVML, so it answers after the backend is closed.
type controlResolver struct {
	// nodes' proc is the host's /proc (WithProc; the kernel has one /proc/devices for all
	// namespaces, so a plugin in a container reads the host's); nil: a missing control node is
	// left out.
	nodes  nodeFinder
	logger logr.Logger

	mu   sync.Mutex
	last []device.Node // what the previous look-up found, to log changes once
	seen bool
}

func (b *Backend) controlResolver(logger logr.Logger) *controlResolver {
	return &controlResolver{nodes: b.nodes, logger: logger}
}

// resolve returns the control nodes as they are now. A node neither in /dev nor (for a module)
// in /proc/devices is left out: containers still start without it, and CUDA reports what it
// misses. Only a stat that fails otherwise is an error.
func (r *controlResolver) resolve() ([]device.Node, error) {
	out := make([]device.Node, 0, len(controlNodes))
	var majors map[string]int64
	var missing []string
	for _, c := range controlNodes {
		n, err := r.nodes.find(c.name)
		switch {
		case err == nil:
			out = append(out, n)
			continue
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		if majors == nil {
			majors = r.majors()
		}
		if major, ok := majorOf(majors, c.modules); ok {
			out = append(out, device.Node{Path: n.Path, Type: "c", Major: major, Minor: c.minor})
		} else if !c.optional {
			missing = append(missing, n.Path)
		}
	}
	r.logChange(out, missing)
	return out, nil
}

// majors returns the character majors of /proc/devices; none if it cannot be read, which is
// logged: the nodes that exist are still found.
func (r *controlResolver) majors() map[string]int64 {
	if r.nodes.proc == nil {
		return nil
	}
	out, err := r.nodes.majors()
	if err != nil {
		r.logger.Error(err, "Cannot read the kernel's device majors; control nodes missing from /dev are left out")
	}
	return out
}

// logChange logs the control nodes when they differ from the previous look-up (at the first,
// the start-up's), so that a module loaded later shows in the log once, not at every prepare.
func (r *controlResolver) logChange(nodes []device.Node, missing []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen && slices.Equal(r.last, nodes) {
		return
	}
	first := !r.seen
	r.seen, r.last = true, slices.Clone(nodes)
	paths := make([]string, len(nodes))
	for i, n := range nodes {
		paths[i] = fmt.Sprintf("%s (%s %d:%d)", n.Path, n.Type, n.Major, n.Minor)
	}
	if len(missing) > 0 {
		// nvidia-uvm is the usual one: loaded by the first CUDA program on the host, which a
		// container cannot do (it may not load modules).
		r.logger.Info("Control device nodes missing: containers get none until the module is loaded on the host (nvidia-modprobe -u -c=0, or nvidia-ctk system create-device-nodes --control-devices --load-kernel-modules); CUDA cannot initialise without nvidia-uvm",
			"missing", missing, "nodes", paths)
		return
	}
	if first {
		r.logger.V(2).Info("Control device nodes", "nodes", paths)
		return
	}
	r.logger.Info("Control device nodes changed; CDI specs written from now on carry them", "nodes", paths)
}
