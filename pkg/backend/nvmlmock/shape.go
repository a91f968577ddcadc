package nvmlmock

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/layout"
)

// ShapePrefix makes a profile name a declared machine: "shape:<file>" builds the mock machine
// the file describes (Shape) instead of a named profile, for a node no profile matches (another
// count or layout, a GPU model the mock does not know). The file is read when the machine is
// built.
const ShapePrefix = "shape:"

// Shape declares a machine of identical GPUs, spread evenly over NUMA nodes and PCIe root
// complexes in index order.
type Shape struct {
	// Model is a GPU the mock knows (Models), or empty with CustomModel.
	Model string `json:"model,omitempty"`
	// CustomModel describes a GPU the mock does not know. It cannot be in MIG mode: the mock
	// has no MIG profile table for it.
	CustomModel *Model `json:"customModel,omitempty"`
	// Count is the number of GPUs, 1 to layout.MaxDevices.
	Count int `json:"count"`
	// NUMANodes the GPUs are spread over (default 1); 0 after defaulting is not allowed, and
	// -1 means the GPUs have no NUMA node (numa_node -1, as in many VMs).
	NUMANodes int `json:"numaNodes,omitempty"`
	// GPUsPerPCIeRoot is how many GPUs share a PCIe root complex (default 1).
	GPUsPerPCIeRoot int `json:"gpusPerPCIeRoot,omitempty"`
	// MIGMode puts every GPU in MIG mode, without MIG devices (for --dynamic-mig, or static
	// MIG with none yet).
	MIGMode bool `json:"migMode,omitempty"`
	// DriverVersion is what NVML reports (default the profiles' 570.124.06).
	DriverVersion string `json:"driverVersion,omitempty"`
}

// Model is one GPU product as NVML reports it.
type Model struct {
	// Name is NVML's name, "NVIDIA H200".
	Name string `json:"name"`
	// Architecture is one of Architectures.
	Architecture string `json:"architecture"`
	// ComputeCapability is "major.minor", "9.0".
	ComputeCapability string `json:"computeCapability"`
	// MemoryMiB is the GPU's memory in MiB.
	MemoryMiB uint64 `json:"memoryMiB"`
	// PCIDeviceID is the PCI device ID (vendor 0x10de), "0x2335".
	PCIDeviceID string `json:"pciDeviceID"`
}

// models are the GPUs a Shape can name.
var models = map[string]model{
	"a100-sxm4-40gb": a100SXM40,
	"h100-sxm-80gb":  h100SXM80,
	"gh200":          gh200,
	"l4":             l4,
	"t4":             t4,
}

// Models returns the GPU models a Shape can name, sorted.
func Models() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range models {
			if !yield(k) {
				return
			}
		}
	})
}

var architectures = map[string]nvml.DeviceArchitecture{
	"kepler": nvml.DEVICE_ARCH_KEPLER, "maxwell": nvml.DEVICE_ARCH_MAXWELL, "pascal": nvml.DEVICE_ARCH_PASCAL,
	"volta": nvml.DEVICE_ARCH_VOLTA, "turing": nvml.DEVICE_ARCH_TURING, "ampere": nvml.DEVICE_ARCH_AMPERE,
	"ada": nvml.DEVICE_ARCH_ADA, "hopper": nvml.DEVICE_ARCH_HOPPER, "blackwell": nvml.DEVICE_ARCH_BLACKWELL,
}

// ReadShape reads and checks a shape file (YAML or JSON, strictly: a misspelt field is an error,
// not a default).
func ReadShape(file string) (*Shape, error) {
	return layout.Read(file, "GPU", func(s *Shape) error {
		_, err := s.profile()
		return err
	})
}

// profile builds the machine, laid out by layout.Spread.
func (s *Shape) profile() (profile, error) {
	var m model
	switch {
	case s.Model != "" && s.CustomModel != nil:
		return profile{}, errors.New("give model or customModel, not both")
	case s.Model != "":
		var ok bool
		if m, ok = models[s.Model]; !ok {
			return profile{}, fmt.Errorf("unknown model %q: the mock knows %s (or describe one with customModel)", s.Model, strings.Join(Models(), ", "))
		}
	case s.CustomModel != nil:
		var err error
		if m, err = s.CustomModel.model(); err != nil {
			return profile{}, fmt.Errorf("customModel: %w", err)
		}
	default:
		return profile{}, errors.New("model or customModel is required")
	}
	slots, err := layout.Spread(s.Count, s.NUMANodes, s.GPUsPerPCIeRoot, "gpusPerPCIeRoot")
	if err != nil {
		return profile{}, err
	}
	if s.MIGMode && m.migTable == nil {
		return profile{}, fmt.Errorf("migMode: the mock has no MIG profiles for %s", m.name)
	}
	p := profile{
		description:       fmt.Sprintf("%dx %s (declared shape)", s.Count, m.name),
		driverVersion:     driverVersion,
		cudaDriverVersion: cudaDriverVersion,
		modeset:           true,
	}
	if s.DriverVersion != "" {
		p.driverVersion = s.DriverVersion
	}
	for _, slot := range slots {
		p.gpus = append(p.gpus, gpu{model: m, busID: slot.BusID, root: slot.Root, bridges: []string{slot.Bridge}, numa: slot.NUMA, migMode: s.MIGMode})
	}
	return p, nil
}

func (m *Model) model() (model, error) {
	arch, ok := architectures[strings.ToLower(m.Architecture)]
	if !ok {
		return model{}, fmt.Errorf("architecture %q: want one of %s", m.Architecture, strings.Join(slices.Sorted(func(yield func(string) bool) {
			for k := range architectures {
				if !yield(k) {
					return
				}
			}
		}), ", "))
	}
	major, minor, ok := strings.Cut(m.ComputeCapability, ".")
	ccMajor, err1 := strconv.Atoi(major)
	ccMinor, err2 := strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil || ccMajor < 1 || ccMinor < 0 {
		return model{}, fmt.Errorf("computeCapability %q: want major.minor, e.g. 9.0", m.ComputeCapability)
	}
	dev, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(m.PCIDeviceID), "0x"), 16, 16)
	if err != nil {
		return model{}, fmt.Errorf("pciDeviceID %q: want a 16-bit hex number, e.g. 0x2335", m.PCIDeviceID)
	}
	switch {
	case m.Name == "":
		return model{}, errors.New("name is required")
	case m.MemoryMiB == 0:
		return model{}, errors.New("memoryMiB is required")
	}
	return model{name: m.Name, arch: arch, ccMajor: ccMajor, ccMinor: ccMinor, memory: m.MemoryMiB << 20, pciDevice: uint16(dev)}, nil
}
