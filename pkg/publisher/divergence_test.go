package publisher

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

func TestDecideDivergence(t *testing.T) {
	h100Ann, owned := published(t, h100)
	a100Ann, _ := published(t, a100)
	h100Small := h100
	h100Small.memory = "40Gi"
	smallAnn, _ := published(t, h100Small)
	seed := func(ann map[string]string) map[string]string {
		return with(ann, nodegroup.SourceAnnotation, nodegroup.SourceSeed)
	}
	node := nodeInput(t, "n1", h100)
	for name, tc := range map[string]struct {
		in Input
		// want are the differences' strings, in order; nil: no divergence.
		want []string
	}{
		"seed with the wrong memory": {
			in:   Input{Annotations: seed(smallAnn), Owned: sets.New[string]()},
			want: []string{"gpu.accel-dra.io device gpu-0 capacity memory: template 40Gi, node 80Gi", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"},
		},
		"seed of another GPU": {
			in:   Input{Annotations: seed(a100Ann), Owned: sets.New[string]()},
			want: []string{"gpu-0 attribute productName: template NVIDIA A100-SXM4-40GB, node NVIDIA H100 80GB HBM3", "gpu-0 capacity memory: template 40Gi, node 80Gi"},
		},
		"copy of another group": {
			in:   Input{Annotations: with(a100Ann, nodegroup.SourceAnnotation, nodegroup.SourceCopyPrefix+"ns/a100"), Owned: owned},
			want: []string{"gpu-0 attribute productName"},
		},
		"hand-written, no source": {
			in:   Input{Annotations: without(smallAnn, nodegroup.SourceAnnotation), Owned: sets.New[string]()},
			want: []string{"gpu-0 capacity memory"},
		},
		"seed of the right shape":         {in: Input{Annotations: seed(h100Ann), Owned: sets.New[string]()}},
		"template from the nodes changes": {in: Input{Annotations: a100Ann, Owned: owned}},
		"no template yet":                 {in: Input{Owned: sets.New[string]()}},
		"someone else's template is kept": {in: Input{Annotations: smallAnn, Owned: sets.New[string](), Foreign: map[string]string{template.HashAnnotation: "kubectl", template.ResourceSlicesAnnotation: "kubectl"}}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.in.Nodes = []NodeInput{node}
			p := Decide(tc.in, testConfig)
			ann := p.Desired[nodegroup.DivergenceAnnotation]
			if tc.want == nil {
				if p.Divergence != nil || ann != "" {
					t.Fatalf("divergence %+v, annotation %q; want none", p.Divergence, ann)
				}
				return
			}
			if p.Divergence == nil {
				t.Fatal("no divergence reported")
			}
			if len(p.Divergence.Differences) < len(tc.want) {
				t.Fatalf("differences %v, want at least %d", p.Divergence.Differences, len(tc.want))
			}
			for i, w := range tc.want {
				if s := p.Divergence.Differences[i].String(); !strings.Contains(s, w) {
					t.Errorf("difference %d is %q, want it to say %q", i, s, w)
				}
			}
			if p.Apply[template.HashAnnotation] != node.Hash || p.Apply[nodegroup.SourceAnnotation] != nodegroup.SourceNodes {
				t.Errorf("the template is not replaced by the node's: %v", p.Apply)
			}
			if ann == "" || len(ann) > divergenceAnnotationBytes || !strings.Contains(ann, p.Divergence.Differences[0].String()) || !strings.Contains(ann, "(n1)") {
				t.Errorf("annotation (%d bytes): %q", len(ann), ann)
			}
			if msg := p.Divergence.Message(); len(msg) > 1024 || !strings.Contains(msg, "(n1)") || !strings.Contains(msg, node.Hash) {
				t.Errorf("event message (%d bytes): %q", len(msg), msg)
			}
		})
	}

	// The report stays while the publisher owns it, and goes when someone removed it.
	reported := with(h100Ann, nodegroup.DivergenceAnnotation, "source seed: 8 differences")
	p := Decide(Input{Annotations: reported, Owned: sets.KeySet(reported), Nodes: []NodeInput{node}}, testConfig)
	if p.Apply != nil || p.Desired[nodegroup.DivergenceAnnotation] != reported[nodegroup.DivergenceAnnotation] {
		t.Errorf("steady state with a report: apply %v, desired report %q", p.Apply, p.Desired[nodegroup.DivergenceAnnotation])
	}
	p = Decide(Input{Annotations: h100Ann, Owned: sets.KeySet(reported), Nodes: []NodeInput{node}}, testConfig)
	if _, ok := p.Desired[nodegroup.DivergenceAnnotation]; ok || p.Apply != nil {
		t.Errorf("a report someone removed comes back: apply %v", p.Apply)
	}
}

func TestReconcileReportsDivergence(t *testing.T) {
	md := machineDeployment("gpu", nil)
	ms := machineSet("gpu-1", "gpu", 1, 0)
	e := newEnv(t, md, ms)
	key := GroupKey{KindMachineDeployment, ns, "gpu"}
	small := h100
	small.memory = "40Gi"
	seedAnn, _ := published(t, small)
	seedAnn[nodegroup.SourceAnnotation] = nodegroup.SourceSeed
	if err := e.applyAs("accelctl", "gpu", seedAnn, true); err != nil {
		t.Fatal(err)
	}
	for _, o := range append([]client.Object{machine("m1", ms, "n1"), gpuNode("n1")}, slicesOf("n1", h100)...) {
		o.SetResourceVersion("")
		if err := e.client.Create(e.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	e.reconcile(key)
	ann := e.annotations(key)
	if ann[nodegroup.SourceAnnotation] != nodegroup.SourceNodes || productOf(t, ann) != h100.product {
		t.Errorf("the seed is not replaced: %v", managed(ann))
	}
	report := ann[nodegroup.DivergenceAnnotation]
	if !strings.Contains(report, "capacity memory: template 40Gi, node 80Gi") {
		t.Errorf("%s = %q", nodegroup.DivergenceAnnotation, report)
	}
	diverged := 0
	for _, ev := range e.events() {
		if strings.Contains(ev, ReasonTemplateDiverged) {
			diverged++
			if !strings.Contains(ev, "gpu-0 capacity memory: template 40Gi, node 80Gi") || !strings.Contains(ev, "source seed") {
				t.Errorf("event: %s", ev)
			}
		}
	}
	if diverged != 1 {
		t.Errorf("%d %s events, want 1", diverged, ReasonTemplateDiverged)
	}
	count := func() float64 {
		return testutil.ToFloat64(e.r.Metrics.TemplateDivergences.WithLabelValues(KindMachineDeployment, ns, "gpu"))
	}
	if c := count(); c != 1 {
		t.Errorf("divergence counter %v, want 1", c)
	}

	// Later reconciles keep the report and say nothing more.
	e.reconcile(key)
	if got := e.annotations(key)[nodegroup.DivergenceAnnotation]; got != report {
		t.Errorf("report changed to %q", got)
	}
	for _, ev := range e.events() {
		if strings.Contains(ev, ReasonTemplateDiverged) {
			t.Errorf("second event: %s", ev)
		}
	}
	if c := count(); c != 1 {
		t.Errorf("divergence counter %v after a second reconcile, want 1", c)
	}
}

// h100Template is the template of an H100 node.
func h100Template(t *testing.T) *template.Template {
	return nodeInput(t, "n1", h100).Template
}
