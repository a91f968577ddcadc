// Package nvidia computes the node-common CDI edits of NVIDIA GPUs with the NVIDIA container
// toolkit's own generator (pkg/nvcdi), so that a container gets exactly what `nvidia-ctk cdi
// generate` would give it: the driver's versioned libraries (found through the driver root's
// library paths and ldcache), nvidia-smi and the other driver binaries, the GSP firmware, the
// persistenced / fabric manager / MPS sockets, and the nvidia-cdi-hook hooks create-symlinks,
// update-ldcache, enable-cuda-compat and disable-device-node-modification, plus
// NVIDIA_VISIBLE_DEVICES=void.
//
// The edits are the same for every GPU and every claim of a node, so the plugin computes them
// once at start-up (a new driver version means a new driver, which means restarting the plugin
// to enumerate again) and every claim's spec embeds them: prepare does no file-system search.
package nvidia

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// DefaultHookPath is where the NVIDIA container toolkit installs nvidia-cdi-hook on a host.
const DefaultHookPath = "/usr/bin/nvidia-cdi-hook"

// Config says where the driver is.
type Config struct {
	// NVML is the NVML library of the node (or a mock); nvcdi asks it for the driver version,
	// which selects the libraries and firmware to mount.
	NVML nvml.Interface
	// DriverRoot is where this process sees the root of the driver installation: "/" for a
	// driver installed on the host when the plugin runs on the host, the mount point of the
	// host's root (or of the GPU operator's driver container) when it runs in a container.
	DriverRoot string
	// HostDriverRoot is the same tree as the container runtime sees it, which is what the
	// spec's host paths must name. Empty means DriverRoot.
	HostDriverRoot string
	// HookPath is nvidia-cdi-hook as the runtime (on the host) runs it; DefaultHookPath if empty.
	HookPath string
}

// CommonEdits returns the node-common edits of the driver c describes, with host paths. Device
// nodes are left out: the device backend already knows the control nodes with their numbers,
// and the per-GPU nodes belong to each GPU's CDI device.
func CommonEdits(ctx context.Context, c Config) (*specs.ContainerEdits, error) {
	if c.NVML == nil {
		return nil, errors.New("NVIDIA CDI edits: no NVML library")
	}
	if c.DriverRoot == "" {
		return nil, errors.New("NVIDIA CDI edits: no driver root")
	}
	root := filepath.Clean(c.DriverRoot)
	hostRoot := root
	if c.HostDriverRoot != "" {
		hostRoot = filepath.Clean(c.HostDriverRoot)
	}
	hook := c.HookPath
	if hook == "" {
		hook = DefaultHookPath
	}
	lib, err := nvcdi.New(
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithNvmlLib(c.NVML),
		nvcdi.WithDriverRoot(root),
		nvcdi.WithNVIDIACDIHookPath(hook),
		nvcdi.WithLogger(logger{klog.FromContext(ctx).WithName("nvcdi")}),
		// Without it the generator dlopens the driver's libnvidia-sandboxutils into this
		// process (and tries the library path when the root has none) for per-device answers
		// that the common edits do not use: device nodes come from the backend. NVIDIA's DRA
		// driver passes the same flag.
		nvcdi.WithFeatureFlags(nvcdi.FeatureDisableNvsandboxUtils),
	)
	if err != nil {
		return nil, fmt.Errorf("NVIDIA CDI edits: %w", err)
	}
	common, err := lib.GetCommonEdits()
	if err != nil {
		return nil, fmt.Errorf("NVIDIA CDI edits from driver root %s: %w", root, err)
	}
	if common == nil || common.ContainerEdits == nil {
		return nil, fmt.Errorf("NVIDIA CDI edits from driver root %s: nothing found", root)
	}
	edits := common.ContainerEdits
	edits.DeviceNodes = nil
	if root != hostRoot {
		// The toolkit's own transformer, as the toolkit does when it runs in a container.
		spec := &specs.Spec{ContainerEdits: *edits}
		t := transformroot.NewDriverTransformer(transformroot.WithDriverRoot(root), transformroot.WithTargetDriverRoot(hostRoot))
		if err := t.Transform(spec); err != nil {
			return nil, fmt.Errorf("NVIDIA CDI edits: rewriting %s to the host's %s: %w", root, hostRoot, err)
		}
		edits = &spec.ContainerEdits
	}
	if len(edits.Mounts) == 0 {
		// Without libraries a CUDA container cannot start; better to fail at start-up than to
		// hand out GPUs that cannot be used.
		return nil, fmt.Errorf("NVIDIA CDI edits: no driver libraries found under driver root %s (is --nvidia-driver-root right?)", root)
	}
	return edits, nil
}

// logger adapts the toolkit's printf-style logger to the plugin's structured one. The toolkit
// warns about every optional file it does not find (graphics configs, IMEX binaries), which is
// normal on a compute node, so its warnings are logged at V(2).
type logger struct{ l logr.Logger }

func (g logger) Debugf(f string, a ...any) { g.l.V(4).Info(fmt.Sprintf(f, a...)) }
func (g logger) Tracef(f string, a ...any) { g.l.V(6).Info(fmt.Sprintf(f, a...)) }
func (g logger) Infof(f string, a ...any)  { g.l.V(2).Info(fmt.Sprintf(f, a...)) }
func (g logger) Warningf(f string, a ...any) {
	g.l.V(2).Info(fmt.Sprintf(f, a...), "severity", "warning")
}
func (g logger) Errorf(f string, a ...any) { g.l.Error(nil, fmt.Sprintf(f, a...)) }
