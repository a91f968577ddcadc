package nodeplugin

import (
	"context"
	"errors"

	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/mig"
)

// dynamicMIG applies the dynamic-MIG model, with the chosen profiles, to the inventory and
// returns the backend as the partitioner that creates the MIG instances.
func dynamicMIG(ctx context.Context, be device.Backend, inv *device.Inventory, profiles []string) (*device.Inventory, device.Partitioner, error) {
	p, ok := be.(device.Partitioner)
	if !ok {
		return nil, nil, errors.New("the device backend cannot create MIG instances (dynamic MIG needs the nvml or mock backend)")
	}
	dyn, res, err := mig.DynamicWithResult(inv, mig.WithProfiles(profiles))
	if err != nil {
		return nil, nil, err
	}
	if len(res.NotOffered) > 0 {
		// Not an error: one chart value serves nodes of several GPU models.
		klog.FromContext(ctx).Info("MIG profiles chosen with --mig-profiles that no GPU in MIG mode on this node offers", "profiles", res.NotOffered, "offered", mig.OfferedProfiles(inv))
	}
	return dyn, p, nil
}
