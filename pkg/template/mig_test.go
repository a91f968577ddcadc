package template

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/mig"
	kslices "github.com/accel-dra/accel-dra/pkg/slices"
)

// TestBuildDropsMIGIdentity builds templates from the slices the plugin publishes for MIG nodes
// (static MIG devices, and dynamic partitions with counters) and checks that no GPU or MIG UUID
// of the representative node reaches the template, while matchAttribute on parentUUID still
// groups partitions by GPU.
func TestBuildDropsMIGIdentity(t *testing.T) {
	uuidRE := regexp.MustCompile(`(GPU|MIG)-[0-9a-f]{8}-`)
	for _, tc := range []struct {
		profile string
		dynamic bool
	}{
		{"mig-mixed", false},
		{"mig-mixed", true},
		{"a100-8x-mig", true},
	} {
		t.Run(fmt.Sprintf("%s/dynamic=%v", tc.profile, tc.dynamic), func(t *testing.T) {
			s, err := nvmlmock.NewServer(tc.profile, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			inv, err := s.Backend().Enumerate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tc.dynamic {
				if inv, err = mig.Dynamic(inv); err != nil {
					t.Fatal(err)
				}
			}
			node := "node-a"
			var in []resourceapi.ResourceSlice
			for _, sl := range kslices.Build(inv, node).Resources.Pools[node].Slices {
				in = append(in, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.accel-dra.io", NodeName: &node,
					Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: sl.Devices, SharedCounters: sl.SharedCounters}})
			}
			for i := range in {
				in[i].Spec.Pool.ResourceSliceCount = int64(len(in))
			}
			if !uuidRE.Match(mustJSON(t, in)) {
				t.Fatal("fixture has no UUIDs")
			}
			tmpl := mustBuild(t, in, BuildOptions{})
			if m := uuidRE.Find(mustJSON(t, tmpl)); m != nil {
				t.Errorf("template keeps the node's UUID %q", m)
			}
			// Devices that shared a parent GPU still share one placeholder, and only they.
			parents := func(devs []resourceapi.Device) string {
				return partition(devicesOf(devs), kslices.AttrParentUUID)
			}
			var inDevs []resourceapi.Device
			for _, sl := range in {
				inDevs = append(inDevs, sl.Spec.Devices...)
			}
			if want, got := parents(inDevs), parents(tmpl.Drivers[0].Devices); got != want || want == "" {
				t.Errorf("parentUUID grouping: template %q, node %q", got, want)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func devicesOf(devs []resourceapi.Device) map[string]resourceapi.Device {
	m := make(map[string]resourceapi.Device, len(devs))
	for _, d := range devs {
		m[d.Name] = d
	}
	return m
}
