// Package nodeplugin wires the node plugin together: flags, backend, checkpoint, CDI, the
// kubelet plugin helper and the health/metrics endpoint. package main only calls it.
package nodeplugin

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/accel-dra/accel-dra/pkg/backend"
	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/bootid"
	nvidiacdi "github.com/accel-dra/accel-dra/pkg/cdi/nvidia"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/kubeclient"
	"github.com/accel-dra/accel-dra/pkg/mig"
)

// Default driver names.
const (
	GPUDriverName = "gpu.accel-dra.io"
	NPUDriverName = "npu.accel-dra.io"
)

// Options are the node plugin's settings, one flag each.
type Options struct {
	NodeName    string
	DriverName  string
	Backend     string
	MockProfile string
	MockDir     string
	SysfsRoot   string
	DevRoot     string
	// DevCharDir is where this process sees the host's /dev/char, writable; empty makes no
	// /dev/char links (package devchar says why they matter).
	DevCharDir    string
	CDIRoot       string
	PluginDataDir string
	RegistrarDir  string
	CheckpointDir string
	BootIDFile    string
	HTTPAddress   string
	PodUID        string
	Profiling     bool
	// DynamicMIG publishes the GPUs in MIG mode as partitionable devices whose MIG instances
	// are created on prepare (docs/mig.md).
	DynamicMIG bool
	// MIGProfiles are the MIG profiles dynamic MIG publishes (--mig-profiles): mig.AllProfiles
	// or profile names (docs/mig.md).
	MIGProfiles []string
	// NVIDIADriverRoot and AscendDriverRoot are where this process sees the root of the
	// driver's installation; the Host* variants are the same trees as the container runtime
	// sees them (empty: the same path). See docs/cdi.md.
	NVIDIADriverRoot     string
	NVIDIAHostDriverRoot string
	// NVIDIACDIHookPath is the host's nvidia-cdi-hook for the specs' hooks; empty: the hook the
	// plugin ships (NVIDIACDIHookSource) is installed under PluginDataDir and used.
	NVIDIACDIHookPath string
	// NVIDIACDIHookSource is the hook the plugin ships; empty: nvidia-cdi-hook beside the
	// plugin's executable (the image's /usr/bin, make build's bin/).
	NVIDIACDIHookSource string
	// MockDriverRoot says where the GPU mock's driver is: MockDriverRootGenerate (the mock
	// writes it under MockDir) or MockDriverRootUse (the driver root NVIDIADriverRoot names,
	// installed there by someone else, which the mock waits for and watches as the nvml
	// backend does a real driver's).
	MockDriverRoot string
	// MockToolsSource is the GPU mock's tools (cmd/accel-dra-mock-nvidia) that the mock's driver
	// root holds as nvidia-smi and the other driver binaries; empty: accel-dra-mock-nvidia
	// beside the plugin's executable, or, where there is none, scripts that only print their
	// name.
	MockToolsSource string
	// NVIDIAProcRoot is where this process sees the host's /proc, for the MIG devices'
	// /dev/nvidia-caps nodes (docs/mig.md).
	NVIDIAProcRoot       string
	AscendDriverRoot     string
	AscendHostDriverRoot string
	AscendDriverPaths    []string
	// DriverCheckInterval is how often the driver's files are checked for a change (an
	// upgrade), which recomputes the CDI edits and rewrites prepared claims' specs; 0 never.
	DriverCheckInterval time.Duration
	Kube                kubeclient.Options
	Logging             *logsapi.LoggingConfiguration

	// DeviceHealth turns device health on (docs/health.md): the kubelet's health stream and
	// device taints.
	DeviceHealth bool
	// IgnoredXIDs are the XIDs that do not make a GPU unhealthy.
	IgnoredXIDs []uint
	// DeviceTaintEffects override the taint effect per cause (cause=NoSchedule|NoExecute|None).
	DeviceTaintEffects map[string]string
	// DeviceMetadata mounts each claim's device attributes into its containers (KEP-5304).
	DeviceMetadata bool
	// ConsumableMemory publishes devices for consumable capacity (KEP-5075): several claims
	// share a device, each with the memory it asked for (docs/sharing.md).
	ConsumableMemory bool
	// NVIDIASMIPath is the nvidia-smi that sets GPU time-slices; empty: usr/bin/nvidia-smi
	// under the NVIDIA driver root.
	NVIDIASMIPath string
	// NVIDIAMPSControlPath is the nvidia-cuda-mps-control that runs claims' MPS daemons, run
	// without chroot; empty: /usr/bin/nvidia-cuda-mps-control inside the NVIDIA driver root,
	// run chrooted into it.
	NVIDIAMPSControlPath string
	// MPSDaemons says where MPS control daemons run: MPSDaemonsPod (a pod each, in
	// MPSDaemonNamespace, running MPSDaemonImage) or MPSDaemonsProcess (child processes).
	MPSDaemons                 string
	MPSDaemonNamespace         string
	MPSDaemonImage             string
	MPSDaemonPriorityClassName string
	// MPSDaemonImagePullSecrets are the Secrets the MPS daemon pods pull their image with.
	MPSDaemonImagePullSecrets []string
	// EventsNamespace is where the plugin's events about its Node are stored: default or
	// kube-system (EventsNamespaces).
	EventsNamespace string

	// NVIDIACompat is the NVIDIA compatibility mode (compat.go, docs/migrate-from-nvidia.md).
	NVIDIACompat bool

	// DroppedFields says what the plugin does when kube-apiserver drops fields of its
	// ResourceSlices because a feature gate is off: DroppedFieldsRefuse or DroppedFieldsWarn
	// (gates.go, docs/versions.md).
	DroppedFields string

	// RuntimeEndpoint is the node's CRI socket as this process sees it, for the CDI canary
	// (runtimecheck.go); empty: no canary. RuntimeCanaryImage is the image the canary's
	// container is created from (the plugin's own), RuntimeCDICheck what the plugin does where
	// the canary shows the runtime ignoring CDI: RuntimeCDIRefuse or RuntimeCDIWarn.
	RuntimeEndpoint    string
	RuntimeCanaryImage string
	RuntimeCDICheck    string
}

// GPU mock driver roots (--mock-driver-root).
const (
	MockDriverRootGenerate = "generate"
	MockDriverRootUse      = "use"
)

// NewOptions returns the defaults, which fit a DaemonSet with the kubelet's standard paths.
func NewOptions() *Options {
	return &Options{
		NodeName:     os.Getenv("NODE_NAME"),
		Backend:      "nvml",
		SysfsRoot:    "/sys",
		DevRoot:      "/dev",
		CDIRoot:      "/var/run/cdi",
		RegistrarDir: "/var/lib/kubelet/plugins_registry",
		BootIDFile:   bootid.DefaultPath,
		HTTPAddress:  ":8080",
		PodUID:       os.Getenv("POD_UID"),
		// A plugin run by hand or by the e2e harness is a host process; the chart sets pod.
		MPSDaemons:         MPSDaemonsProcess,
		MPSDaemonNamespace: os.Getenv("POD_NAMESPACE"),
		EventsNamespace:    metav1.NamespaceDefault,
		NVIDIADriverRoot:   "/",
		MockDriverRoot:     MockDriverRootGenerate,
		NVIDIAProcRoot:     nvmlbackend.DefaultProcRoot,
		AscendDriverRoot:   "/",
		// A few dozen stat calls: cheap enough to notice an upgrade within a pod's start.
		DriverCheckInterval: 30 * time.Second,
		DeviceHealth:        true,
		MIGProfiles:         []string{mig.AllProfiles},
		IgnoredXIDs:         defaultIgnoredXIDs(),
		Kube:                kubeclient.DefaultOptions(),
		Logging:             logsapi.NewLoggingConfiguration(),
		DroppedFields:       DroppedFieldsRefuse,
		RuntimeCDICheck:     RuntimeCDIRefuse,
	}
}

// NewFlagSet returns the binary's flag set bound to o. The Helm chart test parses the chart's
// container args with this same flag set, so a renamed flag fails there.
func (o *Options) NewFlagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("accel-dra-kubelet-plugin", pflag.ContinueOnError)
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of this node (default from $NODE_NAME, set through the downward API).")
	fs.StringVar(&o.DriverName, "driver-name", o.DriverName, "DRA driver name (default gpu.accel-dra.io for GPU backends, npu.accel-dra.io for NPU backends).")
	fs.StringVar(&o.Backend, "backend", o.Backend, fmt.Sprintf("Device backend: one of %v.", backend.Names()))
	fs.StringVar(&o.MockProfile, "mock-profile", o.MockProfile, "Hardware profile of the mock and npu-mock backends (default per backend).")
	fs.StringVar(&o.MockDir, "mock-dir", o.MockDir, "Where the npu-mock backend generates its fake sysfs/devfs (default <plugin-data-dir>/mock).")
	fs.StringVar(&o.SysfsRoot, "sysfs-root", o.SysfsRoot, "Root of sysfs, for PCI topology and NPU discovery.")
	fs.StringVar(&o.DevRoot, "dev-root", o.DevRoot, "Root of the device nodes as this process sees them.")
	fs.StringVar(&o.DevCharDir, "dev-char-dir", o.DevCharDir, "Where this process sees the host's /dev/char, writable: every character device a claim's CDI spec names gets its /dev/char/<major>:<minor> link there before the spec is written, so that with the systemd cgroup driver a systemctl daemon-reload does not take the device from running containers. Empty makes none.")
	fs.StringVar(&o.CDIRoot, "cdi-root", o.CDIRoot, "Directory the container runtime reads CDI specs from.")
	fs.StringVar(&o.PluginDataDir, "plugin-data-dir", o.PluginDataDir, "Directory for the plugin's socket and state (default /var/lib/kubelet/plugins/<driver-name>).")
	fs.StringVar(&o.RegistrarDir, "registrar-dir", o.RegistrarDir, "The kubelet's plugin registration directory.")
	fs.StringVar(&o.CheckpointDir, "checkpoint-dir", o.CheckpointDir, "Directory of the prepared-claims checkpoint (default <plugin-data-dir>/checkpoint).")
	fs.StringVar(&o.BootIDFile, "boot-id-file", o.BootIDFile, "File holding the node's boot ID; a change means a reboot.")
	fs.StringVar(&o.HTTPAddress, "http-address", o.HTTPAddress, "Address of the /healthz, /readyz and /metrics endpoint; empty disables it.")
	fs.StringVar(&o.PodUID, "pod-uid", o.PodUID, "UID of this plugin's pod (default from $POD_UID); enables the kubelet's rolling update of the plugin with surge.")
	fs.StringVar(&o.NVIDIADriverRoot, "nvidia-driver-root", o.NVIDIADriverRoot, "Root of the NVIDIA driver installation as this process sees it (the host's / mounted into the container, or the GPU operator's driver root); its libraries, binaries and firmware go into every GPU container's CDI spec, and the nvml backend waits for its libnvidia-ml.so.1 and loads it by its full path (not by the library path: the root's library directories hold the host's C library too). Empty: GPU containers get device nodes only, and NVML is loaded by its soname. The mock backend generates its own, unless --mock-driver-root=use.")
	fs.StringVar(&o.NVIDIAHostDriverRoot, "nvidia-host-driver-root", o.NVIDIAHostDriverRoot, "The same tree as --nvidia-driver-root as the container runtime on the host sees it (default: the same path).")
	fs.StringVar(&o.NVIDIACDIHookPath, "nvidia-cdi-hook-path", o.NVIDIACDIHookPath, "Path on the host of an NVIDIA container toolkit nvidia-cdi-hook for the CDI specs' hooks to run (e.g. "+nvidiacdi.DefaultHookPath+", or the GPU operator's /usr/local/nvidia/toolkit/nvidia-cdi-hook). Empty: the plugin installs the hook it ships (--nvidia-cdi-hook-source) under --plugin-data-dir and uses that, so that nodes need no toolkit.")
	fs.StringVar(&o.NVIDIACDIHookSource, "nvidia-cdi-hook-source", o.NVIDIACDIHookSource, "The nvidia-cdi-hook the plugin ships and installs when --nvidia-cdi-hook-path is empty (default: nvidia-cdi-hook beside the plugin's executable).")
	fs.StringVar(&o.MockDriverRoot, "mock-driver-root", o.MockDriverRoot, "Where the mock backend's NVIDIA driver is: generate (it writes a driver root of its profile's version under --mock-dir, and the machine's description for the tools in it) or use (the driver root --nvidia-driver-root names, with the mock driver's files installed there by someone else: the plugin waits for its libnvidia-ml.so.1 and watches it as for a real driver, the mock NVML reports the version of that library, libnvidia-ml.so.<version>, and the machine's description goes under --mock-dir). See docs/install.md.")
	fs.StringVar(&o.MockToolsSource, "mock-tools-source", o.MockToolsSource, "The GPU mock's tools (accel-dra-mock-nvidia) that the mock backend's driver root holds as nvidia-smi, nvidia-cuda-mps-control and the other driver binaries (default: accel-dra-mock-nvidia beside the plugin's executable; without it, scripts that only print their name).")
	fs.StringVar(&o.NVIDIAProcRoot, "nvidia-proc-root", o.NVIDIAProcRoot, "Where this process sees the host's /proc: the nvml backend reads devices (the nvidia-caps major) and driver/nvidia/capabilities (each MIG instance's caps node minor and mode) under it, and puts the /dev/nvidia-caps nodes in MIG devices' CDI specs fully specified, for the runtime to create. The container's own /proc serves unless the runtime masks /proc/driver/nvidia; then mount the host's /proc elsewhere. The mock backend has its own.")
	fs.StringVar(&o.AscendDriverRoot, "ascend-driver-root", o.AscendDriverRoot, "Root under which the Ascend driver is installed (/usr/local/Ascend/driver, ...) as this process sees it. Empty: NPU containers get device nodes only. The npu-mock backend generates its own.")
	fs.StringVar(&o.AscendHostDriverRoot, "ascend-host-driver-root", o.AscendHostDriverRoot, "The same tree as --ascend-driver-root as the container runtime on the host sees it (default: the same path).")
	fs.StringSliceVar(&o.AscendDriverPaths, "ascend-extra-driver-paths", o.AscendDriverPaths, "Absolute paths under --ascend-driver-root to mount into NPU containers besides the default list (see docs/cdi.md); missing ones are skipped.")
	fs.BoolVar(&o.DeviceHealth, "device-health", o.DeviceHealth, "Watch device health: report it to the kubelet (pod status) and taint unhealthy devices in the ResourceSlices. Off: the kubelet is told the plugin serves no health.")
	fs.UintSliceVar(&o.IgnoredXIDs, "health-ignored-xids", o.IgnoredXIDs, "NVIDIA XIDs that are application errors and leave the GPU healthy (default NVIDIA's list).")
	fs.StringToStringVar(&o.DeviceTaintEffects, "device-taint-effects", o.DeviceTaintEffects, fmt.Sprintf("Taint effect per health cause, cause=effect with effect NoSchedule, NoExecute or None; causes %v. Default: NoSchedule for every fault, no taint for unknown.", health.Causes))
	fs.BoolVar(&o.DeviceMetadata, "device-metadata", o.DeviceMetadata, "Mount a file with the attributes of a claim's devices (UUID, PCI bus ID, NUMA node...) into its containers, under /var/run/kubernetes.io/dra-device-attributes/ (see docs/health.md).")
	fs.BoolVar(&o.ConsumableMemory, "consumable-memory", o.ConsumableMemory, "Publish each device with allowMultipleAllocations and a memory capacity with a request policy (DRAConsumableCapacity), so that several claims share it, each with the memory it asks for; nothing on the GPU enforces the share without MPS (see docs/sharing.md).")
	fs.StringVar(&o.NVIDIASMIPath, "nvidia-smi-path", o.NVIDIASMIPath, "nvidia-smi used to set GPU time-slices for claims with sharing strategy TimeSlicing (default: usr/bin/nvidia-smi under --nvidia-driver-root, or the mock's driver root).")
	fs.StringVar(&o.NVIDIAMPSControlPath, "nvidia-mps-control-path", o.NVIDIAMPSControlPath, "nvidia-cuda-mps-control that runs the MPS control daemons of claims with sharing strategy MPS, run as it is without chroot: a path on the host with --mps-daemons=pod (the daemon pods mount it), on this process's filesystem with --mps-daemons=process; for a stand-in that needs no driver root. Default: /usr/bin/nvidia-cuda-mps-control inside --nvidia-driver-root, run chrooted into it. Daemons live under <plugin data dir>/mps.")
	fs.StringVar(&o.MPSDaemons, "mps-daemons", o.MPSDaemons, "Where MPS control daemons run: pod (one pod per daemon on this node, in --mps-daemon-namespace, running --mps-daemon-image: daemons outlive the plugin's pod, as the chart installs it) or process (child processes of the plugin, which end with its container: for a plugin that runs as a process on the host). See docs/sharing.md.")
	fs.StringVar(&o.EventsNamespace, "events-namespace", o.EventsNamespace, fmt.Sprintf("Namespace the plugin's events about its Node are stored in, one of %v (the API server takes events about a cluster-scoped object only there); the plugin needs to create and patch events.k8s.io events in it.", EventsNamespaces))
	fs.StringVar(&o.MPSDaemonNamespace, "mps-daemon-namespace", o.MPSDaemonNamespace, "Namespace of the MPS control daemon pods (default $POD_NAMESPACE, the plugin's own through the downward API).")
	fs.StringVar(&o.MPSDaemonImage, "mps-daemon-image", o.MPSDaemonImage, "Image of the MPS control daemon pods: the plugin's own, whose binary runs each daemon.")
	fs.StringVar(&o.MPSDaemonPriorityClassName, "mps-daemon-priority-class-name", o.MPSDaemonPriorityClassName, "Priority class of the MPS control daemon pods.")
	fs.StringSliceVar(&o.MPSDaemonImagePullSecrets, "mps-daemon-image-pull-secrets", o.MPSDaemonImagePullSecrets, "Secrets in --mps-daemon-namespace that the MPS control daemon pods pull --mps-daemon-image with (the chart's imagePullSecrets).")
	fs.DurationVar(&o.DriverCheckInterval, "driver-check-interval", o.DriverCheckInterval, "How often to check the driver's files for a change (an upgrade); a change recomputes the driver's CDI edits and rewrites the CDI specs of prepared claims. 0 disables the check.")
	fs.BoolVar(&o.DynamicMIG, "dynamic-mig", o.DynamicMIG, "Publish the GPUs that are in MIG mode as partitionable devices (one per MIG profile and placement, with shared counters) and create and destroy their MIG instances on prepare and unprepare. The plugin then owns the MIG layout of those GPUs: MIG instances no prepared claim holds are destroyed at start. It never changes a GPU's MIG mode. Off: existing MIG devices are published as they are (static MIG).")
	fs.BoolVar(&o.NVIDIACompat, "nvidia-compat", o.NVIDIACompat, "NVIDIA compatibility mode, for workloads written for NVIDIA's DRA driver (docs/migrate-from-nvidia.md): the driver name defaults to gpu.nvidia.com, opaque configuration of NVIDIA's API (resource.nvidia.com/v1beta1 GpuConfig, MigDeviceConfig) is translated to accel-dra's, devices also carry NVIDIA's attribute names, and health taints use NVIDIA's keys. GPU backends only. Never run it on a node where NVIDIA's driver runs.")
	fs.StringSliceVar(&o.MIGProfiles, "mig-profiles", o.MIGProfiles, "With --dynamic-mig: the MIG profiles published, as NVIDIA names them (1g.10gb,1g.10gb+me,3g.40gb), or all. Each GPU in MIG mode publishes its whole device and the partitions of the listed profiles it offers; every partition costs the scheduler on every node it examines, so list the profiles your claims ask for (see docs/mig.md and docs/scheduling-benchmark.md). A listed profile no GPU of the node offers is logged, not an error, so that one list serves nodes of several GPU models.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go pprof profiles under /debug/pprof/ on --http-address.")
	fs.StringVar(&o.DroppedFields, "dropped-fields", o.DroppedFields, "What to do when kube-apiserver drops fields of the published ResourceSlices because a feature gate is off (device taints, shared counters, consumable capacity, ...): refuse (a Warning event on the Node naming the gate, 503 on /healthz, the slices withdrawn, exit status 1) or warn (the event and an error log; the plugin serves the slices as the server kept them). See docs/versions.md.")
	fs.StringVar(&o.RuntimeEndpoint, "runtime-endpoint", o.RuntimeEndpoint, "The node's container runtime's CRI socket as this process sees it (unix:///...): at start the plugin creates, and removes, a container there that asks for a canary CDI device, and reads from the runtime whether the device's edit reached the container's spec (a runtime that ignores CDI starts claims' containers without their devices, and without an error). Empty: no canary; the plugin infers from the Node's runtime version and, where visible, containerd's configuration, and only warns.")
	fs.StringVar(&o.RuntimeCanaryImage, "runtime-canary-image", o.RuntimeCanaryImage, "An image the runtime has (the plugin's own) that the CDI canary's container is created from; it is never started.")
	fs.StringVar(&o.RuntimeCDICheck, "runtime-cdi-check", o.RuntimeCDICheck, "What to do when the CDI canary shows that the container runtime ignores CDI: refuse (a Warning event RuntimeIgnoresCDI on the Node, and no devices published, so that no pod is scheduled to a device it cannot get; the plugin still registers, to unprepare) or warn (the event; the devices are published). See docs/troubleshooting.md.")
	o.Kube.AddFlags(fs)
	logsapi.AddFlags(o.Logging, fs)
	return fs
}

// npuBackend tells whether the backend is an NPU one (real or mock).
func (o *Options) npuBackend() bool { return o.Backend == backend.NPU || o.Backend == backend.NPUMock }

// Complete fills defaults that depend on other flags and checks the result.
func (o *Options) Complete() error {
	if o.NodeName == "" {
		return fmt.Errorf("--node-name (or $NODE_NAME) is required")
	}
	isNPU := o.npuBackend()
	if err := o.completeNVIDIACompat(isNPU); err != nil {
		return err
	}
	if o.DriverName == "" {
		o.DriverName = GPUDriverName
		if isNPU {
			o.DriverName = NPUDriverName
		}
	}
	if o.PluginDataDir == "" {
		o.PluginDataDir = filepath.Join("/var/lib/kubelet/plugins", o.DriverName)
	}
	if o.CheckpointDir == "" {
		o.CheckpointDir = filepath.Join(o.PluginDataDir, "checkpoint")
	}
	if o.MockDir == "" {
		o.MockDir = filepath.Join(o.PluginDataDir, "mock")
	}
	if err := validEventsNamespace(o.EventsNamespace); err != nil {
		return err
	}
	switch {
	case o.MockDriverRoot != MockDriverRootGenerate && o.MockDriverRoot != MockDriverRootUse:
		return fmt.Errorf("--mock-driver-root=%q: want %s or %s", o.MockDriverRoot, MockDriverRootGenerate, MockDriverRootUse)
	case o.MockDriverRoot == MockDriverRootUse && o.Backend != backend.Mock:
		return fmt.Errorf("--mock-driver-root=%s is for --backend=%s, not %q", MockDriverRootUse, backend.Mock, o.Backend)
	case o.MockDriverRoot == MockDriverRootUse && o.NVIDIADriverRoot == "":
		return fmt.Errorf("--mock-driver-root=%s needs the driver root in --nvidia-driver-root", MockDriverRootUse)
	}
	if o.MPSDaemons != MPSDaemonsPod && o.MPSDaemons != MPSDaemonsProcess {
		return fmt.Errorf("--mps-daemons=%q: want %s or %s", o.MPSDaemons, MPSDaemonsPod, MPSDaemonsProcess)
	}
	if err := checkDroppedFieldsMode(o.DroppedFields); err != nil {
		return err
	}
	if err := checkRuntimeCDIMode(o.RuntimeCDICheck); err != nil {
		return err
	}
	if o.RuntimeEndpoint != "" && o.RuntimeCanaryImage == "" {
		return fmt.Errorf("--runtime-endpoint needs --runtime-canary-image, an image the runtime has, for the CDI canary's container")
	}
	if err := mig.ValidateProfiles(o.MIGProfiles); err != nil {
		return fmt.Errorf("--mig-profiles: %w", err)
	}
	if !o.DynamicMIG && !(len(o.MIGProfiles) == 1 && o.MIGProfiles[0] == mig.AllProfiles) {
		return fmt.Errorf("--mig-profiles is for --dynamic-mig: static MIG publishes the MIG devices that exist")
	}
	if _, err := health.ParseEffects(o.DeviceTaintEffects); err != nil {
		return fmt.Errorf("--device-taint-effects: %w", err)
	}
	return nil
}

// backendDriverRoot is the NVIDIA driver root the device backend loads NVML from, which the
// plugin waits for: --nvidia-driver-root for nvml and for the mock that uses it; "" otherwise.
func (o *Options) backendDriverRoot() string {
	if o.Backend == backend.NVML || o.Backend == backend.Mock && o.MockDriverRoot == MockDriverRootUse {
		return o.NVIDIADriverRoot
	}
	return ""
}

// hostRoot is the host's / as this process sees it, "" where it is not mounted: the NVIDIA
// driver root of the nvml backend when that root is the host's / (the chart mounts it whole).
func (o *Options) hostRoot() string {
	host := o.NVIDIAHostDriverRoot
	if host == "" {
		host = o.NVIDIADriverRoot
	}
	if o.Backend != backend.NVML || o.NVIDIADriverRoot == "" || filepath.Clean(host) != "/" {
		return ""
	}
	return o.NVIDIADriverRoot
}

// backendHostDriverRoot is backendDriverRoot as the host sees it: the host path of the device
// nodes the backend finds under its dev/.
func (o *Options) backendHostDriverRoot() string {
	if o.backendDriverRoot() == "" {
		return ""
	}
	return o.NVIDIAHostDriverRoot
}

func defaultIgnoredXIDs() []uint {
	out := make([]uint, len(health.DefaultIgnoredXIDs))
	for i, x := range health.DefaultIgnoredXIDs {
		out[i] = uint(x)
	}
	return out
}
