package npumock

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/layout"
	"github.com/accel-dra/accel-dra/pkg/backend/npu"
)

// ShapePrefix makes a profile name a declared machine: "shape:<file>" generates the host the file
// describes (Shape) instead of a named profile. The file is read when the tree is generated.
const ShapePrefix = "shape:"

// Shape declares a host of identical NPUs, spread evenly over NUMA nodes and PCIe root
// complexes in bus order.
type Shape struct {
	// Model is one of Models: the Ascend products the NPU backend knows by PCI device ID (it
	// publishes nothing else, so an unknown model cannot be described).
	Model string `json:"model"`
	// Count is the number of NPUs, 1 to layout.MaxDevices.
	Count int `json:"count"`
	// NUMANodes the NPUs are spread over (default 1); -1: none.
	NUMANodes int `json:"numaNodes,omitempty"`
	// NPUsPerPCIeRoot is how many NPUs share a PCIe root complex (default 1).
	NPUsPerPCIeRoot int `json:"npusPerPCIeRoot,omitempty"`
	// SerialNumbers gives the NPUs serial numbers (Atlas 800 training servers have them).
	SerialNumbers bool `json:"serialNumbers,omitempty"`
	// DriverVersion is the driver's version.info Version (default 24.1.rc2).
	DriverVersion string `json:"driverVersion,omitempty"`
}

// models are the PCI device IDs of the products Shape.Model names.
var models = map[string]uint16{
	"ascend310": 0xd100, "ascend310p": 0xd500, "ascend910": 0xd801, "ascend910b": 0xd802, "ascend910c": 0xd803,
}

// Models returns the NPU models a Shape can name, sorted.
func Models() []string {
	out := make([]string, 0, len(models))
	for k := range models {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ReadShape reads and checks a shape file (YAML or JSON, strictly: a misspelt field is an error,
// not a default).
func ReadShape(file string) (*Shape, error) {
	return layout.Read(file, "NPU", func(s *Shape) error {
		_, err := s.profile()
		return err
	})
}

// IsShape says whether file is an NPU shape (its model is an NPU's), so that a caller can pick
// the backend of a shape file.
func IsShape(file string) bool {
	s, err := ReadShape(file)
	return err == nil && s.Model != ""
}

func (s *Shape) profile() (profile, error) {
	id, ok := models[s.Model]
	if !ok {
		return profile{}, fmt.Errorf("unknown model %q: the NPU backend knows %s", s.Model, strings.Join(Models(), ", "))
	}
	if _, ok := npu.LookupProduct(id); !ok {
		return profile{}, fmt.Errorf("model %q: the NPU backend does not know device 0x%04x", s.Model, id)
	}
	slots, err := layout.Spread(s.Count, s.NUMANodes, s.NPUsPerPCIeRoot, "npusPerPCIeRoot")
	if err != nil {
		return profile{}, err
	}
	p := profile{description: fmt.Sprintf("%dx %s (declared shape)", s.Count, s.Model), driverVersion: "24.1.rc2"}
	if s.DriverVersion != "" {
		p.driverVersion = s.DriverVersion
	}
	for _, slot := range slots {
		p.functions = append(p.functions, ascend(id, slot.BusID, slot.Root, []string{slot.Bridge}, slot.NUMA, s.SerialNumbers))
	}
	return p, nil
}

// lookup returns the profile of a name: a named profile, or a shape file's, under a directory
// name of its own.
func lookup(profileName string) (profile, string, error) {
	file, isShape := strings.CutPrefix(profileName, ShapePrefix)
	if !isShape {
		prof, ok := profiles[profileName]
		if !ok {
			return profile{}, "", fmt.Errorf("unknown NPU mock profile %q: valid profiles are %s, or %s<file> (a declared machine)", profileName, strings.Join(Profiles(), ", "), ShapePrefix)
		}
		return prof, profileName, nil
	}
	s, err := ReadShape(file)
	if err != nil {
		return profile{}, "", err
	}
	prof, _ := s.profile()
	return prof, dirName(profileName), nil
}

// dirName is the directory a profile's trees go to under the mock's directory: the profile's
// name, or for a shape a name of its own (the file's path has slashes).
func dirName(profileName string) string {
	file, isShape := strings.CutPrefix(profileName, ShapePrefix)
	if !isShape {
		return profileName
	}
	sum := sha256.Sum256([]byte(file))
	return fmt.Sprintf("shape-%x", sum[:6])
}
