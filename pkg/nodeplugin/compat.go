package nodeplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/accel-dra/accel-dra/pkg/compat/nvidia"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// completeNVIDIACompat checks --nvidia-compat against the other flags and gives the driver
// NVIDIA's name. A different --driver-name is refused rather than obeyed: the point of the mode
// is that workloads naming gpu.nvidia.com find the devices, and one under another name would
// translate NVIDIA's configuration for claims nobody writes.
func (o *Options) completeNVIDIACompat(isNPU bool) error {
	if !o.NVIDIACompat {
		return nil
	}
	if isNPU {
		return fmt.Errorf("--nvidia-compat is for GPU backends, not --backend=%s", o.Backend)
	}
	if o.DriverName != "" && o.DriverName != nvidia.DriverName {
		return fmt.Errorf("--nvidia-compat publishes the GPUs as %s; --driver-name=%s contradicts it", nvidia.DriverName, o.DriverName)
	}
	o.DriverName = nvidia.DriverName
	if o.PluginDataDir == "" {
		// Not NVIDIA's own directory, which holds its checkpoint: that stays as NVIDIA's driver
		// left it, for a rollback (the chart does the same).
		o.PluginDataDir = filepath.Join("/var/lib/kubelet/plugins", nvidia.DriverName+"-accel-dra")
	}
	return nil
}

// configTranslator is the driver's ConfigTranslator: NVIDIA's configuration in the
// compatibility mode, none otherwise.
func (o *Options) configTranslator() func([]byte) ([]byte, error) {
	if !o.NVIDIACompat {
		return nil
	}
	return nvidia.Translate
}

// configApplies is the driver's ConfigApplies: NVIDIA's per-kind device types in the
// compatibility mode.
func (o *Options) configApplies() func([]byte, bool) bool {
	if !o.NVIDIACompat {
		return nil
	}
	return nvidia.AppliesTo
}

// taintKeys is the driver's TaintKeys: NVIDIA's in the compatibility mode.
func (o *Options) taintKeys() map[health.Cause]string {
	if !o.NVIDIACompat {
		return nil
	}
	return nvidia.TaintKeys
}

// attributes is the driver's Attributes: NVIDIA's names and values in the compatibility mode.
func (o *Options) attributes() slices.AttributeFunc {
	if !o.NVIDIACompat {
		return nil
	}
	return nvidia.Attributes
}

// ReasonNVIDIADriverServes is the reason of the Node event of nvidiaPluginGone's refusal.
const ReasonNVIDIADriverServes = "NVIDIADriverServesGPUs"

// eventsClient is an API client for a refusal's event, before the plugin has its own.
func (o *Options) eventsClient() (kubernetes.Interface, error) {
	cfg, err := o.Kube.RESTConfig("accel-dra-kubelet-plugin/" + o.NodeName)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// nvidiaPluginGone refuses to start a GPU plugin on a node where NVIDIA's DRA driver is
// registered and answers (at <registrar dir>/gpu.nvidia.com-reg.sock; this plugin, run by the
// chart, registers under a name with its pod UID). In the compatibility mode two plugins of one
// driver name would each be handed the other's claims; under accel-dra's own name every GPU
// would be published twice, and a claim of either driver could get a GPU the other gave away.
// A socket nobody answers on is what a plugin that went left behind, and is no obstacle. An NPU
// plugin has no GPUs to collide on.
func (o *Options) nvidiaPluginGone(ctx context.Context) error {
	if o.npuBackend() {
		return nil
	}
	socket := filepath.Join(o.RegistrarDir, nvidia.DriverName+"-reg.sock")
	if _, err := os.Stat(socket); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	var info *registerapi.PluginInfo
	if err := call(socket, func(c *grpc.ClientConn) (err error) {
		info, err = registerapi.NewRegistrationClient(c).GetInfo(ctx, &registerapi.InfoRequest{})
		return err
	}); err != nil {
		klog.FromContext(ctx).Info("Registration socket of the driver name does not answer: left behind, ignored", "socket", socket, "err", err)
		return nil
	}
	if o.NVIDIACompat || o.DriverName == nvidia.DriverName {
		return fmt.Errorf("another kubelet plugin serves driver %s on this node (%s answers for %q): NVIDIA's DRA driver must leave the node before accel-dra serves under its name (docs/migrate-from-nvidia.md)", nvidia.DriverName, socket, info.Name)
	}
	return fmt.Errorf("NVIDIA's DRA driver serves this node's GPUs (%s answers for %q): accel-dra's %s would publish each of them a second time, and a claim of either driver could get a GPU the other gave away; move the node over first (drain it and keep NVIDIA's kubelet plugin off it, docs/migrate-from-nvidia.md), or keep accel-dra's GPU plugin off the node (drivers.gpu.nodeSelector)", socket, info.Name, o.DriverName)
}
