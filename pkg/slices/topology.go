package slices

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// NVLink and fabric attributes of a whole GPU (device.Topology; docs/device-attributes.md,
// "NVLink and fabric"), in the driver's domain like its other attributes, so that the NVIDIA
// compatibility mode publishes the same names under gpu.nvidia.com.
const (
	AttrNVLinkIsland         resourceapi.QualifiedName = "nvlinkIsland"
	AttrNVLinkIslandFullMesh resourceapi.QualifiedName = "nvlinkIslandFullMesh"
	AttrNVLinkGroup2         resourceapi.QualifiedName = "nvlinkGroup2"
	AttrNVLinkGroup4         resourceapi.QualifiedName = "nvlinkGroup4"
	AttrNVLinkGroup8         resourceapi.QualifiedName = "nvlinkGroup8"
	AttrNVLinkLinks          resourceapi.QualifiedName = "nvlinkLinks"
	AttrNVLinkVersion        resourceapi.QualifiedName = "nvlinkVersion"
	AttrFabricClique         resourceapi.QualifiedName = "fabricClique"
	// AttrNVLinkCliques is a list of strings: only where the API server keeps list-type
	// attributes (DRAListTypeAttributes), see TopologyListAttributes.
	AttrNVLinkCliques resourceapi.QualifiedName = "nvlinkCliques"
	// AttrHCCSGroup is an Ascend NPU's HCCS ring or mesh.
	AttrHCCSGroup resourceapi.QualifiedName = "hccsGroup"
)

// addTopology adds the scalar topology attributes of d; empty fields are omitted.
func addTopology(d *device.Device, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
	t := d.Topology
	if t != nil && t.HCCS != "" {
		attrs[AttrHCCSGroup] = str(t.HCCS)
	}
	if t == nil || t.Links <= 0 {
		return
	}
	attrs[AttrNVLinkLinks] = resourceapi.DeviceAttribute{IntValue: ptr(int64(t.Links))}
	if v, err := NormalizeVersion(t.Version); t.Version != "" && err == nil {
		attrs[AttrNVLinkVersion] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	if t.Island != "" {
		attrs[AttrNVLinkIsland] = str(t.Island)
		attrs[AttrNVLinkIslandFullMesh] = resourceapi.DeviceAttribute{BoolValue: ptr(t.IslandFullMesh)}
	}
	for name, v := range map[resourceapi.QualifiedName]string{AttrNVLinkGroup2: t.Group2, AttrNVLinkGroup4: t.Group4, AttrNVLinkGroup8: t.Group8, AttrFabricClique: t.FabricClique} {
		if v != "" {
			attrs[name] = str(v)
		}
	}
}

// TopologyListAttributes is the AttributeFunc of the list-valued topology attribute, the
// GPU's maximal NVLink cliques, for a plugin whose API server keeps list-type attributes: one
// the server drops would make the plugin refuse to run (--dropped-fields), so it is not part
// of every device's attributes.
func TopologyListAttributes(d *device.Device) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	if d.Topology == nil || len(d.Topology.Cliques) == 0 {
		return nil
	}
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrNVLinkCliques: {StringValues: append([]string(nil), d.Topology.Cliques...)},
	}
}
