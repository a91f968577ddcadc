package publisher

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

var testConfig = Config{Budget: template.DefaultBudget, GPUDriver: gpuDriver}

// nodeInput builds a node of the shape and the template of its slices, as the reconciler does.
func nodeInput(t *testing.T, name string, s shape) NodeInput {
	t.Helper()
	in := NodeInput{Node: gpuNode(name)}
	in.Template, in.Err = template.Build(gpuSlices(name, s), template.BuildOptions{})
	if in.Err == nil {
		var err error
		if in.Hash, err = in.Template.Hash(); err != nil {
			t.Fatal(err)
		}
	} else {
		in.Template = nil
	}
	return in
}

// published returns the annotations (all managed keys) the publisher writes for nodes of a
// shape, and the keys it then owns.
func published(t *testing.T, s shape) (map[string]string, sets.Set[string]) {
	t.Helper()
	p := Decide(Input{Nodes: []NodeInput{nodeInput(t, "seed-node-1", s)}}, testConfig)
	if p.Apply == nil {
		t.Fatal("first publication wrote nothing")
	}
	return p.Apply, sets.KeySet(p.Apply)
}

func with(m map[string]string, kv ...string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func without(m map[string]string, keys ...string) map[string]string {
	out := maps.Clone(m)
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

func TestDecideFirstPublication(t *testing.T) {
	p := Decide(Input{Nodes: []NodeInput{nodeInput(t, "n1", h100)}}, testConfig)
	if len(p.Problems) > 0 {
		t.Fatalf("problems: %v", p.Problems)
	}
	want := []string{
		template.VersionAnnotation, template.HashAnnotation, template.EncodingAnnotation, template.ResourceSlicesAnnotation,
		nodegroup.DRAResourceSlicesKey, nodegroup.CPUKey, nodegroup.MemoryKey, nodegroup.EphemeralDiskKey, nodegroup.MaxPodsKey, nodegroup.LabelsKey,
		nodegroup.DRADriverKey, nodegroup.DRAPoolKey, nodegroup.GPUCountKey, nodegroup.SourceAnnotation,
	}
	if diff := cmp.Diff(sets.List(sets.New(want...)), sets.List(sets.KeySet(p.Apply))); diff != "" {
		t.Errorf("keys written (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{
		nodegroup.CPUKey: "96", nodegroup.MemoryKey: "1000Gi", nodegroup.EphemeralDiskKey: "500Gi", nodegroup.MaxPodsKey: "110",
		nodegroup.LabelsKey:    "kubernetes.io/arch=amd64,node.kubernetes.io/instance-type=gpu-8x",
		nodegroup.DRADriverKey: gpuDriver, nodegroup.GPUCountKey: "8", nodegroup.DRAPoolKey: gpuDriver,
		nodegroup.SourceAnnotation: nodegroup.SourceNodes,
	} {
		if p.Apply[k] != v {
			t.Errorf("%s = %q, want %q", k, p.Apply[k], v)
		}
	}
	tmpl, err := template.Decode(p.Apply)
	if err != nil {
		t.Fatalf("decoding what was written: %v", err)
	}
	if n := len(tmpl.Drivers[0].Devices); n != 8 {
		t.Errorf("template has %d devices, want 8", n)
	}
	if p.TemplateBytes == 0 {
		t.Error("TemplateBytes is 0")
	}
}

func TestDecide(t *testing.T) {
	h100Ann, h100Owned := published(t, h100)
	a100Ann, a100Owned := published(t, a100)
	templateKeys := append(slices.Clone(nodegroup.TemplateKeys), nodegroup.DRADriverKey, nodegroup.DRAPoolKey, nodegroup.GPUCountKey, nodegroup.SourceAnnotation)
	seeded := with(without(h100Ann, nodegroup.LabelsKey), nodegroup.SourceAnnotation, nodegroup.SourceSeed)

	type want struct {
		// apply: expected Plan.Apply; nil means no write.
		apply    map[string]string
		problems []string
		pending  bool
	}
	for name, tc := range map[string]struct {
		in     func(t *testing.T) Input
		budget int
		want   want
	}{
		"steady state: one node, nothing changed": {
			in: func(t *testing.T) Input {
				return Input{Annotations: h100Ann, Owned: h100Owned, Nodes: []NodeInput{nodeInput(t, "n1", h100)}}
			},
		},
		"steady state: a second node with other UUIDs and PCI addresses": {
			in: func(t *testing.T) Input {
				return Input{Annotations: h100Ann, Owned: h100Owned, Nodes: []NodeInput{nodeInput(t, "n1", h100), nodeInput(t, "node-two", h100)}}
			},
		},
		"steady state: other annotations and keys owned by others are left alone": {
			in: func(t *testing.T) Input {
				return Input{
					Annotations: with(h100Ann, "example.com/x", "y", nodegroup.CapacityPrefix+"gpu-type", "nvidia.com/gpu"),
					Owned:       h100Owned.Clone().Insert("example.com/x"),
					Nodes:       []NodeInput{nodeInput(t, "n1", h100)},
				}
			},
		},
		"the nodes changed shape: the new template is written": {
			in: func(t *testing.T) Input {
				return Input{Annotations: a100Ann, Owned: a100Owned, Nodes: []NodeInput{nodeInput(t, "n1", h100)}}
			},
			want: want{apply: h100Ann},
		},
		"nodes disagree: the last good template is kept, a problem reported": {
			in: func(t *testing.T) Input {
				return Input{Annotations: h100Ann, Owned: h100Owned, Nodes: []NodeInput{nodeInput(t, "n1", h100), nodeInput(t, "n2", a100)}}
			},
			want: want{problems: []string{ReasonNodesDisagree}},
		},
		"nodes disagree and their capacity changed: capacity written, template kept": {
			in: func(t *testing.T) Input {
				n1, n2 := nodeInput(t, "n1", h100), nodeInput(t, "n2", a100)
				n2.Node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("48")
				return Input{Annotations: h100Ann, Owned: h100Owned, Nodes: []NodeInput{n1, n2}}
			},
			want: want{apply: with(h100Ann, nodegroup.CPUKey, "48"), problems: []string{ReasonNodesDisagree}},
		},
		"nodes disagree from the start: no template, but capacity": {
			in: func(t *testing.T) Input {
				return Input{Nodes: []NodeInput{nodeInput(t, "n1", h100), nodeInput(t, "n2", a100)}}
			},
			want: want{apply: without(h100Ann, templateKeys...), problems: []string{ReasonNodesDisagree}},
		},
		"over budget: never truncated, the last good template is kept": {
			in: func(t *testing.T) Input {
				return Input{Annotations: a100Ann, Owned: a100Owned, Nodes: []NodeInput{nodeInput(t, "n1", h100)}}
			},
			budget: templateBytes(h100Ann) - 1,
			want:   want{problems: []string{ReasonOverBudget}},
		},
		"group at zero: nothing is written, nothing removed": {
			in: func(t *testing.T) Input { return Input{Annotations: h100Ann, Owned: h100Owned} },
		},
		"group never had a node and no seed: nothing": {
			in: func(t *testing.T) Input { return Input{} },
		},
		"seed from another group (copy-from) at zero": {
			in: func(t *testing.T) Input {
				return Input{CopyFrom: &CopySource{Ref: ns + "/gpu-a", Annotations: with(h100Ann, "unrelated", "x")}}
			},
			want: want{apply: with(without(h100Ann, nodegroup.LabelsKey), nodegroup.SourceAnnotation, "copy-from:"+ns+"/gpu-a")},
		},
		"copy-from follows the source's changes": {
			in: func(t *testing.T) Input {
				cur := with(without(a100Ann, nodegroup.LabelsKey), nodegroup.SourceAnnotation, "copy-from:"+ns+"/gpu-a")
				return Input{Annotations: cur, Owned: sets.KeySet(cur), CopyFrom: &CopySource{Ref: ns + "/gpu-a", Annotations: h100Ann}}
			},
			want: want{apply: with(without(h100Ann, nodegroup.LabelsKey), nodegroup.SourceAnnotation, "copy-from:"+ns+"/gpu-a")},
		},
		"copy-from replaces a seed from accelctl": {
			in: func(t *testing.T) Input {
				return Input{Annotations: with(seeded, nodegroup.GPUCountKey, "4"), CopyFrom: &CopySource{Ref: ns + "/gpu-a", Annotations: h100Ann}}
			},
			want: want{apply: with(without(h100Ann, nodegroup.LabelsKey), nodegroup.SourceAnnotation, "copy-from:"+ns+"/gpu-a")},
		},
		"copy-from never replaces a template from the group's own nodes": {
			in: func(t *testing.T) Input {
				return Input{Annotations: a100Ann, Owned: a100Owned, CopyFrom: &CopySource{Ref: ns + "/gpu-a", Annotations: h100Ann}}
			},
		},
		"copy-from is ignored while the group has nodes": {
			in: func(t *testing.T) Input {
				return Input{Annotations: h100Ann, Owned: h100Owned, Nodes: []NodeInput{nodeInput(t, "n1", h100)}}
			},
		},
		"copy-from keeps cpu and memory the source lacks": {
			in: func(t *testing.T) Input {
				cur := map[string]string{nodegroup.CPUKey: "4", nodegroup.MemoryKey: "16Gi"}
				return Input{Annotations: cur, Owned: sets.KeySet(cur), CopyFrom: &CopySource{Ref: ns + "/gpu-a", Annotations: without(h100Ann, nodegroup.CPUKey, nodegroup.MemoryKey)}}
			},
			want: want{apply: with(without(h100Ann, nodegroup.LabelsKey), nodegroup.SourceAnnotation, "copy-from:"+ns+"/gpu-a", nodegroup.CPUKey, "4", nodegroup.MemoryKey, "16Gi")},
		},
		"copy-from a group that does not exist": {
			in:   func(t *testing.T) Input { return Input{CopyFrom: &CopySource{Ref: ns + "/nope"}} },
			want: want{problems: []string{ReasonCopyFromFailed}},
		},
		"copy-from a group without a template": {
			in: func(t *testing.T) Input {
				return Input{CopyFrom: &CopySource{Ref: ns + "/cpu", Annotations: map[string]string{nodegroup.CPUKey: "4"}}}
			},
			want: want{problems: []string{ReasonCopyFromFailed}},
		},
		"copy-from a group whose template is corrupt": {
			in: func(t *testing.T) Input {
				return Input{CopyFrom: &CopySource{Ref: ns + "/bad", Annotations: with(h100Ann, template.HashAnnotation, "sha256:00")}}
			},
			want: want{problems: []string{ReasonCopyFromFailed}},
		},
		"copy-from a template over this publisher's budget": {
			in: func(t *testing.T) Input {
				big := with(h100Ann, template.ResourceSlicesAnnotation, h100Ann[template.ResourceSlicesAnnotation]+strings.Repeat(" ", template.DefaultBudget))
				big = without(big, template.HashAnnotation)
				return Input{CopyFrom: &CopySource{Ref: ns + "/big", Annotations: big}}
			},
			want: want{problems: []string{ReasonOverBudget}},
		},
		"a node whose plugin has not published yet: capacity only, template kept": {
			in: func(t *testing.T) Input {
				return Input{Annotations: h100Ann, Owned: h100Owned, Nodes: []NodeInput{{Node: gpuNode("n1")}}}
			},
		},
		"a node mid-update (incomplete pool) is skipped and retried": {
			in: func(t *testing.T) Input {
				s := h100
				s.sliceCount = 2
				return Input{Annotations: a100Ann, Owned: a100Owned, Nodes: []NodeInput{nodeInput(t, "n1", s)}}
			},
			want: want{pending: true},
		},
		"a node with slices that cannot be templated is left out": {
			in: func(t *testing.T) Input {
				bad := NodeInput{Node: gpuNode("n2"), Err: errFake}
				return Input{Annotations: a100Ann, Owned: a100Owned, Nodes: []NodeInput{nodeInput(t, "n1", h100), bad}}
			},
			want: want{apply: h100Ann, problems: []string{ReasonInvalidSlices}},
		},
		"nodes without allocatable keep cpu and memory": {
			in: func(t *testing.T) Input {
				n := nodeInput(t, "n1", h100)
				n.Node.Status = corev1.NodeStatus{}
				return Input{Annotations: h100Ann, Owned: h100Owned, Nodes: []NodeInput{n}}
			},
		},
		"a label the nodes lost is removed": {
			in: func(t *testing.T) Input {
				n := nodeInput(t, "n1", h100)
				n.Node.Labels = map[string]string{"kubernetes.io/hostname": "n1"}
				return Input{Annotations: h100Ann, Owned: h100Owned, Nodes: []NodeInput{n}}
			},
			want: want{apply: without(h100Ann, nodegroup.LabelsKey)},
		},
		"labels set by an operator are not removed, only replaced by the nodes'": {
			in: func(t *testing.T) Input {
				n := nodeInput(t, "n1", h100)
				n.Node.Labels = map[string]string{"kubernetes.io/hostname": "n1"}
				cur := with(h100Ann, nodegroup.LabelsKey, "team=ml")
				return Input{Annotations: cur, Owned: without2(h100Owned, nodegroup.LabelsKey), Nodes: []NodeInput{n}}
			},
		},
		"a template seeded by accelctl is replaced by the nodes'": {
			in: func(t *testing.T) Input {
				return Input{Annotations: with(a100Ann, nodegroup.SourceAnnotation, nodegroup.SourceSeed), Nodes: []NodeInput{nodeInput(t, "n1", h100)}}
			},
			// An A100 seed for H100 nodes: the write reports it (divergence_test.go).
			want: want{apply: with(h100Ann, nodegroup.DivergenceAnnotation, divergence(with(a100Ann, nodegroup.SourceAnnotation, nodegroup.SourceSeed),
				h100Template(t), h100Ann, "(n1)").Annotation())},
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig
			if tc.budget > 0 {
				cfg.Budget = tc.budget
			}
			p := Decide(tc.in(t), cfg)
			if diff := cmp.Diff(tc.want.apply, p.Apply); diff != "" {
				t.Errorf("Apply (-want +got):\n%s", diff)
			}
			var reasons []string
			for _, pr := range p.Problems {
				reasons = append(reasons, pr.Reason)
				if pr.Message == "" {
					t.Errorf("problem %s without message", pr.Reason)
				}
			}
			if diff := cmp.Diff(tc.want.problems, reasons); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%v", diff, p.Problems)
			}
			if p.Pending != tc.want.pending {
				t.Errorf("Pending = %v, want %v", p.Pending, tc.want.pending)
			}
		})
	}
}

func without2(s sets.Set[string], keys ...string) sets.Set[string] {
	return s.Clone().Delete(keys...)
}

type fakeErr struct{}

func (fakeErr) Error() string { return "per-device node selection is not supported" }

var errFake error = fakeErr{}

func TestNodeList(t *testing.T) {
	got := nodeList(map[string][]string{
		"sha256:aaaaaaaaaaaaaaaaaaaaaaa": {"n3", "n1"},
		"sha256:bbbbbbbbbbbbbbbbbbbbbbb": {"n2", "n4", "n5", "n6", "n7", "n8", "n9"},
	})
	want := "sha256:aaaaaaaaaaaa… (n1, n3), sha256:bbbbbbbbbbbb… (n2, n4, n5, n6, n7, and 2 more)"
	if got != want {
		t.Errorf("nodeList = %q, want %q", got, want)
	}
}
