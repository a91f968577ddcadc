package nvmlmock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// computeModeNames are nvidia-smi's names of the compute modes, as the state file records them.
var computeModeNames = map[nvml.ComputeMode]string{
	nvml.COMPUTEMODE_DEFAULT:           "DEFAULT",
	nvml.COMPUTEMODE_EXCLUSIVE_THREAD:  "EXCLUSIVE_THREAD",
	nvml.COMPUTEMODE_PROHIBITED:        "PROHIBITED",
	nvml.COMPUTEMODE_EXCLUSIVE_PROCESS: "EXCLUSIVE_PROCESS",
}

// setComputeModeFuncs makes d's compute mode settable. The mode is kept with the MIG state (in
// the state directory, if there is one), so that tests can read what the plugin set
// (ComputeModes) and a restarted plugin finds it as it would on a GPU.
func (s *Server) setComputeModeFuncs(d *mock.Device) {
	d.SetComputeModeFunc = func(m nvml.ComputeMode) nvml.Return {
		name, ok := computeModeNames[m]
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return ret
		}
		err := s.withMIG(func(st *migState) bool {
			if st.ComputeModes == nil {
				st.ComputeModes = map[string]string{}
			}
			st.ComputeModes[uuid] = name
			return true
		})
		if err != nil {
			return nvml.ERROR_UNKNOWN
		}
		return nvml.SUCCESS
	}
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return 0, ret
		}
		mode := nvml.COMPUTEMODE_DEFAULT
		err := s.withMIG(func(st *migState) bool {
			for m, name := range computeModeNames {
				if st.ComputeModes[uuid] == name {
					mode = m
				}
			}
			return false
		})
		if err != nil {
			return 0, nvml.ERROR_UNKNOWN
		}
		return mode, nvml.SUCCESS
	}
}

// ComputeModes reads the compute modes set on the GPUs of the mock whose state directory is dir
// (the plugin's --mock-dir), by UUID, as nvidia-smi names them; GPUs never set are absent.
func ComputeModes(dir string) (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, StateFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	var st migState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("mock state %s: %w", filepath.Join(dir, StateFileName), err)
	}
	if st.ComputeModes == nil {
		st.ComputeModes = map[string]string{}
	}
	return st.ComputeModes, nil
}
