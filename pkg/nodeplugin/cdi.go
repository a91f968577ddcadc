package nodeplugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/machine"
	"github.com/accel-dra/accel-dra/pkg/cdi"
	ascendcdi "github.com/accel-dra/accel-dra/pkg/cdi/ascend"
	nvidiacdi "github.com/accel-dra/accel-dra/pkg/cdi/nvidia"
	"github.com/accel-dra/accel-dra/pkg/devchar"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/driver"
)

// driverSource computes the node-common CDI edits of the node's driver (its libraries,
// binaries, hooks) and tells cheaply whether the driver changed since they were computed.
// The edits are computed at start-up and again only when the driver changes, so that prepare
// only copies them into a claim's spec.
type driverSource struct {
	kind device.Kind
	// root is where this process sees the driver's root, hostRoot where the container
	// runtime sees it ("" = the same). An empty root means no driver files at all.
	root, hostRoot string
	nvidia         nvidiacdi.Config // without NVML, which openNVML gives
	ascend         ascendcdi.Config
	// openNVML opens a new GPU backend and initialises its NVML library for the GPU edits,
	// which need the driver's version, and returns it with the function that shuts it down.
	// It is opened anew for each recomputation, because NVML reports the version of the
	// library it loaded, and after an upgrade that is the new one; and it is not kept between
	// them (a mock backend's machine is large).
	openNVML func(ctx context.Context) (nvml.Interface, func(), error)
	// first is the backend the plugin enumerated with, for the computation at start-up; nil
	// afterwards.
	first device.Backend
	// process names this process for nvml.BoundLibrary: "", or the GPU mock's machine's
	// (nvmlmock.Process), whose processes are not processes.
	process string
	// mockMachine is where the GPU mock keeps its description of the machine, which
	// containers get as well (at /machine.Path), for the mock's nvidia-smi; "" without the
	// mock. On a real node the tools ask the driver through /dev/nvidiactl, which the specs
	// give containers. It is written with the edits, from the NVML they are computed with, so
	// that it says the version of the driver they mount.
	mockMachine string
}

// newDriverSource resolves where the node's driver is. The mock backends generate a fake
// driver root in the mock directory first, once, unless the GPU mock uses one installed by
// someone else (--mock-driver-root=use), and the same generators as on a real node run over
// it, so every test and the e2e exercise the code path of a real node. be is the backend
// already open for enumeration; the first computation uses its NVML.
func newDriverSource(ctx context.Context, o *Options, be device.Backend, kind device.Kind) (*driverSource, error) {
	s := &driverSource{kind: kind}
	switch kind {
	case device.KindGPU:
		s.nvidia = nvidiacdi.Config{DriverRoot: o.NVIDIADriverRoot, HostDriverRoot: o.NVIDIAHostDriverRoot, HookPath: o.NVIDIACDIHookPath}
		if o.Backend == backend.Mock {
			s.process = nvmlmock.Process(o.MockDir)
			// The driver's description of the machine is the machine's, not the root's: one
			// installed by someone else serves any mock node, and the plugin sees it read-only.
			s.mockMachine = filepath.Join(o.MockDir, "nvidia-machine", filepath.Base(machine.Path))
		}
		if o.Backend == backend.Mock && o.MockDriverRoot != MockDriverRootUse {
			lib, err := library(be)
			if err != nil {
				return nil, err
			}
			s.nvidia.DriverRoot, s.nvidia.HostDriverRoot = nvmlmock.GeneratedDriverRoot(o.MockDir), ""
			var opts []nvmlmock.DriverRootOption
			tools, err := mockTools(o)
			if err != nil {
				return nil, err
			}
			if tools != "" {
				opts = append(opts, nvmlmock.WithTools(tools))
			} else {
				klog.FromContext(ctx).Info("No GPU mock tools beside the plugin: the mock driver root's nvidia-smi and other binaries are scripts that only print their name", "name", mockToolsName)
			}
			if err := nvmlmock.WriteDriverRoot(s.nvidia.DriverRoot, lib, opts...); err != nil {
				return nil, err
			}
			s.mockMachine = filepath.Join(s.nvidia.DriverRoot, machine.Path)
		}
		if s.nvidia.DriverRoot != "" && s.nvidia.HookPath == "" {
			hook, err := installHook(o)
			if err != nil {
				return nil, err
			}
			klog.FromContext(ctx).V(2).Info("Installed the NVIDIA CDI hook the specs run", "path", hook)
			s.nvidia.HookPath = hook
		}
		s.root, s.hostRoot, s.first = s.nvidia.DriverRoot, s.nvidia.HostDriverRoot, be
		// NVML by the full path of the root's library, looked up anew for each backend: an
		// upgrade replaces the versioned file.
		opts := backend.Options{Name: o.Backend, MockProfile: o.MockProfile, NodeName: o.NodeName, SysRoot: o.SysfsRoot, DevRoot: o.DevRoot, MockDir: o.MockDir,
			NVIDIADriverRoot: s.nvidia.DriverRoot, NVIDIAHostDriverRoot: s.nvidia.HostDriverRoot}
		s.openNVML = func(ctx context.Context) (nvml.Interface, func(), error) {
			b, err := backend.New(ctx, opts)
			if err != nil {
				return nil, nil, err
			}
			lib, err := library(b)
			if err != nil {
				return nil, nil, err
			}
			if ret := lib.Init(); ret != nvml.SUCCESS {
				return nil, nil, fmt.Errorf("nvml Init: %w", ret)
			}
			return lib, func() { _ = lib.Shutdown() }, nil
		}
	case device.KindNPU:
		s.ascend = ascendcdi.Config{DriverRoot: o.AscendDriverRoot, HostDriverRoot: o.AscendHostDriverRoot, ExtraPaths: o.AscendDriverPaths}
		if o.Backend == backend.NPUMock {
			profile := o.MockProfile
			if profile == "" {
				profile = backend.DefaultNPUMockProfile
			}
			root, err := npumock.WriteDriverRoot(o.MockDir, profile)
			if err != nil {
				return nil, err
			}
			s.ascend.DriverRoot, s.ascend.HostDriverRoot = root, ""
		}
		s.root, s.hostRoot = s.ascend.DriverRoot, s.ascend.HostDriverRoot
	default:
		return nil, fmt.Errorf("no CDI edits for device kind %q", kind)
	}
	if s.root == "" {
		klog.FromContext(ctx).Info("No driver root: containers get device nodes only and must get the driver another way", "kind", kind)
	}
	return s, nil
}

// mockToolsName is the GPU mock's tools binary, which the plugin image ships beside the plugin.
const mockToolsName = "accel-dra-mock-nvidia"

// mockTools returns the GPU mock's tools for the mock driver root: --mock-tools-source, which
// must exist, or the binary beside the plugin's executable, or "" where there is none (unit tests
// that do not build it).
func mockTools(o *Options) (string, error) {
	if o.MockToolsSource != "" {
		if _, err := os.Stat(o.MockToolsSource); err != nil {
			return "", fmt.Errorf("--mock-tools-source: %w", err)
		}
		return o.MockToolsSource, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the %s the plugin ships: %w", mockToolsName, err)
	}
	p := filepath.Join(filepath.Dir(exe), mockToolsName)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("finding the %s the plugin ships: %w", mockToolsName, err)
	}
	return p, nil
}

// installHook installs the nvidia-cdi-hook the plugin ships under its data directory, which the
// container runtime on the host sees at the same path (docs/cdi.md).
func installHook(o *Options) (string, error) {
	src := o.NVIDIACDIHookSource
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding the %s the plugin ships: %w", nvidiacdi.HookName, err)
		}
		src = filepath.Join(filepath.Dir(exe), nvidiacdi.HookName)
	}
	hook, err := nvidiacdi.InstallHook(src, filepath.Join(o.PluginDataDir, nvidiacdi.HookName))
	if err != nil {
		return "", fmt.Errorf("%w (or set --nvidia-cdi-hook-path to a hook the node has)", err)
	}
	return hook, nil
}

func library(be device.Backend) (nvml.Interface, error) {
	lib, ok := be.(interface{ Library() nvml.Interface })
	if !ok {
		return nil, fmt.Errorf("GPU backend %T does not expose its NVML library", be)
	}
	return lib.Library(), nil
}

// edits computes the node-common edits; nil without a driver root. The first call uses the
// backend the plugin enumerated with (before it is closed), later ones a new one.
func (s *driverSource) edits(ctx context.Context) (*specs.ContainerEdits, error) {
	if s.root == "" {
		return nil, nil
	}
	switch s.kind {
	case device.KindGPU:
		var lib nvml.Interface
		if s.first != nil {
			var err error
			if lib, err = library(s.first); err != nil {
				return nil, err
			}
			s.first = nil
		} else {
			var closeLib func()
			var err error
			if lib, closeLib, err = s.openNVML(ctx); err != nil {
				return nil, fmt.Errorf("NVML for the driver's version: %w", err)
			}
			defer closeLib()
		}
		cfg := s.nvidia
		cfg.NVML = lib
		edits, err := nvidiacdi.CommonEdits(ctx, cfg)
		if err != nil || s.mockMachine == "" {
			return edits, err
		}
		if err := nvmlmock.WriteMachine(s.mockMachine, lib); err != nil {
			return nil, err
		}
		edits.Mounts = append(edits.Mounts, &specs.Mount{
			HostPath:      s.mockMachine,
			ContainerPath: "/" + machine.Path,
			Options:       []string{"ro", "nosuid", "nodev", "rbind", "rprivate"},
		})
		return edits, nil
	default:
		return ascendcdi.CommonEdits(ctx, s.ascend)
	}
}

// libraryReplaced returns the NVML library this process calls and the one the driver root has
// now, and whether they differ: go-nvml binds NVML's functions to the first library a process
// loads, for the life of the process (nvml.ErrLibraryBound), so NVML opened anew in this
// process would answer with the old driver's code (its version, and a refusal by a reloaded
// module of the new one); only a new process follows the driver then. False while the process
// has not called NVML from the root, or the root has no library (an upgrade in progress).
func (s *driverSource) libraryReplaced() (bound, found string, replaced bool) {
	if s.kind != device.KindGPU || s.root == "" {
		return "", "", false
	}
	if bound = nvmlbackend.BoundLibrary(s.process); bound == "" {
		return "", "", false
	}
	found, err := nvmlbackend.FindLibrary(s.root)
	if err != nil {
		return bound, "", false
	}
	return bound, found, found != bound
}

// LibraryReplacedError says that the driver's NVML library is not the one this process calls
// any more, and so that the plugin must start again in a new process to follow the driver.
type LibraryReplacedError struct{ Bound, Found string }

func (e *LibraryReplacedError) Error() string {
	return fmt.Sprintf("the driver's NVML library is now %s, and this process calls %s, which go-nvml binds for the life of the process", e.Found, e.Bound)
}

// fingerprint sums up the state of the driver's files that edits mounts, and of the directories
// holding them: a driver upgrade replaces the versioned files (another inode, size or mtime, or
// gone) and adds the new version's files to those directories (another mtime). It costs one
// stat(2) per path, a few dozen, so it can be polled.
func (s *driverSource) fingerprint(edits *specs.ContainerEdits) string {
	if edits == nil {
		return ""
	}
	paths := map[string]bool{}
	for _, m := range edits.Mounts {
		p := s.pluginPath(m.HostPath)
		paths[p] = true
		paths[filepath.Dir(p)] = true
	}
	h := sha256.New()
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range paths {
			if !yield(p) {
				return
			}
		}
	}) {
		fmt.Fprintf(h, "%s\x00", p)
		fi, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(h, "missing\n")
			continue
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(h, "%d %d %d %v\n", ino, fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// pluginPath is where this process sees a path the edits give as the runtime sees it.
func (s *driverSource) pluginPath(hostPath string) string {
	if s.hostRoot == "" || s.hostRoot == s.root {
		return hostPath
	}
	hostRoot := filepath.Clean(s.hostRoot)
	if rest, ok := strings.CutPrefix(hostPath, hostRoot); ok && (rest == "" || strings.HasPrefix(rest, "/") || hostRoot == "/") {
		return filepath.Join(s.root, rest)
	}
	return hostPath
}

// EditsSink is what the driver watcher updates: the plugin's driver (driver.Driver).
type EditsSink interface {
	SetCommonEdits(ctx context.Context, edits *specs.ContainerEdits) (rewritten int, err error)
}

// driverWatch notices a change of the driver and has the edits recomputed and put into every
// prepared claim's spec. It also notices a change of the control nodes (a module loaded after
// start-up, nvidia-uvm being the usual one) and has every prepared claim's spec rewritten with
// them, so that a container started again (one whose CUDA failed for want of nvidia-uvm is)
// gets them.
type driverWatch struct {
	src     *driverSource
	sink    EditsSink
	current *specs.ContainerEdits
	print   string
	// control looks the control nodes up (device.Inventory.ResolveControlNodes; nil: never
	// again); written are those the specs were last rewritten with, nil before the first check,
	// which therefore rewrites the specs once: specs restored from before a restart were
	// written with the nodes of then.
	control func() ([]device.Node, error)
	written []device.Node
	// changed, if set, is called for each change of the driver handed to the sink (a metric).
	changed func()
	// replaced, if set, is called, and the watch ends, when the driver's NVML library is
	// another than the one this process calls (LibraryReplacedError): the plugin starts again
	// in a new process, which loads it. Without it, the watch keeps trying.
	replaced func(context.Context, *LibraryReplacedError)
}

func newDriverWatch(src *driverSource, sink EditsSink, current *specs.ContainerEdits, control func() ([]device.Node, error)) *driverWatch {
	return &driverWatch{src: src, sink: sink, current: current, print: src.fingerprint(current), control: control}
}

// run polls every interval until ctx is done. Polling rather than inotify: the driver root is
// often a mount that an upgrade replaces as a whole (the GPU operator's driver container),
// which no watch on the old tree reports, and a few dozen stat calls every interval cost less
// than watching every directory of the driver.
func (w *driverWatch) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := w.check(ctx); err != nil {
				if replaced := (*LibraryReplacedError)(nil); errors.As(err, &replaced) && w.replaced != nil {
					w.replaced(ctx, replaced)
					return
				}
				klog.FromContext(ctx).Error(err, "The driver changed, but its CDI edits could not be computed; keeping the previous ones and trying again")
			}
			if err := w.checkControl(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "The control device nodes changed, but not every prepared claim's CDI spec could be rewritten; trying again")
			}
		}
	}
}

// check recomputes the edits if the driver's files changed, and hands them to the sink if they
// differ. It reports whether the sink got new edits. On an error the fingerprint is kept, so
// the next check tries again (an upgrade in progress may have left the driver half-installed,
// or a spec could not be rewritten).
func (w *driverWatch) check(ctx context.Context) (bool, error) {
	if w.src.root == "" || w.src.fingerprint(w.current) == w.print {
		return false, nil
	}
	if bound, found, replaced := w.src.libraryReplaced(); replaced {
		return false, &LibraryReplacedError{Bound: bound, Found: found}
	}
	edits, err := w.src.edits(ctx)
	if err != nil {
		return false, err
	}
	print := w.src.fingerprint(edits)
	old, _ := json.Marshal(w.current)
	cur, _ := json.Marshal(edits)
	if string(old) == string(cur) {
		w.print = print
		return false, nil
	}
	n, err := w.sink.SetCommonEdits(ctx, edits)
	if err != nil {
		// Current and fingerprint stay as they were, so the next check hands the edits over
		// again and the specs that failed are rewritten then.
		return true, fmt.Errorf("putting the new driver's CDI edits into prepared claims' specs: %w", err)
	}
	w.current, w.print = edits, print
	if w.changed != nil {
		w.changed()
	}
	klog.FromContext(ctx).Info("The driver changed: CDI edits recomputed", "kind", w.src.kind, "mounts", len(edits.Mounts), "specsRewritten", n)
	return true, nil
}

// checkControl looks the control nodes up and, if they differ from those the specs were last
// written with, has every prepared claim's spec rewritten (with the current edits: only the
// nodes change). On an error the nodes are not recorded, so the next check tries again.
func (w *driverWatch) checkControl(ctx context.Context) error {
	if w.control == nil {
		return nil
	}
	nodes, err := w.control()
	if err != nil {
		return err
	}
	if w.written != nil && slices.Equal(nodes, w.written) {
		return nil
	}
	n, err := w.sink.SetCommonEdits(ctx, w.current)
	if err != nil {
		return fmt.Errorf("rewriting prepared claims' CDI specs with the control nodes: %w", err)
	}
	if w.written != nil || n > 0 {
		klog.FromContext(ctx).Info("CDI specs of prepared claims rewritten with the control device nodes", "kind", w.src.kind, "specsRewritten", n)
	}
	w.written = nodes
	return nil
}

// DevCharOwnDir is where, under the plugin data directory, the plugin makes the nodes that
// /dev/char links name for devices the host has nowhere under /dev (devchar.Linker.OwnDir).
const DevCharOwnDir = "dev-char"

// ReasonDevCharLink is the reason of the Node warning when a /dev/char link cannot be made.
const ReasonDevCharLink = "DevCharLinkFailed"

// cdiWriter writes the claims' specs, linking their nodes under the host's /dev/char first
// where --dev-char-dir says where that is.
func (o *Options) cdiWriter(ctx context.Context, kind device.Kind, events driver.EventSink) *cdi.Writer {
	w := cdi.New(o.CDIRoot, kind)
	if o.DevCharDir == "" {
		return w
	}
	logger := klog.FromContext(ctx)
	l := &devchar.Linker{Dir: o.DevCharDir, HostDev: o.DevRoot, OwnDir: filepath.Join(o.PluginDataDir, DevCharOwnDir)}
	return w.WithDevChar(l, func(err error) {
		logger.Error(err, "Cannot link a device node under /dev/char: with the systemd cgroup driver, a systemctl daemon-reload will take the device from the claim's containers")
		if events != nil {
			events.Warning(ReasonDevCharLink, fmt.Sprintf("%s: %v; with the systemd cgroup driver a systemctl daemon-reload takes the device from running containers (docs/troubleshooting.md)", o.DriverName, err))
		}
	})
}
