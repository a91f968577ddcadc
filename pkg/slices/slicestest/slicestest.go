// Package slicestest gives tests the ResourceSlices the plugin publishes for a mock machine,
// built by the plugin's own code (the real NVML backend over nvmlmock, then pkg/slices), so
// that tests of what consumes slices (templates, simulation) start from what a real node of
// the profile shows the API server, not from hand-written devices.
package slicestest

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// MockInventory enumerates the nvmlmock profile on nodeName through the real NVML backend; the
// server answers what the machine's truth is (NVLinkPeers).
func MockInventory(profile, nodeName string) (*device.Inventory, *nvmlmock.Server, error) {
	s, err := nvmlmock.NewServer(profile, nodeName)
	if err != nil {
		return nil, nil, err
	}
	inv, err := s.Backend().Enumerate(context.Background())
	if err != nil {
		return nil, nil, fmt.Errorf("profile %s: %w", profile, err)
	}
	return inv, s, nil
}

// NodeSlices returns the slices of driver that the plugin publishes for inv on nodeName, one
// pool named after the node, as the kubelet plugin helper writes them (generation 1, every
// slice counted). lists adds the list-valued topology attribute (nvlinkCliques), as the plugin
// does where the API server keeps list values (DRAListTypeAttributes).
func NodeSlices(inv *device.Inventory, driver, nodeName string, lists bool) ([]resourceapi.ResourceSlice, error) {
	var opts []slices.Option
	if lists {
		opts = append(opts, slices.WithAttributes(slices.TopologyListAttributes))
	}
	res := slices.Build(inv, nodeName, opts...)
	if len(res.Rejected) > 0 {
		return nil, fmt.Errorf("devices rejected: %+v", res.Rejected)
	}
	p := res.Resources.Pools[nodeName]
	out := make([]resourceapi.ResourceSlice, 0, len(p.Slices))
	for i, sl := range p.Slices {
		s := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver:         driver,
			NodeName:       &nodeName,
			Pool:           resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: int64(len(p.Slices))},
			Devices:        sl.Devices,
			SharedCounters: sl.SharedCounters,
		}}
		s.Name = fmt.Sprintf("%s-%s-%d", nodeName, driver, i)
		out = append(out, s)
	}
	return out, nil
}
