package nodeplugin

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	ascendcdi "github.com/accel-dra/accel-dra/pkg/cdi/ascend"
	nvidiacdi "github.com/accel-dra/accel-dra/pkg/cdi/nvidia"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// commonEdits computes the node-common CDI edits of kind once, at start-up, so that prepare only
// copies them into a claim's spec. The mock backends generate a fake driver root in the mock
// directory first and run the same generators over it, so every test and the e2e exercise the
// code path of a real node.
func commonEdits(ctx context.Context, o *Options, be device.Backend, kind device.Kind) (*specs.ContainerEdits, error) {
	switch kind {
	case device.KindGPU:
		lib, ok := be.(interface{ Library() nvml.Interface })
		if !ok {
			return nil, fmt.Errorf("GPU backend %s does not expose its NVML library", o.Backend)
		}
		cfg := nvidiacdi.Config{NVML: lib.Library(), DriverRoot: o.NVIDIADriverRoot, HostDriverRoot: o.NVIDIAHostDriverRoot, HookPath: o.NVIDIACDIHookPath}
		if o.Backend == backend.Mock {
			version, ret := cfg.NVML.SystemGetDriverVersion()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("mock driver version: %v", ret)
			}
			cfg.DriverRoot, cfg.HostDriverRoot = filepath.Join(o.MockDir, "nvidia-driver-root"), ""
			if err := nvmlmock.WriteDriverRoot(cfg.DriverRoot, version); err != nil {
				return nil, err
			}
		}
		if cfg.DriverRoot == "" {
			klog.FromContext(ctx).Info("No --nvidia-driver-root: GPU containers get device nodes only and must get the driver another way")
			return nil, nil
		}
		return nvidiacdi.CommonEdits(ctx, cfg)
	case device.KindNPU:
		cfg := ascendcdi.Config{DriverRoot: o.AscendDriverRoot, HostDriverRoot: o.AscendHostDriverRoot, ExtraPaths: o.AscendDriverPaths}
		if o.Backend == backend.NPUMock {
			profile := o.MockProfile
			if profile == "" {
				profile = backend.DefaultNPUMockProfile
			}
			root, err := npumock.WriteDriverRoot(o.MockDir, profile)
			if err != nil {
				return nil, err
			}
			cfg.DriverRoot, cfg.HostDriverRoot = root, ""
		}
		if cfg.DriverRoot == "" {
			klog.FromContext(ctx).Info("No --ascend-driver-root: NPU containers get device nodes only and must get the driver another way")
			return nil, nil
		}
		return ascendcdi.CommonEdits(ctx, cfg)
	default:
		return nil, fmt.Errorf("no CDI edits for device kind %q", kind)
	}
}
