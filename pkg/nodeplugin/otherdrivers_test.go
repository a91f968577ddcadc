package nodeplugin

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/pkg/otherdrivers"
)

type recordedEvents []string

func (r *recordedEvents) Warning(reason, message string) {
	*r = append(*r, "Warning "+reason+": "+message)
}
func (r *recordedEvents) Normal(reason, message string) {
	*r = append(*r, "Normal "+reason+": "+message)
}

func published(res resourceslice.DriverResources) []string {
	var out []string
	for _, p := range res.Pools {
		for _, s := range p.Slices {
			for _, d := range s.Devices {
				out = append(out, d.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestYielding: devices another driver names are never published, whichever of the first
// publish, a later change of the other driver's slices or a health publish comes first; the
// Node hears once what was left out, what to do, and when the devices are back.
func TestYielding(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	gpu := func(name, uuid string) resourceapi.Device {
		return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: ptr.To(uuid)}}}
	}
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node-a": {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{gpu("gpu-0", "GPU-0"), gpu("gpu-1", "GPU-1")}}}}}}
	var events recordedEvents
	y := &yielding{driverName: "gpu.accel-dra.io", resources: func() resourceslice.DriverResources { return res }, events: &events}
	var publishes [][]string
	publish := func(_ context.Context, r resourceslice.DriverResources) error {
		publishes = append(publishes, published(r))
		return nil
	}

	nvidia0 := otherdrivers.Claimed{"GPU-0": {"gpu.nvidia.com"}}
	y.set(ctx, nvidia0) // the watch's first call, before anything is published
	if got := published(y.Resources(ctx)); !slices.Equal(got, []string{"gpu-1"}) {
		t.Fatalf("first publish %v, want gpu-1 only", got)
	}
	want := "Warning DevicesServedByAnotherDriver: another DRA driver's ResourceSlices on this node name gpu-0 (GPU-0: gpu.nvidia.com); gpu.accel-dra.io does not publish them while it does"
	if len(events) != 1 || !strings.HasPrefix(events[0], want) || !strings.Contains(events[0], "docs/migrate-from-nvidia.md") {
		t.Fatalf("events %q, want one starting %q and saying what to do", events, want)
	}
	// A change between the first slices and the helper's start is published at once.
	y.set(ctx, otherdrivers.Claimed{"GPU-0": {"gpu.nvidia.com"}, "GPU-1": {"gpu.nvidia.com"}})
	if !y.start(publish) {
		t.Fatal("start does not say that the first slices are stale")
	}
	if err := y.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	// Health publishes with the same view; the same withheld set is not reported again.
	if err := y.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	y.set(ctx, nvidia0)
	y.set(ctx, nil) // NVIDIA's driver left the node
	if want := [][]string{nil, nil, {"gpu-1"}, {"gpu-0", "gpu-1"}}; !slices.EqualFunc(publishes, want, slices.Equal[[]string]) {
		t.Errorf("publishes %q, want %q", publishes, want)
	}
	if len(events) != 4 || events[3] != "Normal DevicesPublishedAgain: gpu.accel-dra.io publishes gpu-0 again: no other DRA driver's ResourceSlices on this node name them any more" {
		t.Errorf("events:\n%s", strings.Join(events, "\n"))
	}
}
