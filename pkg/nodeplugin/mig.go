package nodeplugin

import (
	"errors"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/mig"
)

// dynamicMIG applies the dynamic-MIG model to the inventory and returns the backend as the
// partitioner that creates the MIG instances.
func dynamicMIG(be device.Backend, inv *device.Inventory) (*device.Inventory, device.Partitioner, error) {
	p, ok := be.(device.Partitioner)
	if !ok {
		return nil, nil, errors.New("the device backend cannot create MIG instances (dynamic MIG needs the nvml or mock backend)")
	}
	dyn, err := mig.Dynamic(inv)
	if err != nil {
		return nil, nil, err
	}
	return dyn, p, nil
}
