package publisher

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// TestCapacityDiff: every capacity key the template stated that the nodes do not give alike,
// and every taint of the nodes the template did not state, one difference each.
func TestCapacityDiff(t *testing.T) {
	nodeKeys := map[string]string{
		nodegroup.CPUKey: "96", nodegroup.MemoryKey: "1000Gi", nodegroup.EphemeralDiskKey: "500Gi", nodegroup.MaxPodsKey: "110",
		nodegroup.GPUCountKey: "8", nodegroup.DRADriverKey: gpuDriver, nodegroup.DRAPoolKey: gpuDriver,
		nodegroup.LabelsKey: "kubernetes.io/arch=amd64,node.kubernetes.io/instance-type=gpu-8x",
		nodegroup.TaintsKey: "nvidia.com/gpu=present:NoSchedule",
	}
	for name, tc := range map[string]struct {
		template map[string]string
		want     []string
	}{
		"the same":                        {template: nodeKeys},
		"quantities compared as such":     {template: with(nodeKeys, nodegroup.MemoryKey, "1024000Mi", nodegroup.CPUKey, "96000m")},
		"keys the template did not state": {template: map[string]string{nodegroup.CPUKey: "96", nodegroup.MemoryKey: "1000Gi", nodegroup.TaintsKey: "nvidia.com/gpu=present:NoSchedule"}},
		"every key differs": {
			template: map[string]string{
				nodegroup.CPUKey: "192", nodegroup.MemoryKey: "2Ti", nodegroup.EphemeralDiskKey: "1Ti", nodegroup.MaxPodsKey: "250",
				nodegroup.GPUCountKey: "4", nodegroup.DRADriverKey: npuDriver, nodegroup.DRAPoolKey: npuDriver,
				nodegroup.LabelsKey: "kubernetes.io/arch=arm64,node.kubernetes.io/instance-type=gpu-8x,team=ml",
				nodegroup.TaintsKey: "dedicated=ml:NoExecute,nvidia.com/gpu=yes:NoSchedule",
			},
			want: []string{
				"cpu: template 192, node 96",
				"memory: template 2Ti, node 1000Gi",
				"gpu-count: template 4, node 8",
				"dra-driver: template npu.accel-dra.io, node gpu.accel-dra.io",
				"dra-pool: template npu.accel-dra.io, node gpu.accel-dra.io",
				"ephemeral-disk: template 1Ti, node 500Gi",
				"maxPods: template 250, node 110",
				"taint dedicated:NoExecute: template ml, node <none>",
				"taint nvidia.com/gpu:NoSchedule: template yes, node present",
				"label kubernetes.io/arch: template arm64, node amd64",
				"label team: template ml, node <none>",
			},
		},
		"a taint only the nodes have": {
			template: without(nodeKeys, nodegroup.TaintsKey),
			want:     []string{"taint nvidia.com/gpu:NoSchedule: template <none>, node present"},
		},
		"a gpu-count the nodes do not give": {
			template: with(nodeKeys, nodegroup.GPUCountKey, "8"),
		},
		"keys the nodes lack": {
			template: nodeKeys,
			want:     []string{"gpu-count: template 8, node <none>", "dra-driver: template gpu.accel-dra.io, node <none>", "dra-pool: template gpu.accel-dra.io, node <none>"},
		},
		"labels that do not parse": {
			template: with(nodeKeys, nodegroup.LabelsKey, "no-value"),
			want:     []string{"labels: template no-value, node kubernetes.io/arch=amd64,node.kubernetes.io/instance-type=gpu-8x"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			node := nodeKeys
			if name == "keys the nodes lack" {
				node = without(nodeKeys, nodegroup.GPUCountKey, nodegroup.DRADriverKey, nodegroup.DRAPoolKey)
			}
			var got []string
			for _, d := range capacityDiff(tc.template, node) {
				got = append(got, d.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("differences (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecideDivergenceCapacity: a seed that disagrees with the node that joins on its devices
// and its capacity keys is reported on every key that differs, the devices after them.
func TestDecideDivergenceCapacity(t *testing.T) {
	h100Ann, _ := published(t, h100)
	small := h100
	small.gpus = 4
	smallAnn, _ := published(t, small)
	seed := with(smallAnn, nodegroup.SourceAnnotation, nodegroup.SourceSeed,
		nodegroup.CPUKey, "64", nodegroup.MemoryKey, "512Gi",
		nodegroup.LabelsKey, "kubernetes.io/arch=arm64",
		nodegroup.TaintsKey, "dedicated=ml:NoSchedule")
	node := nodeInput(t, "n1", h100)
	p := Decide(Input{Annotations: seed, Owned: sets.New[string](), Nodes: []NodeInput{node}}, testConfig)
	if p.Divergence == nil {
		t.Fatal("no divergence reported")
	}
	var got []string
	for _, d := range p.Divergence.Differences {
		got = append(got, d.String())
	}
	want := []string{
		"cpu: template 64, node 96",
		"memory: template 512Gi, node 1000Gi",
		"gpu-count: template 4, node 8",
		"taint dedicated:NoSchedule: template ml, node <none>",
		"label kubernetes.io/arch: template arm64, node amd64",
	}
	if len(got) < len(want) {
		t.Fatalf("differences %q, want at least %q", got, want)
	}
	if diff := cmp.Diff(want, got[:len(want)]); diff != "" {
		t.Errorf("capacity differences (-want +got):\n%s", diff)
	}
	// Then the devices: the seed's pool had 4 GPUs, the node's 8.
	if rest := strings.Join(got[len(want):], "; "); !strings.Contains(rest, "device gpu-4 device: template <none>, node present") {
		t.Errorf("device differences: %s", rest)
	}
	if p.Apply[template.HashAnnotation] != h100Ann[template.HashAnnotation] || p.Apply[nodegroup.CPUKey] != "96" {
		t.Errorf("the seed is not replaced by the node's keys: %v", managed(p.Apply))
	}
	if !strings.Contains(p.Divergence.Message(), "cpu: template 64, node 96") {
		t.Errorf("event message: %s", p.Divergence.Message())
	}

	// Only capacity keys differ (the devices are right): reported all the same.
	p = Decide(Input{Annotations: with(h100Ann, nodegroup.SourceAnnotation, nodegroup.SourceSeed, nodegroup.CPUKey, "64"), Owned: sets.New[string](), Nodes: []NodeInput{node}}, testConfig)
	if p.Divergence == nil || len(p.Divergence.Differences) != 1 || p.Divergence.Differences[0].String() != "cpu: template 64, node 96" {
		t.Errorf("divergence %+v, want cpu only", p.Divergence)
	}
	// cpu and memory written by hand, no template: what a stock autoscaler scaled from.
	p = Decide(Input{Annotations: map[string]string{nodegroup.CPUKey: "64", nodegroup.MemoryKey: "1000Gi"}, Owned: sets.New[string](), Nodes: []NodeInput{node}}, testConfig)
	if p.Divergence == nil || len(p.Divergence.Differences) != 1 {
		t.Errorf("divergence %+v, want cpu only", p.Divergence)
	}
}
