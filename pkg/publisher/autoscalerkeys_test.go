package publisher

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// The keys under the autoscaler's capacity.cluster-autoscaler.kubernetes.io/ prefix, by their
// literal names: those the clusterapi provider defines, and those this project proposes
// (docs/upstream-proposal.md) that no released autoscaler reads.
var (
	definedAutoscalerKeys  = []string{"cpu", "memory", "ephemeral-disk", "maxPods", "labels", "taints", "dra-driver", "gpu-count"}
	proposedAutoscalerKeys = []string{"dra-pool", "dra-resource-slices"}
)

// TestDefaultAutoscalerKeys pins the exact set of keys under the autoscaler's prefix that the
// publisher writes by default for a group of whole GPUs (no taints), and that each key it may
// ever write there is either defined by the autoscaler or one of the two proposed keys: a new
// key in the autoscaler's namespace must be added here, and to docs/upstream-proposal.md and
// docs/template-format.md, on purpose.
func TestDefaultAutoscalerKeys(t *testing.T) {
	p := Decide(Input{Nodes: []NodeInput{nodeInput(t, "n1", h100)}}, testConfig)
	if len(p.Problems) > 0 {
		t.Fatalf("problems: %v", p.Problems)
	}
	var got []string
	for k := range p.Apply {
		if name, ok := strings.CutPrefix(k, "capacity.cluster-autoscaler.kubernetes.io/"); ok {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	want := []string{"cpu", "dra-driver", "dra-pool", "dra-resource-slices", "ephemeral-disk", "gpu-count", "labels", "maxPods", "memory"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capacity.cluster-autoscaler.kubernetes.io/ keys written by default (-want +got):\n%s", diff)
	}

	for _, k := range nodegroup.ManagedKeys {
		name, ok := strings.CutPrefix(k, "capacity.cluster-autoscaler.kubernetes.io/")
		if !ok {
			continue
		}
		if !slices.Contains(definedAutoscalerKeys, name) && !slices.Contains(proposedAutoscalerKeys, name) {
			t.Errorf("the publisher may write %s, which the autoscaler does not define and which is not a proposed key", k)
		}
	}
}
