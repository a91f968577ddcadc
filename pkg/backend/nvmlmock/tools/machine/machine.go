// Package machine is the description of a mock GPU machine that the GPU mock's driver root
// carries (Path) for its tools: which GPU a /dev/nvidia<minor> node is, what it is called and
// how much memory it has. On a real node the tools ask the kernel driver (through /dev/nvidiactl
// and /proc/driver/nvidia); a mock node has no driver, so the mock writes down what its NVML
// says when it writes its driver root, and containers get the file through a mount of the
// plugin's CDI edits, as they get /dev/nvidiactl on a real node. It holds no NVML itself: the
// tools are static binaries without cgo.
package machine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Path is where the description lies, relative to the driver root, and, with a leading slash,
// where containers see it. It is <tools' directory>/../share/accel-dra-mock/gpus.json for the
// tools in usr/bin.
const Path = "usr/share/accel-dra-mock/gpus.json"

// Beside returns where the description lies for a tool at exe, which is in the driver root's
// usr/bin: on the host, and in a container, whose mounts put both at the same place under /.
func Beside(exe string) string {
	return filepath.Join(filepath.Dir(exe), "..", "..", Path)
}

// Machine is the content of the file.
type Machine struct {
	// DriverVersion is what NVML's SystemGetDriverVersion says, "570.124.06".
	DriverVersion string `json:"driverVersion"`
	// CUDAVersion is the CUDA driver API version, as NVML's SystemGetCudaDriverVersion says
	// (12080 for 12.8).
	CUDAVersion int `json:"cudaVersion"`
	// GPUs are the machine's GPUs by minor number.
	GPUs []GPU `json:"gpus"`
}

// GPU is one GPU. A lost GPU (fallen off the bus) keeps its minor number and PCI address, which
// the kernel driver still knows; NVML answers nothing else for it.
type GPU struct {
	Minor     int    `json:"minor"`
	UUID      string `json:"uuid,omitempty"`
	Name      string `json:"name,omitempty"`
	MemoryMiB uint64 `json:"memoryMiB,omitempty"`
	// PCIBusID is NVML's form, "00000000:1B:00.0".
	PCIBusID string `json:"pciBusID"`
	Lost     bool   `json:"lost,omitempty"`
}

// Validate refuses a description the tools could not answer from: GPUs without a bus ID or
// UUID, or two GPUs with one minor number.
func (m *Machine) Validate() error {
	seen := map[int]bool{}
	for _, g := range m.GPUs {
		switch {
		case g.Minor < 0:
			return fmt.Errorf("GPU %s: negative minor number %d", g.PCIBusID, g.Minor)
		case seen[g.Minor]:
			return fmt.Errorf("two GPUs with minor number %d", g.Minor)
		case g.PCIBusID == "":
			return fmt.Errorf("GPU with minor number %d has no PCI bus ID", g.Minor)
		case !g.Lost && g.UUID == "":
			return fmt.Errorf("GPU %s has no UUID", g.PCIBusID)
		}
		seen[g.Minor] = true
	}
	return nil
}

// Encode returns the file's content: GPUs sorted by minor number, so that one machine always
// gives the same bytes.
func (m *Machine) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("mock machine: %w", err)
	}
	c := *m
	c.GPUs = slices.Clone(m.GPUs)
	slices.SortFunc(c.GPUs, func(a, b GPU) int { return a.Minor - b.Minor })
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ErrMissing is returned by Read for a description that does not exist: the tools' analogue of
// a node whose driver is not loaded.
var ErrMissing = errors.New("mock machine description missing")

// Read reads and checks the description at path.
func Read(path string) (*Machine, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrMissing, path)
	}
	if err != nil {
		return nil, err
	}
	var m Machine
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("mock machine description %s: %w", path, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("mock machine description %s: %w", path, err)
	}
	return &m, nil
}
