//go:build e2e

package schedbench

import (
	"context"
	"fmt"
	"os"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/mig"
	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// model is a kind of node and the one-device claim each benchmark pod makes on it. The node's
// devices come from the plugin's own code on a mock backend: the backend enumerates them, the
// plugin's options (dynamic MIG, its profile choice, consumable memory) shape them, and
// pkg/slices builds the pool the plugin hands to the kubelet plugin helper.
type model struct {
	name    string
	backend string
	profile string
	driver  string
	// dynamicMIG applies --dynamic-mig; migProfiles is --mig-profiles (nil: the plugin's
	// default).
	dynamicMIG  bool
	migProfiles []string
	// staticMIG makes every GPU in MIG mode hold seven 1g.10gb MIG devices before the node is
	// enumerated, as an operator with mig-parted would.
	staticMIG bool
	// consumableMemory is --consumable-memory.
	consumableMemory bool
	// claim is the pods' claim.
	claim resourceapi.DeviceClaim
}

func oneDevice(class string, selectors ...string) resourceapi.DeviceClaim {
	return framework.DeviceClaim("dev", class, 1, selectors, "")
}

const migProfileSelector = `device.attributes["gpu.accel-dra.io"].profile == "1g.10gb"`

// models are the device models of docs/scheduling-benchmark.md, whole GPUs first: the others'
// throughput is reported as a ratio to it.
func models() []model {
	memory := oneDevice(framework.GPUDriver)
	memory.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("10Gi")}}
	return []model{
		{name: "gpu", backend: backend.Mock, profile: "h100-8x-2numa", driver: framework.GPUDriver, claim: oneDevice(framework.GPUDriver)},
		{name: "mig-static", backend: backend.Mock, profile: "h100-8x-mig", driver: framework.GPUDriver, staticMIG: true, claim: oneDevice(framework.MIGClass, migProfileSelector)},
		{name: "mig-dynamic", backend: backend.Mock, profile: "h100-8x-mig", driver: framework.GPUDriver, dynamicMIG: true, claim: oneDevice(framework.MIGClass, migProfileSelector)},
		// A cluster that asks for 1g and half GPUs and says so with --mig-profiles.
		{name: "mig-dynamic-chosen", backend: backend.Mock, profile: "h100-8x-mig", driver: framework.GPUDriver, dynamicMIG: true, migProfiles: []string{"1g.10gb", "3g.40gb"}, claim: oneDevice(framework.MIGClass, migProfileSelector)},
		{name: "memory", backend: backend.Mock, profile: "h100-8x-2numa", driver: framework.GPUDriver, consumableMemory: true, claim: memory},
		{name: "npu", backend: backend.NPUMock, profile: "ascend910b-8x", driver: framework.NPUDriver, claim: oneDevice(framework.NPUDriver)},
		// Topology (docs/device-attributes.md): four GPUs per pod on NVLink nodes, without a
		// constraint (what four GPUs cost by themselves) and with matchAttribute on the aligned
		// group of 4, on an NVSwitch node (every quad is a group) and on a hybrid cube mesh
		// (two of its 70 quads are).
		{name: "gpu-4", backend: backend.Mock, profile: "h100-8x-nvswitch", driver: framework.GPUDriver, claim: fourGPUs("")},
		{name: "nvlink-4", backend: backend.Mock, profile: "h100-8x-nvswitch", driver: framework.GPUDriver, claim: fourGPUs(nvlinkGroup4)},
		{name: "nvlink-4-cube", backend: backend.Mock, profile: "v100-8x-cube-mesh", driver: framework.GPUDriver, claim: fourGPUs(nvlinkGroup4)},
	}
}

const nvlinkGroup4 = framework.GPUDriver + "/" + string(slices.AttrNVLinkGroup4)

// fourGPUs is a claim for four whole GPUs, all with the same value of matchAttribute if set.
func fourGPUs(matchAttribute string) resourceapi.DeviceClaim {
	return framework.DeviceClaim("dev", framework.GPUDriver, 4, nil, matchAttribute)
}

// devicesPerPod is how many devices a pod's claim takes.
func (m model) devicesPerPod() int {
	n := 0
	for _, r := range m.claim.Requests {
		if r.Exactly != nil {
			n += int(r.Exactly.Count)
		}
	}
	return max(n, 1)
}

// pool builds the node's pool as the plugin does (pkg/nodeplugin: enumerate, dynamic MIG,
// slices.Build with the sharing options).
func (m model) pool(ctx context.Context, node, mockDir string) (resourceslice.DriverResources, int, error) {
	be, err := backend.New(ctx, backend.Options{Name: m.backend, MockProfile: m.profile, NodeName: node, MockDir: mockDir})
	if err != nil {
		return resourceslice.DriverResources{}, 0, err
	}
	defer func() { _ = be.Close() }()
	inv, err := be.Enumerate(ctx)
	if err != nil {
		return resourceslice.DriverResources{}, 0, err
	}
	if m.staticMIG {
		if inv, err = partition(ctx, be, inv); err != nil {
			return resourceslice.DriverResources{}, 0, err
		}
	}
	if m.dynamicMIG {
		profiles := m.migProfiles
		if profiles == nil {
			profiles = nodeplugin.NewOptions().MIGProfiles
		}
		if inv, err = mig.Dynamic(inv, mig.WithProfiles(profiles)); err != nil {
			return resourceslice.DriverResources{}, 0, err
		}
	}
	var opts []slices.Option
	if m.consumableMemory {
		opts = append(opts, slices.WithConsumableMemory())
	}
	res := slices.Build(inv, node, opts...)
	if len(res.Rejected) > 0 {
		return resourceslice.DriverResources{}, 0, fmt.Errorf("model %s: devices rejected: %+v", m.name, res.Rejected)
	}
	return res.Resources, len(res.Published), nil
}

// partition creates seven 1g.10gb MIG devices on every GPU in MIG mode through the backend's
// own MIG calls, and enumerates the node again.
func partition(ctx context.Context, be device.Backend, inv *device.Inventory) (*device.Inventory, error) {
	p, ok := be.(device.Partitioner)
	if !ok {
		return nil, fmt.Errorf("backend cannot create MIG instances")
	}
	for _, parent := range inv.MIGParents {
		for _, pr := range parent.Profiles {
			if pr.Name != "1g.10gb" {
				continue
			}
			for _, pl := range pr.Placements {
				gi, err := p.CreateGI(ctx, parent.GPU.UUID, pr.ID, pl)
				if err != nil {
					return nil, fmt.Errorf("%s: 1g.10gb at %d: %w", parent.GPU.Name, pl.Start, err)
				}
				if _, err := p.CreateCI(ctx, parent.GPU.UUID, gi); err != nil {
					return nil, err
				}
			}
		}
	}
	return be.Enumerate(ctx)
}

// selected returns the models named in $SCHED_BENCH_MODELS (comma-separated), or all.
func selected() ([]model, error) {
	all := models()
	env := strings.TrimSpace(os.Getenv(envModels))
	if env == "" {
		return all, nil
	}
	var out []model
next:
	for _, name := range strings.Split(env, ",") {
		for _, m := range all {
			if m.name == strings.TrimSpace(name) {
				out = append(out, m)
				continue next
			}
		}
		return nil, fmt.Errorf("%s: unknown model %q", envModels, name)
	}
	return out, nil
}
