package metrics

import (
	"strconv"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// deviceInfoLabels are accel_dra_device_info's labels besides driver. uuid and pci_bus_id are
// what DCGM's exporter labels its series with (UUID, pci_bus_id), for joins; parent_uuid is the
// physical GPU's UUID on a MIG device (whose own uuid is empty until a dynamic-MIG instance
// exists), empty otherwise; numa_node is empty where sysfs reports no affinity.
var deviceInfoLabels = []string{"pool", "device", "uuid", "parent_uuid", "pci_bus_id", "product", "numa_node"}

// DeviceInfoOf returns the accel_dra_device_info label values of a device published in pool.
func DeviceInfoOf(pool string, d device.Device) []string {
	var parent, numa string
	if d.MIG != nil {
		parent = d.MIG.ParentUUID
	}
	if d.NUMANode != nil {
		numa = strconv.FormatInt(*d.NUMANode, 10)
	}
	return []string{pool, d.Name, d.UUID, parent, d.PCIBusID, d.ProductName, numa}
}

// SetDevices makes accel_dra_device_info hold exactly these devices (label values as
// DeviceInfoOf returns them): series of devices no longer given are deleted, so the metric
// follows the published set. Series that stay are never removed in between, so a scrape never
// sees a device vanish and come back.
func (m *Plugin) SetDevices(devs [][]string) {
	m.devicesMu.Lock()
	defer m.devicesMu.Unlock()
	next := map[string][]string{}
	for _, d := range devs {
		next[key(d)] = d
	}
	for k, d := range m.devices {
		if _, ok := next[k]; !ok {
			m.DeviceInfo.DeleteLabelValues(d...)
		}
	}
	for _, d := range next {
		m.DeviceInfo.WithLabelValues(d...).Set(1)
	}
	m.devices = next
}

func key(values []string) string {
	var b []byte
	for _, v := range values {
		b = strconv.AppendQuote(b, v)
	}
	return string(b)
}
