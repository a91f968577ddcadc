// Package layout places the identical devices of a declared mock machine (nvmlmock.Shape,
// npumock.Shape) on NUMA nodes and PCIe root complexes, so that both mocks lay out a declared
// machine by the same rules.
package layout

import (
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// MaxDevices bounds a declared machine; more is no server.
const MaxDevices = 64

// Slot is where one device sits.
type Slot struct {
	// BusID is the device's PCI address, "0000:11:00.0".
	BusID string
	// Root is the root complex directory under /sys/devices, "pci0000:10".
	Root string
	// Bridge is the root port between the root and the device, "0000:10:01.0".
	Bridge string
	// NUMA is the content of numa_node; -1 means none.
	NUMA int
}

// Spread places count devices in index order: device i on root complex i/perRoot (each on a
// root port of its own), on NUMA node i*numa/count. numa 0 means 1 and -1 no NUMA node; perRoot
// 0 means 1. perRootField names perRoot in errors (the shape's field).
func Spread(count, numa, perRoot int, perRootField string) ([]Slot, error) {
	if numa == 0 {
		numa = 1
	}
	if perRoot == 0 {
		perRoot = 1
	}
	switch {
	case count < 1 || count > MaxDevices:
		return nil, fmt.Errorf("count %d: want 1 to %d", count, MaxDevices)
	case numa < -1 || numa > count:
		return nil, fmt.Errorf("numaNodes %d: want -1 (none) or 1 to count", numa)
	case perRoot < 1 || perRoot > count:
		return nil, fmt.Errorf("%s %d: want 1 to count", perRootField, perRoot)
	}
	out := make([]Slot, count)
	for i := range out {
		root := 16 * (i/perRoot + 1)
		if root > 0xff-perRoot {
			return nil, errors.New("too many PCIe root complexes for one PCI domain")
		}
		port := i % perRoot
		n := -1
		if numa > 0 {
			n = i * numa / count
		}
		out[i] = Slot{
			BusID:  fmt.Sprintf("0000:%02x:00.0", root+1+port),
			Root:   fmt.Sprintf("pci0000:%02x", root),
			Bridge: fmt.Sprintf("0000:%02x:%02x.0", root, port+1),
			NUMA:   n,
		}
	}
	return out, nil
}

// Read decodes a shape file into shape (YAML or JSON, strictly: a misspelt field is an error,
// not a default) and checks it with check; errors name the file as a "<what> machine shape".
func Read[S any](file, what string, check func(*S) error) (*S, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	s := new(S)
	if err = yaml.UnmarshalStrict(data, s); err == nil {
		err = check(s)
	}
	if err != nil {
		return nil, fmt.Errorf("%s machine shape %s: %w", what, file, err)
	}
	return s, nil
}
