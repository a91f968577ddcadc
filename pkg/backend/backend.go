// Package backend picks a device backend by name, so that main wires flags to one call and
// the rest of the driver sees only device.Backend.
package backend

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/backend/npu"
	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// Backend names.
const (
	// NVML enumerates NVIDIA GPUs through libnvidia-ml.
	NVML = "nvml"
	// Mock runs the NVML backend against a mock GPU machine (see nvmlmock.Profiles).
	Mock = "mock"
	// NPU enumerates Ascend NPUs from sysfs and devfs.
	NPU = "npu"
	// NPUMock runs the NPU backend against a generated Ascend tree (see npumock.Profiles).
	NPUMock = "npu-mock"
)

// Defaults.
const (
	DefaultSysRoot = "/sys"
	DefaultDevRoot = "/dev"
	// DefaultMockProfile is the GPU mock: eight H100s over two NUMA nodes exercise pcieRoot and
	// numaNode alignment, which single-socket profiles cannot.
	DefaultMockProfile = "h100-8x-2numa"
	// DefaultNPUMockProfile is the NPU mock, eight 910Bs over two NUMA nodes for the same reason.
	DefaultNPUMockProfile = "ascend910b-8x"
)

// Options selects and configures a backend. Zero fields take the defaults documented on each.
type Options struct {
	// Name is one of Names(): nvml, mock, npu, npu-mock.
	Name string
	// MockProfile is the profile of mock and npu-mock; default DefaultMockProfile for mock and
	// DefaultNPUMockProfile for npu-mock. Other backends ignore it.
	MockProfile string
	// NodeName is the Kubernetes node name; mock, npu and npu-mock need it for stable UUIDs.
	NodeName string
	// SysRoot and DevRoot are where the host's /sys and /dev are visible (defaults /sys and
	// /dev), for nvml and npu.
	SysRoot, DevRoot string
	// NVIDIAProcRoot is where nvml reads the host's /proc/devices and
	// /proc/driver/nvidia/capabilities, for the MIG devices' caps nodes; default
	// nvml.DefaultProcRoot. The mock has its own.
	NVIDIAProcRoot string
	// NVIDIADriverRoot is the NVIDIA driver root whose libnvidia-ml.so.1 nvml loads, by its full
	// path (nvml.FindLibrary); empty: the library by the loader's search, for a container that
	// the runtime gave the library. The mock, given one, reports the version of the library it
	// finds there (nvmlmock.WithDriverRoot), as NVML reports the version of the library loaded;
	// without one, its profile's.
	NVIDIADriverRoot string
	// NVIDIAHostDriverRoot is NVIDIADriverRoot as the host sees it ("": the same path), the
	// host path of device nodes found under its dev/ (the GPU operator's layout: nvml's
	// WithDriverRoot).
	NVIDIAHostDriverRoot string
	// MockDir is where npu-mock generates its tree; default <os.TempDir()>/accel-dra-npu-mock/
	// <NodeName>, one per node so that nodes sharing a host do not rewrite each other's tree.
	// Both mocks read injected faults from its health.FaultDir (docs/health.md); the mock
	// injects none without it.
	// The mock keeps its MIG instances there (nvmlmock.StateFileName) if it is set.
	MockDir string
	// AscendDriverRoot is where the npu backend finds the Ascend driver's version.info, under
	// npu.DefaultDriverVersionFile; empty means "/".
	AscendDriverRoot string
}

// Names returns the backend names, sorted.
func Names() []string {
	names := []string{NVML, Mock, NPU, NPUMock}
	sort.Strings(names)
	return names
}

// New returns the backend o names. An unknown name is an error listing the valid ones.
func New(ctx context.Context, o Options) (device.Backend, error) {
	if o.SysRoot == "" {
		o.SysRoot = DefaultSysRoot
	}
	if o.DevRoot == "" {
		o.DevRoot = DefaultDevRoot
	}
	switch o.Name {
	case Mock:
		if o.MockProfile == "" {
			o.MockProfile = DefaultMockProfile
		}
	case NPUMock:
		if o.MockProfile == "" {
			o.MockProfile = DefaultNPUMockProfile
		}
		if o.MockDir == "" && o.NodeName != "" {
			o.MockDir = filepath.Join(os.TempDir(), "accel-dra-npu-mock", o.NodeName)
		}
	case NVML, NPU:
		o.MockProfile, o.MockDir = "", ""
	default:
		return nil, fmt.Errorf("unknown device backend %q: valid backends are %s", o.Name, strings.Join(Names(), ", "))
	}
	if o.Name != NVML && o.Name != Mock {
		o.NVIDIADriverRoot, o.NVIDIAHostDriverRoot = "", ""
	}
	if o.NodeName == "" && o.Name != NVML {
		return nil, fmt.Errorf("device backend %s: node name is required", o.Name)
	}
	klog.FromContext(ctx).Info("Starting device backend", "backend", o.Name, "mockProfile", o.MockProfile,
		"sysRoot", o.SysRoot, "devRoot", o.DevRoot, "nvidiaProcRoot", o.NVIDIAProcRoot, "nvidiaDriverRoot", o.NVIDIADriverRoot, "nvidiaHostDriverRoot", o.NVIDIAHostDriverRoot, "mockDir", o.MockDir)

	// Each branch returns its error before converting, so that a typed nil never becomes a
	// non-nil device.Backend.
	switch o.Name {
	case NVML:
		var lib string
		if o.NVIDIADriverRoot != "" {
			var err error
			if lib, err = nvml.FindLibrary(o.NVIDIADriverRoot); err != nil {
				return nil, err
			}
		}
		b, err := nvml.NewFromSystem(ctx, lib, o.SysRoot, o.DevRoot, nvml.WithProc(os.DirFS(cmp.Or(o.NVIDIAProcRoot, nvml.DefaultProcRoot))),
			nvml.WithDriverRoot(o.NVIDIADriverRoot, o.NVIDIAHostDriverRoot))
		if err != nil {
			return nil, err
		}
		return b, nil
	case Mock:
		var opts []nvmlmock.Option
		root, hostRoot := o.NVIDIADriverRoot, o.NVIDIAHostDriverRoot
		if root != "" {
			opts = append(opts, nvmlmock.WithDriverRoot(root))
		}
		if o.MockDir != "" {
			opts = append(opts, nvmlmock.WithFaultDir(filepath.Join(o.MockDir, health.FaultDir)))
			// MIG instances outlive the plugin on a real GPU; on the mock they live here.
			opts = append(opts, nvmlmock.WithStateDir(o.MockDir))
			if root == "" {
				// The mock installs its own driver, into the root the plugin generates under
				// MockDir (nvmlmock.GeneratedDriverRoot), and so makes the nodes as a driver
				// container does: in that root's dev/, which the host sees at the same path.
				root, hostRoot = nvmlmock.GeneratedDriverRoot(o.MockDir), ""
				opts = append(opts, nvmlmock.WithDevNodes(filepath.Join(root, "dev")))
			}
		}
		// The machine's nodes are files on this host, found only where a layout put them.
		opts = append(opts, nvmlmock.WithHost(o.DevRoot, root, hostRoot))
		return nvmlmock.New(o.MockProfile, o.NodeName, opts...)
	case NPU:
		b, err := npu.New(npu.Config{SysRoot: o.SysRoot, DevRoot: o.DevRoot, NodeName: o.NodeName, DriverVersionFile: filepath.Join(cmp.Or(o.AscendDriverRoot, "/"), npu.DefaultDriverVersionFile)})
		if err != nil {
			return nil, err
		}
		return b, nil
	default: // NPUMock
		return npumock.New(o.MockDir, o.MockProfile, o.NodeName)
	}
}
