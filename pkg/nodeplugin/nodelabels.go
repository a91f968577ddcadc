package nodeplugin

import (
	"context"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/nodelabels"
)

// ReasonFabricCliquesDisagree is the Node event of GPUs in more than one NVLink fabric clique.
const ReasonFabricCliquesDisagree = "FabricCliquesDisagree"

// cliqueLabelKey is the Node label of the GPUs' fabric clique: NVIDIA's key in compatibility
// mode, so that manifests written for NVIDIA's stack (pod affinity on nvidia.com/gpu.clique)
// keep working.
func (o *Options) cliqueLabelKey() string {
	if o.NVIDIACompat {
		return nodelabels.NVIDIACliqueLabel
	}
	return nodelabels.CliqueLabel
}

// labelFabricClique labels the Node with the fabric clique its whole GPUs agree on, or removes
// the plugin's label where none reports one or they disagree (pkg/nodelabels). It runs once per
// enumeration: a fabric registered again after a driver change or a reboot is read by the next
// process, which sets the label it finds. A failure is logged; the plugin serves its devices
// either way, since the devices' fabricClique attributes do not depend on the label.
func labelFabricClique(ctx context.Context, kube kubernetes.Interface, o *Options, inv *device.Inventory, events driver.EventSink) {
	logger := klog.FromContext(ctx)
	key := o.cliqueLabelKey()
	gpus := map[string]string{}
	for _, d := range inv.Devices {
		if d.Kind != device.KindGPU || d.MIG != nil {
			continue
		}
		gpus[d.Name] = ""
		if d.Topology != nil {
			gpus[d.Name] = d.Topology.FabricClique
		}
	}
	value, err := nodelabels.Clique(gpus)
	if err != nil {
		logger.Info("Not labelling the Node with an NVLink fabric clique", "label", key, "reason", err.Error())
		events.Warning(ReasonFabricCliquesDisagree, err.Error()+"; the Node gets no "+key+" label (docs/device-attributes.md, \"NVLink and fabric\")")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l := nodelabels.Labeler{Client: kube, NodeName: o.NodeName, Key: key, FieldManager: "accel-dra-kubelet-plugin/" + o.DriverName}
	after, err := l.Set(ctx, value)
	switch {
	case err != nil:
		logger.Error(err, "Labelling the Node with its NVLink fabric clique", "label", key, "value", value)
	case after != value:
		logger.Info("Another writer holds the Node's fabric clique label", "label", key, "value", after, "want", value)
	case value != "":
		logger.Info("Node labelled with its NVLink fabric clique", "label", key, "value", value)
	default:
		logger.V(2).Info("No NVLink fabric clique on this node: no label", "label", key)
	}
}
