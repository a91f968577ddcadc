package npu

// HuaweiVendorID is the PCI vendor ID of Huawei Technologies, the maker of Ascend NPUs. Huawei
// network cards and other functions share it, so the device ID decides.
const HuaweiVendorID = 0x19e5

// Product is what the PCI device ID of an Ascend NPU says about it. sysfs has no field for the
// on-package memory, so MemoryBytes is the nominal size of the product's usual variant.
type Product struct {
	// Name is the product name published as productName, e.g. "Ascend 910B".
	Name string
	// Architecture is the CANN chip family (the soc_version family operator kernels are built
	// for), published as architecture.
	Architecture string
	// MemoryBytes is the nominal HBM/DDR size of one NPU (one PCI function).
	MemoryBytes int64
}

const gib = int64(1) << 30

// products maps PCI device IDs (vendor 0x19e5) to Ascend products.
//
// Sources and confidence. The device IDs are those that Huawei's own log-collection script
// for the Ascend driver (CANN) matches with `lspci -d 19e5:<id>`: d100 Ascend 310, d500 Ascend
// 310P, d801 Ascend 910, d802 Ascend 910B, d803 "910_93", the Atlas A3 chip sold as Ascend 910C.
// Independent field reports agree on d802 for 910B (Atlas 800T A2) and d803 for A3 servers.
// The memory sizes are nominal and less certain, because one device ID spans variants:
//   - d100 Ascend 310: 8 GiB LPDDR4X per chip (Atlas 300I inference card, 4 chips).
//   - d500 Ascend 310P: 24 GiB (Atlas 300I Pro); the Atlas 300I Duo has 48 GiB per chip.
//   - d801 Ascend 910: 32 GiB HBM2.
//   - d802 Ascend 910B: 64 GiB HBM for 910B1/B2/B3; the 910B4 has 32 GiB.
//   - d803 Ascend 910C: 64 GiB per die; a 910C package has two dies, each its own NPU.
//
// A driver that needs the exact size must ask DCMI (dcmi_get_device_memory_info), which needs
// Huawei's closed library; this backend deliberately reads only sysfs.
var products = map[uint16]Product{
	0xd100: {Name: "Ascend 310", Architecture: "Ascend310", MemoryBytes: 8 * gib},
	0xd500: {Name: "Ascend 310P", Architecture: "Ascend310P", MemoryBytes: 24 * gib},
	0xd801: {Name: "Ascend 910", Architecture: "Ascend910", MemoryBytes: 32 * gib},
	0xd802: {Name: "Ascend 910B", Architecture: "Ascend910B", MemoryBytes: 64 * gib},
	0xd803: {Name: "Ascend 910C", Architecture: "Ascend910_93", MemoryBytes: 64 * gib},
}

// LookupProduct returns the Ascend product of a Huawei PCI device ID.
func LookupProduct(deviceID uint16) (Product, bool) {
	p, ok := products[deviceID]
	return p, ok
}
