package nodeplugin

import (
	"context"
	"errors"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/compat/nvidia"
	"github.com/accel-dra/accel-dra/pkg/device"
	accelslices "github.com/accel-dra/accel-dra/pkg/slices"
)

// TestNVLinkCliquesKept: the list of NVLink cliques is published only where a dry run shows
// the server keeps list values; a server that drops them (DRAListTypeAttributes off) or a dry
// run that fails leaves it out, and a node whose GPUs have no clique asks nothing.
func TestNVLinkCliquesKept(t *testing.T) {
	for name, tc := range map[string]struct {
		profile string
		server  string // keep, drop or fail
		want    bool
		asked   bool
	}{
		"gate on":          {profile: "v100-8x-cube-mesh", server: "keep", want: true, asked: true},
		"gate off":         {profile: "v100-8x-cube-mesh", server: "drop", want: false, asked: true},
		"dry run fails":    {profile: "v100-8x-cube-mesh", server: "fail", want: false, asked: true},
		"no NVLink":        {profile: "l40s-4x", server: "keep", want: false, asked: false},
		"NVSwitch node on": {profile: "h100-8x-nvswitch", server: "keep", want: true, asked: true},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			be, err := nvmlmock.New(tc.profile, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			inv, err := be.Enumerate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			kube := fake.NewClientset()
			asked := false
			kube.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
				asked = true
				s := action.(k8stesting.CreateActionImpl).GetObject().(*resourceapi.ResourceSlice).DeepCopy()
				switch tc.server {
				case "fail":
					return true, nil, errors.New("dry run not supported")
				case "drop":
					// What an API server with the gate off does: the list field is dropped, and
					// the attribute is left without a value.
					for i := range s.Spec.Devices {
						for k, a := range s.Spec.Devices[i].Attributes {
							a.StringValues = nil
							s.Spec.Devices[i].Attributes[k] = a
						}
					}
				}
				return true, s, nil
			})
			g := newGateCheck(gateOptions(DroppedFieldsRefuse), kube, &recordedWarnings{})
			if got := nvlinkCliquesKept(ctx, g, inv); got != tc.want || asked != tc.asked {
				t.Errorf("kept %v (asked the server: %v), want %v (%v)", got, asked, tc.want, tc.asked)
			}
		})
	}
}

// TestWithNVLinkCliques: the list comes on top of the compatibility mode's attributes.
func TestWithNVLinkCliques(t *testing.T) {
	d := device.Device{Kind: device.KindGPU, Brand: "Nvidia", Topology: &device.Topology{Links: 6, Cliques: []string{"nvl2-a", "nvl4-b"}}}
	for _, on := range []bool{false, true} {
		got := withNVLinkCliques(nvidia.Attributes, on)(&d)
		if _, brand := got[nvidia.AttrBrand]; !brand {
			t.Errorf("on=%v: compatibility attributes lost: %v", on, got)
		}
		a, ok := got[accelslices.AttrNVLinkCliques]
		if ok != on || on && len(a.StringValues) != 2 {
			t.Errorf("on=%v: nvlinkCliques %+v", on, a)
		}
	}
	if got := withNVLinkCliques(nil, true)(&d); len(got[accelslices.AttrNVLinkCliques].StringValues) != 2 {
		t.Errorf("without compatibility mode: %v", got)
	}
}
