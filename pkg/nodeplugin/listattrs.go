package nodeplugin

import (
	"context"
	"maps"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// nvlinkCliquesKept says whether the plugin publishes the GPUs' NVLink cliques
// (slices.AttrNVLinkCliques), a list-type attribute: only where the API server keeps list
// values (the alpha gate DRAListTypeAttributes), asked with a dry-run create before the first
// publish. A server that drops them would make the plugin refuse to run (--dropped-fields), or
// serve devices without the attribute a claim matches on; without it the GPUs keep their
// scalar NVLink attributes. Nodes whose GPUs have no clique ask nothing.
func nvlinkCliquesKept(ctx context.Context, g *gateCheck, inv *device.Inventory) bool {
	has := false
	for i := range inv.Devices {
		has = has || slices.TopologyListAttributes(&inv.Devices[i]) != nil
	}
	if !has {
		return false
	}
	logger := klog.FromContext(ctx)
	probe := resourceapi.Device{Name: "dry-run-probe", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		slices.AttrNVLinkCliques: {StringValues: []string{"probe"}},
	}}
	drops, err := g.probe(ctx, probe)
	switch {
	case err != nil:
		logger.Error(err, "Dry-run ResourceSlice with a list-type attribute; publishing no NVLink cliques", "attribute", slices.AttrNVLinkCliques)
		return false
	case len(drops) > 0:
		logger.Info("The API server drops list-type attributes: publishing no NVLink cliques, the GPUs keep their scalar NVLink attributes (docs/device-attributes.md, NVLink and fabric)",
			"attribute", slices.AttrNVLinkCliques, "gate", drops[0].Gate)
		return false
	}
	logger.Info("The API server keeps list-type attributes: publishing the GPUs' NVLink cliques", "attribute", slices.AttrNVLinkCliques)
	return true
}

// withNVLinkCliques adds the list of NVLink cliques to base's attributes where on.
func withNVLinkCliques(base slices.AttributeFunc, on bool) slices.AttributeFunc {
	if !on {
		return base
	}
	return func(d *device.Device) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		out := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
		if base != nil {
			maps.Copy(out, base(d))
		}
		maps.Copy(out, slices.TopologyListAttributes(d))
		return out
	}
}
