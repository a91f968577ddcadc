package publisher

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/sets"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

const (
	h100Machines = "DockerMachineTemplate.infrastructure.cluster.x-k8s.io/h100"
	a100Machines = "DockerMachineTemplate.infrastructure.cluster.x-k8s.io/a100"
)

func TestMachineTemplateRef(t *testing.T) {
	for _, tc := range []struct {
		ref  clusterv1.ContractVersionedObjectReference
		want string
	}{
		{clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate", Name: "h100"}, h100Machines},
		{clusterv1.ContractVersionedObjectReference{Kind: "AWSMachineTemplate", Name: "p5"}, "AWSMachineTemplate./p5"},
		{clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate"}, ""},
		{clusterv1.ContractVersionedObjectReference{}, ""},
	} {
		if got := MachineTemplateRef(tc.ref); got != tc.want {
			t.Errorf("MachineTemplateRef(%+v) = %q, want %q", tc.ref, got, tc.want)
		}
	}
}

// TestDecideStale: a group at zero whose machine template is no longer the one its template
// describes, under each policy, and the cases that are not stale.
func TestDecideStale(t *testing.T) {
	h100Ann, owned := published(t, h100)
	// What the publisher wrote from an H100 node of the h100 machine template.
	fromNodes := with(h100Ann, nodegroup.MachineTemplateAnnotation, h100Machines)
	ownedAll := sets.KeySet(fromNodes)
	a100Ann, _ := published(t, a100)
	a100Seed := with(without(a100Ann, nodegroup.LabelsKey), nodegroup.SourceAnnotation, nodegroup.SourceSeed)
	withdrawn := map[string]string{nodegroup.MachineTemplateAnnotation: h100Machines}

	type want struct {
		apply map[string]string // nil: no write
		// reasons are the problems' reasons, sorted.
		reasons []string
		// message is in the TemplateStale problem's message.
		message string
	}
	for name, tc := range map[string]struct {
		in     Input
		policy string
		want   want
	}{
		"withdraw by default": {
			in:   Input{Annotations: fromNodes, Owned: ownedAll, MachineTemplate: a100Machines},
			want: want{apply: withdrawn, reasons: []string{ReasonTemplateStale}, message: "changed from " + h100Machines + " to " + a100Machines},
		},
		"withdrawn stays withdrawn, reported": {
			in:   Input{Annotations: withdrawn, Owned: ownedAll, MachineTemplate: a100Machines},
			want: want{reasons: []string{ReasonTemplateStale}, message: "withdrawn"},
		},
		"withdraw keeps the divergence report": {
			in:   Input{Annotations: with(fromNodes, nodegroup.DivergenceAnnotation, "source seed: 1 differences"), Owned: ownedAll.Clone().Insert(nodegroup.DivergenceAnnotation), MachineTemplate: a100Machines},
			want: want{apply: with(withdrawn, nodegroup.DivergenceAnnotation, "source seed: 1 differences"), reasons: []string{ReasonTemplateStale}},
		},
		"withdraw leaves another manager's cpu alone": {
			in:   Input{Annotations: fromNodes, Owned: without2(ownedAll, nodegroup.CPUKey), Foreign: map[string]string{nodegroup.CPUKey: "kubectl-annotate"}, MachineTemplate: a100Machines},
			want: want{apply: withdrawn, reasons: []string{ReasonTemplateStale}},
		},
		"withdraw does not apply a seed the group names": {
			in:   Input{Annotations: with(fromNodes, nodegroup.SeedAnnotation, "a100"), Owned: ownedAll, MachineTemplate: a100Machines, Seed: &SeedSource{Name: "a100", Annotations: a100Seed}},
			want: want{apply: withdrawn, reasons: []string{ReasonTemplateStale}},
		},
		"a seeded template goes stale too": {
			in:   Input{Annotations: with(a100Seed, nodegroup.MachineTemplateAnnotation, h100Machines), Owned: sets.KeySet(a100Seed).Insert(nodegroup.MachineTemplateAnnotation), MachineTemplate: a100Machines, Seed: &SeedSource{Name: "a100", Annotations: a100Seed}},
			want: want{apply: withdrawn, reasons: []string{ReasonTemplateStale}},
		},
		"reseed applies the seed and records the new machines": {
			in:     Input{Annotations: fromNodes, Owned: ownedAll, MachineTemplate: a100Machines, Seed: &SeedSource{Name: "a100", Annotations: a100Seed}},
			policy: StaleReseed,
			// The labels came from the H100 nodes and the seed has none: they go.
			want: want{apply: with(a100Seed, nodegroup.MachineTemplateAnnotation, a100Machines), reasons: []string{ReasonTemplateStale}, message: "replaced by its seed a100"},
		},
		"reseed copies the group named by copy-from": {
			in: Input{Annotations: with(fromNodes, nodegroup.CopyFromAnnotation, "a100"), Owned: ownedAll, MachineTemplate: a100Machines,
				CopyFrom: &CopySource{Ref: ns + "/a100", Annotations: a100Ann}},
			policy: StaleReseed,
			want:   want{reasons: []string{ReasonTemplateStale}, message: "replaced by its copy-from a100"},
		},
		"reseed without a seed withdraws": {
			in:     Input{Annotations: fromNodes, Owned: ownedAll, MachineTemplate: a100Machines},
			policy: StaleReseed,
			want:   want{apply: withdrawn, reasons: []string{ReasonTemplateStale}, message: "withdrawn"},
		},
		"reseed with a broken seed withdraws": {
			in:     Input{Annotations: fromNodes, Owned: ownedAll, MachineTemplate: a100Machines, Seed: &SeedSource{Name: "gone", Err: errors.New("no such seed")}},
			policy: StaleReseed,
			want:   want{apply: withdrawn, reasons: []string{ReasonSeedFailed, ReasonTemplateStale}, message: "withdrawn"},
		},
		"keep": {
			in:     Input{Annotations: fromNodes, Owned: ownedAll, MachineTemplate: a100Machines},
			policy: StaleKeep,
			want:   want{reasons: []string{ReasonTemplateStale}, message: "kept"},
		},
		"the same machine template": {
			in: Input{Annotations: fromNodes, Owned: ownedAll, MachineTemplate: h100Machines},
		},
		"a template from before the record is not judged": {
			in: Input{Annotations: h100Ann, Owned: owned, MachineTemplate: a100Machines},
		},
		"a group without an infrastructure reference is not judged": {
			in: Input{Annotations: fromNodes, Owned: ownedAll},
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig
			cfg.StalePolicy = tc.policy
			p := Decide(tc.in, cfg)
			var reasons []string
			msg := ""
			for _, pr := range p.Problems {
				reasons = append(reasons, pr.Reason)
				if pr.Reason == ReasonTemplateStale {
					msg = pr.Message
				}
			}
			if diff := cmp.Diff(tc.want.reasons, sortedStrings(reasons)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%v", diff, p.Problems)
			}
			if !strings.Contains(msg, tc.want.message) {
				t.Errorf("TemplateStale message %q, want it to say %q", msg, tc.want.message)
			}
			if strings.Contains(name, "copy-from") {
				// The copy: the other group's template and shape, the new machines recorded.
				if p.Apply[template.HashAnnotation] != a100Ann[template.HashAnnotation] || p.Apply[nodegroup.MachineTemplateAnnotation] != a100Machines ||
					p.Apply[nodegroup.SourceAnnotation] != nodegroup.SourceCopyPrefix+ns+"/a100" {
					t.Errorf("not copied: %v", managed(p.Apply))
				}
				return
			}
			if diff := cmp.Diff(tc.want.apply, p.Apply); diff != "" {
				t.Errorf("Apply (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecideRecordsMachineTemplate: every template written notes the machines it describes.
func TestDecideRecordsMachineTemplate(t *testing.T) {
	h100Ann, owned := published(t, h100)
	node := nodeInput(t, "n1", h100)
	seed := with(h100Ann, nodegroup.SourceAnnotation, nodegroup.SourceSeed)
	for name, in := range map[string]Input{
		"first publication":           {Nodes: []NodeInput{node}},
		"published before the record": {Annotations: h100Ann, Owned: owned, Nodes: []NodeInput{node}},
		"nodes of new machines":       {Annotations: with(h100Ann, nodegroup.MachineTemplateAnnotation, a100Machines), Owned: owned.Clone().Insert(nodegroup.MachineTemplateAnnotation), Nodes: []NodeInput{node}},
		"seed":                        {Seed: &SeedSource{Name: "h100", Annotations: seed}},
		"copy":                        {CopyFrom: &CopySource{Ref: ns + "/h100", Annotations: h100Ann}},
	} {
		t.Run(name, func(t *testing.T) {
			in.MachineTemplate = h100Machines
			p := Decide(in, testConfig)
			if got := p.Apply[nodegroup.MachineTemplateAnnotation]; got != h100Machines {
				t.Errorf("%s = %q, want %q; problems %v", nodegroup.MachineTemplateAnnotation, got, h100Machines, p.Problems)
			}
		})
	}
	// Recorded, it is not written again.
	ann := with(h100Ann, nodegroup.MachineTemplateAnnotation, h100Machines)
	if p := Decide(Input{Annotations: ann, Owned: sets.KeySet(ann), Nodes: []NodeInput{node}, MachineTemplate: h100Machines}, testConfig); p.Apply != nil {
		t.Errorf("steady state writes %v", p.Changed)
	}
}

func sortedStrings(s []string) []string {
	if s == nil {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestReconcileStale: the reconciler records the current MachineSet's machine template with
// the nodes' template, and, once the group is at zero and its MachineDeployment names another
// one, withdraws it with one TemplateStale event and the problem gauge, and writes nothing more.
func TestReconcileStale(t *testing.T) {
	ref := func(name string) clusterv1.ContractVersionedObjectReference {
		return clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate", Name: name}
	}
	md := machineDeployment("gpu", nil)
	// The MachineDeployment already names the next machines; its current MachineSet (whose
	// nodes these are) the H100 ones.
	md.Spec.Template.Spec.InfrastructureRef = ref("a100")
	ms := machineSet("gpu-1", "gpu", 1, 0)
	ms.Spec.Template.Spec.InfrastructureRef = ref("h100")
	m := machine("m1", ms, "n1")
	objs := append([]client.Object{md, ms, m, gpuNode("n1")}, slicesOf("n1", h100)...)
	e := newEnv(t, objs...)
	key := GroupKey{KindMachineDeployment, ns, "gpu"}

	e.reconcile(key)
	if got := e.annotations(key)[nodegroup.MachineTemplateAnnotation]; got != h100Machines {
		t.Fatalf("%s = %q, want the current MachineSet's %q", nodegroup.MachineTemplateAnnotation, got, h100Machines)
	}
	e.events()

	// To zero (the Machine goes), and the MachineDeployment's machines are not the H100 ones.
	if err := e.client.Delete(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	e.reconcile(key)
	ann := e.annotations(key)
	for _, k := range append(append([]string{nodegroup.SourceAnnotation}, nodegroup.TemplateKeys...), nodegroup.ShapeKeys...) {
		if v, ok := ann[k]; ok {
			t.Errorf("%s = %.40q not withdrawn", k, v)
		}
	}
	if got := ann[nodegroup.MachineTemplateAnnotation]; got != h100Machines {
		t.Errorf("%s = %q after the withdrawal, want %q", nodegroup.MachineTemplateAnnotation, got, h100Machines)
	}
	gauge := func() float64 {
		return testutil.ToFloat64(e.r.Metrics.GroupsWithProblems.WithLabelValues(ReasonTemplateStale))
	}
	stale := 0
	for _, ev := range e.events() {
		if strings.Contains(ev, ReasonTemplateStale) {
			stale++
			if !strings.Contains(ev, h100Machines) || !strings.Contains(ev, a100Machines) {
				t.Errorf("event: %s", ev)
			}
		}
	}
	if stale != 1 || gauge() != 1 {
		t.Errorf("%d %s events, gauge %v; want 1 and 1", stale, ReasonTemplateStale, gauge())
	}

	// It stays so: no write, no second event.
	writes := e.writes()
	e.reconcile(key)
	if e.writes() != writes || gauge() != 1 {
		t.Errorf("a second reconcile: %v writes, gauge %v", e.writes()-writes, gauge())
	}
	for _, ev := range e.events() {
		if strings.Contains(ev, ReasonTemplateStale) {
			t.Errorf("second event: %s", ev)
		}
	}
}

func TestStalePolicyFlag(t *testing.T) {
	for _, tc := range []struct {
		arg, want, err string
	}{
		{"", StaleWithdraw, ""},
		{"--stale-template-policy=reseed", StaleReseed, ""},
		{"--stale-template-policy=keep", StaleKeep, ""},
		{"--stale-template-policy=drop", "", `--stale-template-policy="drop": want one of withdraw, reseed, keep`},
	} {
		o := NewOptions()
		var args []string
		if tc.arg != "" {
			args = []string{tc.arg}
		}
		if err := o.NewFlagSet().Parse(args); err != nil {
			t.Fatal(err)
		}
		err := o.Validate()
		switch {
		case tc.err != "":
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.arg, err, tc.err)
			}
		case err != nil || o.StaleTemplatePolicy != tc.want:
			t.Errorf("%q: policy %q, error %v; want %q", tc.arg, o.StaleTemplatePolicy, err, tc.want)
		}
	}
}
