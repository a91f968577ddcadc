package accelctl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/accel-dra/accel-dra/pkg/slices/slicestest"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// topologyClaims are the constrained claims of docs/examples/topology-*.yaml, by file.
var topologyClaims = []string{"topology-4-connected", "topology-bridge-pair", "topology-island-8", "topology-prefer-nvlink", "topology-pairwise-list"}

// TestTopologyAgreement: for a group at zero whose template the publisher took from a real node
// of each NVLink profile, Simulate's verdict on the template equals the scheduler's allocator on
// that real node, with the same devices, for every constrained claim of docs/examples; and
// both follow the machine's wiring (want). The plugin publishes nvlinkCliques only where the
// API server keeps list values, and kube-scheduler 1.37 matches on them only with
// DRAListTypeAttributes, which the default gates leave off: so with the default gates the
// pairwise-list claim fits nowhere, on the template or on the node, and with the gate (lists,
// given to Simulate and the node's allocator as --feature-gates would) on the cube mesh and
// NVSwitch nodes.
func TestTopologyAgreement(t *testing.T) {
	for _, lists := range []bool{false, true} {
		t.Run(fmt.Sprintf("lists=%v", lists), func(t *testing.T) {
			features := DefaultFeatures()
			if lists {
				var err error
				if features, err = ParseFeatureGates("DRAListTypeAttributes=true"); err != nil {
					t.Fatal(err)
				}
			}
			topologyAgreement(t, lists, features)
		})
	}
}

func topologyAgreement(t *testing.T, lists bool, features structured.Features) {
	for _, tc := range []struct {
		profile string
		// want says which claims fit an empty node of the profile.
		want map[string]bool
	}{
		{profile: "h100-nvl-4x", want: map[string]bool{"topology-bridge-pair": true, "topology-prefer-nvlink": true}},
		{profile: "v100-8x-cube-mesh", want: map[string]bool{"topology-4-connected": true, "topology-bridge-pair": true, "topology-island-8": true, "topology-prefer-nvlink": true}},
		{profile: "h100-8x-nvswitch", want: map[string]bool{"topology-4-connected": true, "topology-bridge-pair": true, "topology-island-8": true, "topology-prefer-nvlink": true}},
		// No NVLink: only the prioritized list's fallback fits.
		{profile: "l40s-4x", want: map[string]bool{"topology-prefer-nvlink": true}},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			const nodeName = "node-a"
			inv, _, err := slicestest.MockInventory(tc.profile, nodeName)
			if err != nil {
				t.Fatal(err)
			}
			real, err := slicestest.NodeSlices(inv, gpuDriver, nodeName, lists)
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := template.Build(real, template.BuildOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ann := groupAnnotations(t, tmpl, "96", "1000Gi")

			realPtrs := make([]*resourceapi.ResourceSlice, len(real))
			for i := range real {
				realPtrs[i] = &real[i]
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
			for _, file := range topologyClaims {
				t.Run(file, func(t *testing.T) {
					data, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", file+".yaml"))
					if err != nil {
						t.Fatal(err)
					}
					objs, err := ParseObjects(data)
					if err != nil {
						t.Fatal(err)
					}
					claims, err := objs.ClaimsToAllocate()
					if err != nil {
						t.Fatal(err)
					}
					var sched Verdict
					if err := allocate(context.Background(), features, DefaultTimeout, &sched, node, realPtrs, []*resourceapi.DeviceClass{gpuClass()}, claims); err != nil {
						t.Fatal(err)
					}
					rep, err := Simulate(context.Background(), SimulateInput{Group: "g", Annotations: ann, Classes: []*resourceapi.DeviceClass{gpuClass()}, Claims: claims, Features: &features})
					if err != nil {
						t.Fatal(err)
					}
					sim := rep.Template
					if sim.Fits != sched.Fits || sim.Error || sched.Error {
						t.Errorf("simulate: fits %v (%s), the allocator on the real node: fits %v (%s)", sim.Fits, sim.Reason, sched.Fits, sched.Reason)
					}
					want := tc.want[file]
					if file == "topology-pairwise-list" {
						want = lists && tc.want["topology-4-connected"]
					}
					if sched.Fits != want {
						t.Errorf("the allocator on the real node: fits %v (%s), want %v", sched.Fits, sched.Reason, want)
					}
					if got, want := devicesOf(sim), devicesOf(sched); !slices.Equal(got, want) {
						t.Errorf("simulate allocates %v, the allocator on the real node %v", got, want)
					}
				})
			}
		})
	}
}

// devicesOf lists the "request: driver/device" of a verdict's allocations.
func devicesOf(v Verdict) []string {
	var out []string
	for _, a := range v.Allocations {
		out = append(out, fmt.Sprint(a.Devices))
	}
	return out
}
