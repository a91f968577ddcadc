package publisher

import (
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/pkg/template"
)

// taintedInput is nodeInput with the node plugin's health taint on some of its GPUs, as a
// broken GPU is published (docs/health.md).
func taintedInput(t *testing.T, name string, s shape, added time.Time, devices ...string) NodeInput {
	t.Helper()
	sl := gpuSlices(name, s)
	for i := range sl[0].Spec.Devices {
		d := &sl[0].Spec.Devices[i]
		for _, want := range devices {
			if d.Name == want {
				d.Taints = []resourceapi.DeviceTaint{{Key: gpuDriver + "/xid", Value: "48", Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: added}}}
			}
		}
	}
	in := NodeInput{Node: gpuNode(name)}
	var err error
	if in.Template, err = template.Build(sl, template.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if in.Hash, err = in.Template.Hash(); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestTemplateDropsHealthTaints: a new node does not inherit a broken GPU, even when every node
// of the group has the same GPU tainted, and a tainted node agrees with a clean one.
func TestTemplateDropsHealthTaints(t *testing.T) {
	clean := Decide(Input{Nodes: []NodeInput{nodeInput(t, "n1", h100)}}, testConfig)
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for name, nodes := range map[string][]NodeInput{
		"every node has gpu-3 tainted": {taintedInput(t, "n1", h100, t0, "gpu-3"), taintedInput(t, "n2", h100, t0.Add(time.Hour), "gpu-3")},
		"one node tainted, one clean":  {taintedInput(t, "n1", h100, t0, "gpu-3", "gpu-5"), nodeInput(t, "n2", h100)},
	} {
		t.Run(name, func(t *testing.T) {
			p := Decide(Input{Nodes: nodes}, testConfig)
			if len(p.Problems) > 0 {
				t.Fatalf("problems: %v", p.Problems)
			}
			tmpl, err := template.Decode(p.Apply)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(tmpl.Drivers[0].Devices); n != 8 {
				t.Errorf("template has %d devices, want all 8", n)
			}
			for _, d := range tmpl.Drivers[0].Devices {
				if len(d.Taints) > 0 {
					t.Errorf("template device %s has taints %v", d.Name, d.Taints)
				}
			}
			if p.Apply[template.HashAnnotation] != clean.Apply[template.HashAnnotation] {
				t.Errorf("template hash %s, want the clean group's %s", p.Apply[template.HashAnnotation], clean.Apply[template.HashAnnotation])
			}
		})
	}
}
