//go:build e2e

package kind

import (
	"context"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	accelslices "github.com/accel-dra/accel-dra/pkg/slices"
)

// nvlinkProfile is a machine whose NVLink wiring makes a constraint decisive: H100 NVL cards
// bridged in pairs (gpu-0+gpu-1, gpu-2+gpu-3), no NVLink between the pairs.
const nvlinkProfile = "h100-nvl-4x"

// testNVLinkPair: on a node of bridged pairs with gpu-1 taken, a claim for two GPUs with
// matchAttribute nvlinkGroup2 gets the one whole pair left, and its container (started by the
// real runtime from the claim's CDI spec) has exactly those two GPUs. Two GPUs without the
// constraint could be gpu-0 with gpu-2 or gpu-3, which share no NVLink.
func (e *env) testNVLinkPair(ctx context.Context, t *testing.T) {
	s, err := nvmlmock.NewServer(nvlinkProfile, e.node)
	if err != nil {
		t.Fatal(err)
	}
	peers := s.NVLinkPeers()
	// What the mock's wiring says, so that the assertion below follows the machine and not
	// the other way round.
	if !peers[[2]string{"gpu-2", "gpu-3"}] || peers[[2]string{"gpu-0", "gpu-2"}] || peers[[2]string{"gpu-1", "gpu-2"}] {
		t.Fatalf("%s is not wired in pairs {0,1} {2,3}: %v", nvlinkProfile, peers)
	}

	e.helmMock(ctx, t, true, "--set", "mock.gpuProfile="+nvlinkProfile)
	e.waitForGPUs(ctx, t, 4)

	const holder = "nvlink-holder"
	e.runClaimPod(ctx, t, holder, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["` + gpuClass + `"].index == 1`}}},
	}}}}, gpuScript)
	e.verifyGPUPodRunning(ctx, t, holder, []string{"gpu-1"})

	const pair = "nvlink-pair"
	group := resourceapi.FullyQualifiedName(gpuClass + "/" + string(accelslices.AttrNVLinkGroup2))
	e.runClaimPod(ctx, t, pair, resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2,
		}}},
		Constraints: []resourceapi.DeviceConstraint{{Requests: []string{"dev"}, MatchAttribute: &group}},
	}, gpuScript)
	e.verifyGPUPod(ctx, t, pair, 2, func(devs []allocatedDevice) {
		var names []string
		for _, d := range devs {
			names = append(names, d.name)
		}
		slices.Sort(names)
		if !peers[[2]string{names[0], names[1]}] {
			t.Errorf("the NVLink pair claim got %v, which share no NVLink on %s", names, nvlinkProfile)
		}
		if !slices.Equal(names, []string{"gpu-2", "gpu-3"}) {
			t.Errorf("the NVLink pair claim got %v, want the one whole pair left, [gpu-2 gpu-3]", names)
		}
	})
	e.deletePod(ctx, t, holder)
}

// verifyGPUPodRunning waits for a gpuScript pod to have run its script and checks that its
// claim got exactly the named devices, leaving it running.
func (e *env) verifyGPUPodRunning(ctx context.Context, t *testing.T, name string, want []string) {
	t.Helper()
	if out := e.podOutput(ctx, ns, name, 3*time.Minute); !hasSection(out, "end") {
		t.Fatalf("the script of pod %s did not finish:\n%s", name, out)
	}
	var got []string
	for _, d := range e.allocated(ctx, t, name) {
		got = append(got, d.name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("pod %s got %v, want %v", name, got, want)
	}
}

func hasSection(out, name string) bool {
	_, ok := sections(out)[name]
	return ok
}
