package driver

import "github.com/accel-dra/accel-dra/pkg/device"

// controlNodes are the control nodes of a spec written now: looked up again where the backend
// can (Inventory.ResolveControlNodes), so that a module loaded after start-up (nvidia-uvm)
// reaches the claims prepared from then on; otherwise those enumeration found.
func (d *Driver) controlNodes() ([]device.Node, error) {
	if r := d.opts.Inventory.ResolveControlNodes; r != nil {
		return r()
	}
	return d.opts.Inventory.ControlNodes, nil
}
