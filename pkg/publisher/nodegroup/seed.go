package nodegroup

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// SeedAnnotations turns a seed into the annotations the publisher writes for a group of such
// nodes that has none: the template (from the seed's slices or template document, encoded
// within budget; 0 is template.DefaultBudget), the capacity keys, dra-driver and gpu-count (the
// driver of the seed's whole devices, gpuDriver preferred between two; DRA; empty gpuDriver:
// neither), and template.accel-dra.io/source=seed. `accelctl template seed`
// and the publisher's seed mode both write these, so that a seed is the same whoever applies it.
func SeedAnnotations(seed *seedv1alpha1.NodeGroupSeed, budget int, gpuDriver string) (map[string]string, error) {
	var tmpl *template.Template
	if seed.Template != nil {
		var err error
		tmpl, err = template.DecodeDocument(seed.Template.Raw)
		if err != nil {
			return nil, fmt.Errorf("seed template: %w", err)
		}
	} else {
		slices := slices.Clone(seed.ResourceSlices)
		for i := range slices {
			if slices[i].Spec.NodeName == nil || *slices[i].Spec.NodeName == "" {
				slices[i].Spec.NodeName = new("seed")
				if slices[i].Spec.Pool.Name == "" {
					slices[i].Spec.Pool.Name = "seed"
				}
			}
			if slices[i].Spec.Pool.ResourceSliceCount == 0 {
				// Hand-written slices: one pool of that many slices.
				slices[i].Spec.Pool.ResourceSliceCount = int64(countPool(seed, i))
			}
		}
		var err error
		tmpl, err = template.Build(slices, template.BuildOptions{IdentityAttributes: seed.IdentityAttributes})
		if err != nil {
			return nil, fmt.Errorf("seed resourceSlices: %w", err)
		}
	}
	ann, err := tmpl.Encode(budget)
	if err == nil {
		err = AddDRAResourceSlices(ann, tmpl, budget)
	}
	if err != nil {
		return nil, err
	}
	maps.Copy(ann, DRA(tmpl, gpuDriver))

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "seed", Labels: seed.Labels},
		Spec:       corev1.NodeSpec{Taints: seed.Taints},
		Status:     corev1.NodeStatus{Allocatable: corev1.ResourceList{}},
	}
	c := seed.Capacity
	for name, q := range map[corev1.ResourceName]*resource.Quantity{
		corev1.ResourceCPU: c.CPU, corev1.ResourceMemory: c.Memory, corev1.ResourceEphemeralStorage: c.EphemeralDisk,
	} {
		if q != nil {
			node.Status.Allocatable[name] = *q
		}
	}
	if c.MaxPods != nil {
		node.Status.Allocatable[corev1.ResourcePods] = *resource.NewQuantity(int64(*c.MaxPods), resource.DecimalSI)
	}
	maps.Copy(ann, Capacity([]*corev1.Node{node}))
	ann[SourceAnnotation] = SourceSeed
	return ann, nil
}

// countPool counts the seed's slices of the same driver and pool as slice i.
func countPool(seed *seedv1alpha1.NodeGroupSeed, i int) int {
	n := 0
	for _, s := range seed.ResourceSlices {
		if s.Spec.Driver == seed.ResourceSlices[i].Spec.Driver && s.Spec.Pool.Name == seed.ResourceSlices[i].Spec.Pool.Name {
			n++
		}
	}
	return n
}
