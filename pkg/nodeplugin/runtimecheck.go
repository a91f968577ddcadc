package nodeplugin

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	nvconfig "github.com/NVIDIA/nvidia-container-toolkit/api/config/v1"
	nvtoml "github.com/NVIDIA/nvidia-container-toolkit/pkg/config/toml"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/cdicanary"
	"github.com/accel-dra/accel-dra/pkg/driver"
)

// ReasonNVIDIARuntimeExposesGPUs is the Warning on the Node when containerd's default runtime is
// NVIDIA's and the toolkit accepts NVIDIA_VISIBLE_DEVICES from unprivileged containers.
const ReasonNVIDIARuntimeExposesGPUs = "NVIDIARuntimeExposesGPUs"

// The GPU operator's toolkit, and `nvidia-ctk runtime configure --set-as-default`, make
// `nvidia` containerd's default runtime, and the toolkit's
// accept-nvidia-visible-devices-envvar-when-unprivileged defaults to true
// (nvidia-container-toolkit api/config/v1). Then every container whose image sets
// NVIDIA_VISIBLE_DEVICES=all (every nvidia/cuda image) gets every GPU of the node, whatever DRA
// allocated: GPUs given to other claims included. The plugin cannot stop that; it says so where
// it can read the configuration.

// containerdConfigs are containerd's top-level configurations under a host root: containerd's
// own, and k3s's and RKE2's, which run their own containerd.
var containerdConfigs = []string{
	"etc/containerd/config.toml",
	"var/lib/rancher/k3s/agent/etc/containerd/config.toml",
	"var/lib/rancher/rke2/agent/etc/containerd/config.toml",
}

// toolkitConfigs are the toolkit's configurations under a host root: a host install's, and the
// GPU operator's toolkit container's (installed under /usr/local/nvidia/toolkit).
var toolkitConfigs = []string{
	"etc/nvidia-container-runtime/config.toml",
	"usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml",
}

// criPlugins are the CRI plugin's names in containerd's configuration, by config version 1, 2
// and 3 (containerd 2.x moved the runtimes to io.containerd.cri.v1.runtime).
var criPlugins = []string{"cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"}

// runtimeExposure reads the container runtime's and the toolkit's configuration under root (the
// host's / as this process sees it) and returns why unprivileged containers can get every GPU
// through NVIDIA's runtime, "" if they cannot; checked is false where no containerd
// configuration is there to read.
func runtimeExposure(root string) (why string, checked bool, err error) {
	cfgs, err := containerdConfigFiles(root)
	if err != nil || len(cfgs) == 0 {
		return "", len(cfgs) > 0, err
	}
	checked = true
	value, source := setting(cfgs, criPlugins, "containerd", "default_runtime_name")
	runtime, _ := value.(string)
	if !strings.HasPrefix(runtime, "nvidia") {
		return "", checked, nil
	}
	accept, toolkit := true, "none: the toolkit's default"
	for _, f := range toolkitConfigs {
		p := filepath.Join(root, f)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		t, err := nvconfig.New(nvconfig.WithConfigFile(p), nvconfig.WithRequired(true))
		if err != nil {
			return "", checked, fmt.Errorf("reading the NVIDIA container toolkit's configuration /%s: %w", f, err)
		}
		cfg, err := t.Config()
		if err != nil {
			return "", checked, fmt.Errorf("reading the NVIDIA container toolkit's configuration /%s: %w", f, err)
		}
		accept, toolkit = cfg.AcceptEnvvarUnprivileged, "/"+f
		break
	}
	if !accept {
		return "", checked, nil
	}
	return fmt.Sprintf("containerd's default runtime is %q (%s) and the NVIDIA container toolkit accepts NVIDIA_VISIBLE_DEVICES from unprivileged containers (configuration %s), "+
		"so any container whose image sets NVIDIA_VISIBLE_DEVICES=all gets every GPU of the node, GPUs that DRA gave to other claims included: "+
		"set accept-nvidia-visible-devices-envvar-when-unprivileged = false in the toolkit's configuration (the GPU operator: toolkit.env ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED=false), "+
		"or make runc the default runtime and nvidia a RuntimeClass (docs/install.md)", runtime, source, toolkit), checked, nil
}

// containerdConfig is one file of containerd's configuration.
type containerdConfig struct {
	path string // as the host sees it
	tree *nvtoml.Tree
}

// setting returns the value that the last of cfgs to set plugins.<plugin>.<key...>, for any of
// plugins, gives it (containerd merges later files over earlier ones), and that file's path;
// nil and "" where none sets it.
func setting(cfgs []containerdConfig, plugins []string, key ...string) (value any, source string) {
	for _, c := range cfgs {
		for _, p := range plugins {
			if v := c.tree.GetPath(append([]string{"plugins", p}, key...)); v != nil {
				value, source = v, c.path
			}
		}
	}
	return value, source
}

// containerdConfigFiles returns containerd's configuration under root in the order containerd
// merges it: each top-level file (containerdConfigs) that exists, followed by the files its
// imports name (containerd merges imports over the file that imports them, in order).
func containerdConfigFiles(root string) ([]containerdConfig, error) {
	var out []containerdConfig
	for _, top := range containerdConfigs {
		tree, err := loadTOML(root, top)
		if err != nil {
			return nil, err
		}
		if tree == nil {
			continue
		}
		out = append(out, containerdConfig{path: "/" + top, tree: tree})
		imports, _ := tree.Get("imports").([]any)
		for _, imp := range imports {
			pattern, _ := imp.(string)
			if !path.IsAbs(pattern) {
				pattern = path.Join(path.Dir("/"+top), pattern)
			}
			matches, _ := filepath.Glob(filepath.Join(root, pattern))
			for _, m := range matches {
				rel, _ := filepath.Rel(root, m)
				t, err := loadTOML(root, filepath.ToSlash(rel))
				if err != nil {
					return nil, err
				}
				if t != nil {
					out = append(out, containerdConfig{path: "/" + filepath.ToSlash(rel), tree: t})
				}
			}
		}
	}
	return out, nil
}

// loadTOML loads root/rel with the toolkit's TOML loader; nil where the file does not exist.
func loadTOML(root, rel string) (*nvtoml.Tree, error) {
	p := filepath.Join(root, rel)
	if _, err := os.Stat(p); err != nil {
		return nil, nil
	}
	t, err := nvtoml.FromFile(p).Load()
	if err != nil {
		return nil, fmt.Errorf("reading /%s: %w", rel, err)
	}
	return t, nil
}

// checkRuntimeExposure warns on the Node when runtimeExposure finds the exposure under root, and
// logs what it could not check. It never stops the plugin: the configuration is the node's.
func checkRuntimeExposure(ctx context.Context, root string, events driver.EventSink) {
	logger := klog.FromContext(ctx)
	if root == "" {
		logger.V(2).Info("The host's container runtime configuration is not visible (no host root): not checking whether NVIDIA's runtime hands out GPUs by NVIDIA_VISIBLE_DEVICES")
		return
	}
	why, checked, err := runtimeExposure(root)
	switch {
	case err != nil:
		logger.Error(err, "Cannot check whether NVIDIA's runtime hands out GPUs by NVIDIA_VISIBLE_DEVICES")
	case !checked:
		logger.V(2).Info("No containerd configuration under the host root: not checking whether NVIDIA's runtime hands out GPUs by NVIDIA_VISIBLE_DEVICES", "root", root)
	case why != "":
		logger.Info("Warning: "+why, "reason", ReasonNVIDIARuntimeExposesGPUs)
		if events != nil {
			events.Warning(ReasonNVIDIARuntimeExposesGPUs, why)
		}
	}
}

// ReasonRuntimeIgnoresCDI is the Warning on the Node when its containerd drops CDI devices.
const ReasonRuntimeIgnoresCDI = "RuntimeIgnoresCDI"

// runtimeIgnoresCDI says why the node's runtime drops the CDI devices the kubelet asks for,
// without an error: containerd 1.x injects them only with enable_cdi = true in its CRI
// plugin's section, and otherwise starts the container without them (no GPU, no driver files);
// containerd 2.x has CDI on by default. runtimeVersion is the Node's
// status.nodeInfo.containerRuntimeVersion. verified is false where the configuration under
// root (the host's /; "" when not visible) could not be read: then why says what to check.
func runtimeIgnoresCDI(root, runtimeVersion string) (why string, verified bool, err error) {
	v, ok := strings.CutPrefix(runtimeVersion, "containerd://")
	// The kubelet reports a version it parses without the v of containerd's own builds
	// (v1.7.35 becomes 1.7.35: kuberuntime newRuntimeVersion); one it cannot parse as it is.
	if !ok || !strings.HasPrefix(strings.TrimPrefix(v, "v"), "1.") {
		return "", true, nil
	}
	var cfgs []containerdConfig
	if root != "" {
		if cfgs, err = containerdConfigFiles(root); err != nil {
			return "", false, err
		}
	}
	if len(cfgs) == 0 {
		return fmt.Sprintf("the node runs containerd %s, which starts containers without their CDI devices, and without an error, unless its configuration says enable_cdi = true; the plugin cannot see that configuration: check it on the node (containerd config dump | grep -E 'enable_cdi|cdi_spec_dirs')", v), false, nil
	}
	// containerd 1.x's CRI plugin: config version 1 and 2 names.
	value, source := setting(cfgs, criPlugins[:2], "enable_cdi")
	if source == "" {
		source = cfgs[0].path
	}
	if enabled, _ := value.(bool); enabled {
		return "", true, nil
	}
	return fmt.Sprintf("the node runs containerd %s without enable_cdi = true (%s): it starts the containers of every claim without their devices and the driver's files, and without an error. "+
		`Set enable_cdi = true and cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"] in its [plugins."io.containerd.grpc.v1.cri"] section and restart containerd (docs/cdi.md)`, v, source), true, nil
}

// checkRuntimeCDI warns on the Node where runtimeIgnoresCDI finds the runtime dropping CDI
// devices, and logs what it could not verify. It never stops the plugin.
func checkRuntimeCDI(ctx context.Context, root, runtimeVersion string, events driver.EventSink) {
	logger := klog.FromContext(ctx)
	why, verified, err := runtimeIgnoresCDI(root, runtimeVersion)
	switch {
	case err != nil:
		logger.Error(err, "Cannot check whether the container runtime injects CDI devices", "runtime", runtimeVersion)
	case why == "":
	case !verified:
		logger.Info("Warning: "+why, "runtime", runtimeVersion)
	default:
		logger.Info("Warning: "+why, "reason", ReasonRuntimeIgnoresCDI)
		if events != nil {
			events.Warning(ReasonRuntimeIgnoresCDI, why)
		}
	}
}

// Runtime CDI check modes (--runtime-cdi-check), for a runtime the canary shows ignoring CDI.
const (
	// RuntimeCDIRefuse: the Warning event, and the plugin publishes no devices (it still
	// registers, so that claims prepared earlier can be unprepared): a device that no
	// container can get is worse than none, since the scheduler sends pods to it.
	RuntimeCDIRefuse = "refuse"
	// RuntimeCDIWarn: the Warning event; the plugin publishes its devices.
	RuntimeCDIWarn = "warn"
)

func checkRuntimeCDIMode(mode string) error {
	if mode != RuntimeCDIRefuse && mode != RuntimeCDIWarn {
		return fmt.Errorf("--runtime-cdi-check=%q: want %s or %s", mode, RuntimeCDIRefuse, RuntimeCDIWarn)
	}
	return nil
}

// runtimeCanaryTimeout bounds the canary: a few CRI calls on the node, a second or two.
const runtimeCanaryTimeout = 30 * time.Second

// canaryRuntime connects to the CRI runtime service at endpoint; a variable for tests.
var canaryRuntime = cdicanary.Dial

// checkRuntimeCanary asks the runtime at --runtime-endpoint, with the CDI canary, whether it
// applies CDI devices. answered is false where there is no endpoint or the canary could not
// tell (logged): then runtimeIgnoresCDI's inference from the version stands in. withhold says
// that the plugin must publish no devices: the runtime ignores CDI and the mode is refuse.
func checkRuntimeCanary(ctx context.Context, o *Options, events driver.EventSink) (answered, withhold bool) {
	logger := klog.FromContext(ctx)
	if o.RuntimeEndpoint == "" {
		logger.V(2).Info("No --runtime-endpoint: not asking the container runtime whether it applies CDI devices")
		return false, false
	}
	ctx, cancel := context.WithTimeout(ctx, runtimeCanaryTimeout)
	defer cancel()
	rt, closeRuntime, err := canaryRuntime(o.RuntimeEndpoint)
	var applied bool
	if err == nil {
		defer func() { _ = closeRuntime() }()
		applied, err = cdicanary.Check(ctx, rt, cdicanary.Options{CDIDir: o.CDIRoot, Image: o.RuntimeCanaryImage, Namespace: o.MPSDaemonNamespace})
	}
	switch {
	case err != nil:
		logger.Error(err, "The CDI canary could not tell whether the container runtime applies CDI devices", "endpoint", o.RuntimeEndpoint)
		return false, false
	case applied:
		logger.Info("The container runtime applies CDI devices (the CDI canary's edit is in its container's spec)", "endpoint", o.RuntimeEndpoint)
		return true, false
	}
	withhold = o.RuntimeCDICheck == RuntimeCDIRefuse
	then := "the plugin publishes its devices anyway (--runtime-cdi-check=warn)"
	if withhold {
		then = "the plugin publishes no devices until it restarts on a runtime that applies CDI (--runtime-cdi-check=refuse)"
	}
	why := fmt.Sprintf("the container runtime (%s) ignores CDI: it created the CDI canary's container without the canary device's edit, and without an error, as it would start every claim's container without its devices and the driver's files; %s. "+
		`containerd 1.7: set enable_cdi = true and cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"] in its [plugins."io.containerd.grpc.v1.cri"] section and restart containerd, then the plugin's pod (docs/troubleshooting.md)`, o.RuntimeEndpoint, then)
	logger.Info("Warning: "+why, "reason", ReasonRuntimeIgnoresCDI)
	if events != nil {
		events.Warning(ReasonRuntimeIgnoresCDI, why)
	}
	return true, withhold
}
