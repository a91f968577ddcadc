package nodeplugin

import (
	"cmp"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/sharing/mpspod"
)

// timeSlicer is the driver's nvidia-smi for GPU nodes (the mock's driver root has a stand-in),
// nil for NPUs and for a node without driver files and without --nvidia-smi-path.
func timeSlicer(o *Options, src *driverSource, kind device.Kind) sharing.TimeSlicer {
	if kind != device.KindGPU || o.NVIDIASMIPath == "" && src.root == "" {
		return nil
	}
	smi := sharing.NvidiaSMI{Path: o.NVIDIASMIPath}
	if root := src.root; root != "" {
		smi.NVML = func() (string, error) { return nvmlbackend.FindLibrary(root) }
	}
	if smi.Path == "" {
		smi.Path = filepath.Join(src.root, "usr/bin/nvidia-smi")
	}
	return smi
}

// MPS daemon modes (--mps-daemons).
const (
	MPSDaemonsProcess = "process"
	MPSDaemonsPod     = "pod"
)

// mpsControl runs MPS daemons with the driver's nvidia-cuda-mps-control, under the plugin data
// directory (the same path on the host, where the containers' mounts come from); nil for NPUs
// and for a node without driver files and without --nvidia-mps-control-path. The control
// binary runs chrooted into the driver root, or as --nvidia-mps-control-path names it. Each
// daemon runs in a pod of its own (--mps-daemons=pod, the chart's choice: it outlives the
// plugin's pod) or as a child process of the plugin (a plugin that runs as a host process).
func mpsControl(o *Options, src *driverSource, kind device.Kind, kube kubernetes.Interface) (*sharing.MPS, error) {
	if kind != device.KindGPU || o.NVIDIAMPSControlPath == "" && src.root == "" {
		return nil, nil
	}
	m := &sharing.MPS{Root: filepath.Join(o.PluginDataDir, "mps")}
	if o.MPSDaemons != MPSDaemonsPod {
		c := sharing.MPSControl{Path: o.NVIDIAMPSControlPath}
		if c.Path == "" {
			c = sharing.MPSControl{Root: src.root, Path: sharing.DefaultControlPath}
		}
		m.Daemons = sharing.Processes{Control: c}
		return m, nil
	}
	if o.MPSDaemonNamespace == "" || o.MPSDaemonImage == "" {
		return nil, fmt.Errorf("--mps-daemons=%s needs --mps-daemon-namespace (or $POD_NAMESPACE) and --mps-daemon-image", MPSDaemonsPod)
	}
	p := mpspod.Pods{Client: kube, Namespace: o.MPSDaemonNamespace, NodeName: o.NodeName, DriverName: o.DriverName,
		Image: o.MPSDaemonImage, ImagePullPolicy: corev1.PullIfNotPresent, ImagePullSecrets: o.MPSDaemonImagePullSecrets, PriorityClassName: o.MPSDaemonPriorityClassName,
		ControlPath: o.NVIDIAMPSControlPath}
	if p.ControlPath == "" {
		// The pod mounts the driver root from the host.
		p.HostDriverRoot, p.ControlPath = cmp.Or(src.hostRoot, src.root), sharing.DefaultControlPath
	}
	m.Daemons = p
	return m, nil
}

// computeModeSetter is the backend, for the compute modes of sharing claims' GPUs, if it can set
// them (the NVML backend and its mock). The backend may have been closed after enumerating: it
// opens NVML again for each call.
func computeModeSetter(be device.Backend, kind device.Kind) device.ComputeModeSetter {
	if s, ok := be.(device.ComputeModeSetter); ok && kind == device.KindGPU {
		return s
	}
	return nil
}
