package otherdrivers

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

const (
	node  = "node-a"
	own   = "gpu.accel-dra.io"
	nv    = "gpu.nvidia.com"
	uuid0 = "GPU-00000000-0000-0000-0000-000000000000"
	uuid1 = "GPU-11111111-1111-1111-1111-111111111111"
	mig1  = "MIG-11111111-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
)

func dev(name string, attrs ...string) resourceapi.Device {
	d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
	for i := 0; i+1 < len(attrs); i += 2 {
		d.Attributes[resourceapi.QualifiedName(attrs[i])] = resourceapi.DeviceAttribute{StringValue: ptr.To(attrs[i+1])}
	}
	return d
}

func slice(name, driver, nodeName string, devs ...resourceapi.Device) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, Pool: resourceapi.ResourcePool{Name: nodeName, ResourceSliceCount: 1}, Devices: devs}}
	if nodeName != "" {
		s.Spec.NodeName = ptr.To(nodeName)
	}
	return s
}

func TestScan(t *testing.T) {
	for _, tc := range []struct {
		name string
		list []*resourceapi.ResourceSlice
		want Claimed
	}{
		{name: "own driver's slices name nothing", list: []*resourceapi.ResourceSlice{slice("s", own, node, dev("gpu-0", "uuid", uuid0))}, want: Claimed{}},
		{name: "NVIDIA's GPU", list: []*resourceapi.ResourceSlice{slice("s", nv, node, dev("gpu-0", "uuid", uuid0))}, want: Claimed{uuid0: {nv}}},
		{
			name: "NVIDIA's MIG device names its GPU",
			list: []*resourceapi.ResourceSlice{slice("s", nv, node, dev("gpu-1-mig-0", "uuid", mig1, "parentUUID", uuid1))},
			want: Claimed{mig1: {nv}, uuid1: {nv}},
		},
		{name: "a qualified name in another domain", list: []*resourceapi.ResourceSlice{slice("s", "x.example.com", node, dev("d", "gpu.nvidia.com/uuid", uuid0))}, want: Claimed{uuid0: {"x.example.com"}}},
		{
			name: "two drivers, sorted",
			list: []*resourceapi.ResourceSlice{slice("s", nv, node, dev("gpu-0", "uuid", uuid0)), slice("t", "b.example.com", node, dev("g", "uuid", uuid0))},
			want: Claimed{uuid0: {"b.example.com", nv}},
		},
		{name: "another node", list: []*resourceapi.ResourceSlice{slice("s", nv, "node-b", dev("gpu-0", "uuid", uuid0))}, want: Claimed{}},
		{name: "not node-local", list: []*resourceapi.ResourceSlice{slice("s", nv, "", dev("gpu-0", "uuid", uuid0))}, want: Claimed{}},
		{
			name: "ComputeDomain channels name no UUID",
			list: []*resourceapi.ResourceSlice{slice("s", "compute-domain.nvidia.com", node, dev("channel-0", "type", "channel"), dev("daemon-0", "type", "daemon"))},
			want: Claimed{},
		},
		{name: "an empty UUID", list: []*resourceapi.ResourceSlice{slice("s", nv, node, dev("gpu-0", "uuid", ""))}, want: Claimed{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Scan(tc.list, own, node)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithhold(t *testing.T) {
	build := func() resourceslice.DriverResources {
		return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node: {Slices: []resourceslice.Slice{
			{Devices: []resourceapi.Device{dev("gpu-0", "uuid", uuid0), dev("gpu-1", "uuid", uuid1)}},
			// Dynamic MIG: the GPU in MIG mode and a partition without a UUID of its own yet.
			{Devices: []resourceapi.Device{dev("gpu-1-mig-1g10gb-0", "parentUUID", uuid1)}},
		}}}}
	}
	res := build()
	for _, tc := range []struct {
		name     string
		claimed  Claimed
		devices  []string
		withheld []Withheld
	}{
		{name: "nothing claimed", devices: []string{"gpu-0", "gpu-1", "gpu-1-mig-1g10gb-0"}},
		{name: "another GPU", claimed: Claimed{"GPU-ffff": {nv}}, devices: []string{"gpu-0", "gpu-1", "gpu-1-mig-1g10gb-0"}},
		{name: "gpu-0", claimed: Claimed{uuid0: {nv}}, devices: []string{"gpu-1", "gpu-1-mig-1g10gb-0"}, withheld: []Withheld{{"gpu-0", uuid0, []string{nv}}}},
		{
			name: "gpu-1 takes its partitions along", claimed: Claimed{uuid1: {nv}}, devices: []string{"gpu-0"},
			withheld: []Withheld{{"gpu-1", uuid1, []string{nv}}, {"gpu-1-mig-1g10gb-0", uuid1, []string{nv}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, withheld := Withhold(res, tc.claimed)
			var devices []string
			for _, s := range out.Pools[node].Slices {
				for _, d := range s.Devices {
					devices = append(devices, d.Name)
				}
			}
			if diff := cmp.Diff(tc.devices, devices); diff != "" {
				t.Errorf("published (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.withheld, withheld); diff != "" {
				t.Errorf("withheld (-want +got):\n%s", diff)
			}
			if len(out.Pools[node].Slices) != 2 {
				t.Errorf("%d slices, want the 2 the pool had", len(out.Pools[node].Slices))
			}
			if diff := cmp.Diff(build(), res); diff != "" {
				t.Errorf("Withhold changed its input (-before +after):\n%s", diff)
			}
		})
	}
}

// TestWatch: the first call comes with what is there at start, later ones with each change,
// and a change of the plugin's own slices or of another node's calls nothing.
func TestWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kube := fake.NewClientset(slice("nv-0", nv, node, dev("gpu-0", "uuid", uuid0)))
	calls := make(chan Claimed, 10)
	if err := Watch(ctx, kube, own, node, func(_ context.Context, c Claimed) { calls <- c }); err != nil {
		t.Fatal(err)
	}
	next := func(want Claimed) {
		t.Helper()
		select {
		case got := <-calls:
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		case <-ctx.Done():
			t.Fatalf("no call; want %v", want)
		}
	}
	next(Claimed{uuid0: {nv}})
	// The plugin's own slice names no other driver: no call. The next change shows it.
	if _, err := kube.ResourceV1().ResourceSlices().Create(ctx, slice("own", own, node, dev("gpu-1", "uuid", uuid1)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.ResourceV1().ResourceSlices().Create(ctx, slice("nv-1", nv, node, dev("gpu-1", "uuid", uuid1)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(Claimed{uuid0: {nv}, uuid1: {nv}})
	for _, name := range []string{"nv-0", "nv-1"} {
		if err := kube.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// One or two calls, depending on how the deletions were coalesced; the last is empty.
	for {
		select {
		case got := <-calls:
			if len(got) == 0 {
				return
			}
		case <-ctx.Done():
			t.Fatal("no call after NVIDIA's slices went")
		}
	}
}
