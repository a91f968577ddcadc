package publisher

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// A group that already has the agreed template from the publisher keeps its template
// annotations as they are, without encoding the template again; anything that makes them not
// the publisher's current encoding of that template re-encodes it.
func TestDecideSkipsReencoding(t *testing.T) {
	ann, owned := published(t, h100)
	// Not what Encode writes (it compresses a document this large), but the same template
	// hash: only a decision that does not encode again leaves it.
	stale := with(ann, template.ResourceSlicesAnnotation, "kept-as-is")
	nodes := []NodeInput{nodeInput(t, "n1", h100), nodeInput(t, "n2", h100)}
	for name, tc := range map[string]struct {
		ann      map[string]string
		owned    sets.Set[string]
		budget   int
		reencode bool
		// problem: a re-encoding that fails keeps the template and says why.
		problem string
	}{
		"same hash, all keys the publisher's": {ann: stale, owned: owned},
		"same hash, another format version":   {ann: with(stale, template.VersionAnnotation, "v0"), owned: owned, reencode: true},
		"same hash, dra-resource-slices missing": {ann: without(stale, nodegroup.DRAResourceSlicesKey),
			owned: without2(owned, nodegroup.DRAResourceSlicesKey), reencode: true},
		"same hash, a key not the publisher's": {ann: stale, owned: without2(owned, template.ResourceSlicesAnnotation), reencode: true},
		"same hash, over a lowered budget":     {ann: stale, owned: owned, budget: 1000, problem: ReasonOverBudget},
		"another hash":                         {ann: with(stale, template.HashAnnotation, "sha256:other"), owned: owned, reencode: true},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig
			if tc.budget > 0 {
				cfg.Budget = tc.budget
			}
			p := Decide(Input{Annotations: tc.ann, Owned: tc.owned, Nodes: nodes}, cfg)
			kept := p.Desired[template.ResourceSlicesAnnotation] == "kept-as-is"
			if tc.problem != "" {
				if len(p.Problems) != 1 || p.Problems[0].Reason != tc.problem {
					t.Errorf("problems %v, want %s", p.Problems, tc.problem)
				}
				return
			}
			if kept == tc.reencode {
				t.Errorf("template kept as it was: %v, want %v (problems %v)", kept, !tc.reencode, p.Problems)
			}
			if !tc.reencode && p.Apply != nil {
				t.Errorf("wrote %v", p.Changed)
			}
		})
	}
}

// A write that would make the group's annotations larger than the API (and Cluster API's copy
// to the MachineSets) allows is refused with a problem saying so; the group keeps what it has.
func TestDecideRefusesOversizedAnnotations(t *testing.T) {
	ann, owned := published(t, h100)
	limit := apivalidation.TotalAnnotationSizeLimitB
	filler := func(n int) string { return strings.Repeat("x", n) }
	// Others' annotations that leave less room than the template needs.
	crowded := with(without(ann, nodegroup.TemplateKeys...), "example.com/big", filler(limit-AnnotationReserveBytes-200))
	crowdedOwned := without2(owned, nodegroup.TemplateKeys...)
	for name, tc := range map[string]struct {
		in      Input
		refused bool
	}{
		"room enough": {in: Input{Annotations: without(ann, nodegroup.TemplateKeys...), Owned: crowdedOwned,
			Nodes: []NodeInput{nodeInput(t, "n1", h100)}}},
		"the template does not fit beside others' annotations": {in: Input{Annotations: crowded, Owned: crowdedOwned,
			Nodes: []NodeInput{nodeInput(t, "n1", h100)}}, refused: true},
		"a write that shrinks an oversized object is let through": {in: Input{
			Annotations: with(ann, "example.com/big", filler(limit-AnnotationReserveBytes)), Owned: owned,
			Nodes: []NodeInput{nodeInput(t, "n1", h100), nodeInput(t, "n2", a100)}}},
	} {
		t.Run(name, func(t *testing.T) {
			p := Decide(tc.in, testConfig)
			var msg string
			for _, pr := range p.Problems {
				if pr.Reason == ReasonOverBudget {
					msg = pr.Message
				}
			}
			if tc.refused {
				if p.Apply != nil || msg == "" || !strings.Contains(msg, "nothing is written") {
					t.Fatalf("Apply %v, problem %q: want no write and a problem", p.Changed, msg)
				}
				// Nothing is lost: what the publisher wants is still worked out.
				if p.Desired[template.HashAnnotation] == "" {
					t.Error("desired template dropped")
				}
				return
			}
			if msg != "" {
				t.Errorf("problem %q", msg)
			}
		})
	}
}

// Node label updates that cannot change the labels common to a group's current nodes (a
// timestamp every node rewrites) are not the group's business; others are.
func TestNodeUpdateMatters(t *testing.T) {
	ms := machineSet("md-a-1", "md-a", 1, 0)
	nodes := []*corev1.Node{gpuNode("n1"), gpuNode("n2"), gpuNode("n3")}
	for i, n := range nodes {
		n.Labels["nvidia.com/gfd.timestamp"] = string(rune('0' + i))
		n.Labels["zone"] = "a"
	}
	nodes[2].Labels["zone"] = "b"
	objs := []client.Object{machineDeployment("md-a", nil), ms, gpuNode("old-node")}
	for i, n := range nodes {
		objs = append(objs, n, machine("m"+string(rune('1'+i)), ms, n.Name))
	}
	old := machineSet("md-a-0", "md-a", 0, 0)
	objs = append(objs, old)
	e := newEnv(t, objs...)
	key := GroupKey{KindMachineDeployment, ns, "md-a"}
	relabel := func(n *corev1.Node, kv ...string) *corev1.Node {
		c := n.DeepCopy()
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(c.Labels, kv[i])
			} else {
				c.Labels[kv[i]] = kv[i+1]
			}
		}
		return c
	}
	tainted := nodes[0].DeepCopy()
	tainted.Spec.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	for name, tc := range map[string]struct {
		o, n *corev1.Node
		want bool
	}{
		"a timestamp no two nodes share":              {o: nodes[0], n: relabel(nodes[0], "nvidia.com/gfd.timestamp", "9")},
		"a common label changes":                      {o: nodes[0], n: relabel(nodes[0], "node.kubernetes.io/instance-type", "gpu-4x"), want: true},
		"a common label goes":                         {o: nodes[0], n: relabel(nodes[0], "kubernetes.io/arch", ""), want: true},
		"the last differing node agrees":              {o: nodes[2], n: relabel(nodes[2], "zone", "a"), want: true},
		"a label only this node has":                  {o: nodes[0], n: relabel(nodes[0], "example.com/own", "x")},
		"a timestamp and a taint":                     {o: nodes[0], n: relabel(tainted, "nvidia.com/gfd.timestamp", "9"), want: true},
		"a node outside the current revision changes": {o: gpuNode("old-node"), n: relabel(gpuNode("old-node"), "kubernetes.io/arch", "arm64")},
	} {
		t.Run(name, func(t *testing.T) {
			if got := e.r.nodeUpdateMatters(context.Background(), key, tc.o, tc.n); got != tc.want {
				t.Errorf("nodeUpdateMatters = %v, want %v", got, tc.want)
			}
		})
	}
	if !e.r.nodeUpdateMatters(context.Background(), GroupKey{KindMachinePool, ns, "mp"}, nodes[0], relabel(nodes[0], "nvidia.com/gfd.timestamp", "9")) {
		t.Error("MachinePool: want every label update to matter")
	}
	_ = clusterv1.GroupVersion
}
