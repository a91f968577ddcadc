package driver

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/accel-dra/accel-dra/pkg/slices"
)

// WithDeviceMetadata returns the driver as a kubeletplugin.DRAPlugin whose prepare results carry
// each device's attributes, exactly as the ResourceSlice publishes them (uuid, productName,
// resource.kubernetes.io/pciBusID, numaNode, ...), for the helper's device metadata
// (kubeletplugin.EnableDeviceMetadata): the helper writes them to a file that it mounts into the
// claim's containers (docs/health.md, "Device metadata in containers").
//
// The metadata is built once here, not per prepare: a device's attributes do not change while
// the plugin runs, and the helper copies them.
func (d *Driver) WithDeviceMetadata() kubeletplugin.DRAPlugin {
	m := metadataPlugin{Driver: d, byDevice: map[string]*kubeletplugin.DeviceMetadata{}}
	for name := range d.node.publishable {
		m.byDevice[name] = d.node.deviceMetadata(name)
	}
	return m
}

type metadataPlugin struct {
	*Driver
	byDevice map[string]*kubeletplugin.DeviceMetadata
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (m metadataPlugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	res, err := m.Driver.PrepareResourceClaims(ctx, claims)
	for uid, r := range res {
		for i := range r.Devices {
			r.Devices[i].Metadata = m.byDevice[r.Devices[i].DeviceName]
		}
		res[uid] = r
	}
	return res, err
}

// deviceMetadata is nil for a device that is not published: the helper then writes the
// device's identity only.
func (n *node) deviceMetadata(name string) *kubeletplugin.DeviceMetadata {
	dev, ok := n.devices[name]
	if !ok || !n.publishable[name] {
		return nil
	}
	api, _, _, err := slices.ToAPI(dev)
	if err != nil {
		return nil
	}
	attrs := make(map[string]resourceapi.DeviceAttribute, len(api.Attributes))
	for k, v := range api.Attributes {
		attrs[string(k)] = v
	}
	return &kubeletplugin.DeviceMetadata{Attributes: attrs}
}
