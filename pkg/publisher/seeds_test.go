package publisher

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// seedSettings is a seed file without devices, as the Helm chart renders one.
const seedSettings = `apiVersion: templateconfig.accel-dra.io/v1alpha1
kind: NodeGroupSeed
capacity:
  cpu: "96"
  memory: 1000Gi
  maxPods: 110
labels:
  gpu: h100
`

// templateDoc is the template document of a node of the shape, as generate-template writes it.
func templateDoc(t *testing.T, s shape) []byte {
	t.Helper()
	tmpl, err := template.Build(gpuSlices("generated", s), template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(tmpl, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSeedsSource reads seeds as the chart lays them out (settings in one directory, generated
// templates in another) and checks that every way a seed can be wrong is a clear error.
func TestSeedsSource(t *testing.T) {
	h100Doc := string(templateDoc(t, h100))
	for name, tc := range map[string]struct {
		files, templates map[string]string
		seed             string
		noDir            bool
		wantErr          string
	}{
		"settings and generated template":    {files: map[string]string{"h100.yaml": seedSettings}, templates: map[string]string{"h100.json": h100Doc}, seed: "h100"},
		"template inside the seed":           {files: map[string]string{"h100.yaml": seedSettings + "template:\n" + indent(h100Doc)}, seed: "h100"},
		"no seeds configured":                {noDir: true, seed: "h100", wantErr: "no seeds (--seeds-dir)"},
		"no such seed":                       {files: map[string]string{"h100.yaml": seedSettings}, seed: "a100", wantErr: "no such seed"},
		"a name that is a path":              {seed: "../h100", wantErr: "invalid seed name"},
		"generated template missing":         {files: map[string]string{"h100.yaml": seedSettings}, seed: "h100", wantErr: "its generated template cannot be read"},
		"generated template not JSON":        {files: map[string]string{"h100.yaml": seedSettings}, templates: map[string]string{"h100.json": "{"}, seed: "h100", wantErr: "not JSON"},
		"generated template of another kind": {files: map[string]string{"h100.yaml": seedSettings}, templates: map[string]string{"h100.json": `{"kind":"Pod"}`}, seed: "h100", wantErr: `unsupported apiVersion "" kind "Pod"`},
		"misspelt field":                     {files: map[string]string{"h100.yaml": seedSettings + "lables: {}\n"}, templates: map[string]string{"h100.json": h100Doc}, seed: "h100", wantErr: "lables"},
		"no memory":                          {files: map[string]string{"h100.yaml": strings.Replace(seedSettings, "  memory: 1000Gi\n", "", 1)}, templates: map[string]string{"h100.json": h100Doc}, seed: "h100", wantErr: "capacity.memory"},
	} {
		t.Run(name, func(t *testing.T) {
			s := Seeds{Dir: t.TempDir(), TemplatesDir: t.TempDir()}
			writeFiles(t, s.Dir, tc.files)
			writeFiles(t, s.TemplatesDir, tc.templates)
			if tc.noDir {
				s = Seeds{}
			}
			src := s.Source(tc.seed, testConfig)
			if tc.wantErr != "" {
				if src.Err == nil || !strings.Contains(src.Err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", src.Err, tc.wantErr)
				}
				if src.Annotations != nil {
					t.Errorf("annotations of a failed seed: %v", src.Annotations)
				}
				return
			}
			if src.Err != nil {
				t.Fatal(src.Err)
			}
			// What a node of the shape publishes, with the seed's capacity and labels.
			nodeAnn, _ := published(t, h100)
			for _, k := range append(append([]string{}, nodegroup.TemplateKeys...), nodegroup.DRADriverKey, nodegroup.DRAPoolKey, nodegroup.GPUCountKey) {
				if src.Annotations[k] != nodeAnn[k] {
					t.Errorf("%s = %q, a node of the shape publishes %q", k, src.Annotations[k], nodeAnn[k])
				}
			}
			for k, v := range map[string]string{
				nodegroup.CPUKey: "96", nodegroup.MemoryKey: "1000Gi", nodegroup.MaxPodsKey: "110", nodegroup.LabelsKey: "gpu=h100",
				nodegroup.SourceAnnotation: nodegroup.SourceSeed,
			} {
				if src.Annotations[k] != v {
					t.Errorf("%s = %q, want %q", k, src.Annotations[k], v)
				}
			}
		})
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ") + "\n"
}

// TestDecideSeed: the publisher's seed mode follows copy-from's rules. A group without nodes
// and without a template from them gets the seed; a template from nodes is never replaced by
// it; the first node replaces the seed (and says how it differs); a seed that cannot be used
// writes nothing and is a problem.
func TestDecideSeed(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"h100.yaml": seedSettings, "h100.json": string(templateDoc(t, h100))})
	seeds := Seeds{Dir: dir}
	seed := seeds.Source("h100", testConfig)
	if seed.Err != nil {
		t.Fatal(seed.Err)
	}
	seedAnn, seedOwned := seed.Annotations, sets.KeySet(seed.Annotations)
	a100Ann, a100Owned := published(t, a100)
	h100Ann, _ := published(t, h100)
	groupAnn := func(m map[string]string) map[string]string { return with(m, nodegroup.SeedAnnotation, "h100") }

	for name, tc := range map[string]struct {
		in           Input
		wantApply    map[string]string
		wantProblem  string
		wantDiverged bool
	}{
		"a new group gets the seed": {
			in:        Input{Annotations: groupAnn(nil), Seed: seed},
			wantApply: seedAnn,
		},
		"a seeded group is up to date": {
			in: Input{Annotations: groupAnn(seedAnn), Owned: seedOwned, Seed: seed},
		},
		"a seed applied by accelctl is taken over without a change": {
			in: Input{Annotations: groupAnn(seedAnn), Seed: seed},
		},
		"a group at zero whose template came from its nodes keeps it": {
			in: Input{Annotations: groupAnn(a100Ann), Owned: a100Owned, Seed: seed},
		},
		"a copy replaced by the seed": {
			in:        Input{Annotations: groupAnn(with(a100Ann, nodegroup.SourceAnnotation, nodegroup.SourceCopyPrefix+"clusters/other")), Owned: a100Owned, Seed: seed},
			wantApply: seedAnn,
		},
		"unknown seed: a problem, nothing written": {
			in:          Input{Annotations: with(nil, nodegroup.SeedAnnotation, "h200"), Seed: seeds.Source("h200", testConfig)},
			wantProblem: ReasonSeedFailed + `: seed "h200": no such seed`,
		},
		"unknown seed: the seeded template is kept": {
			in:          Input{Annotations: with(seedAnn, nodegroup.SeedAnnotation, "h200"), Owned: seedOwned, Seed: seeds.Source("h200", testConfig)},
			wantProblem: ReasonSeedFailed + `: seed "h200": no such seed`,
		},
		"seed over the budget": {
			in:          Input{Annotations: groupAnn(nil), Seed: Seeds{Dir: dir}.Source("h100", Config{Budget: 100, GPUDriver: gpuDriver})},
			wantProblem: ReasonOverBudget + `: seed "h100": its template needs`,
		},
		"seed and copy-from: neither": {
			in:          Input{Annotations: groupAnn(with(nil, nodegroup.CopyFromAnnotation, "other")), Seed: seed, CopyFrom: &CopySource{Ref: "clusters/other", Annotations: a100Ann}},
			wantProblem: ReasonSeedFailed + `: seed "h100": the group also has template.accel-dra.io/copy-from`,
		},
		"the first node replaces the seed": {
			in:        Input{Annotations: groupAnn(seedAnn), Owned: seedOwned, Nodes: []NodeInput{nodeInput(t, "n1", h100)}},
			wantApply: h100Ann,
		},
		"a first node of another shape replaces the seed and diverges": {
			in:           Input{Annotations: groupAnn(seedAnn), Owned: seedOwned, Nodes: []NodeInput{nodeInput(t, "n1", a100)}},
			wantApply:    a100Ann,
			wantDiverged: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := Decide(tc.in, testConfig)
			var problems []string
			for _, pr := range p.Problems {
				problems = append(problems, pr.Reason+": "+pr.Message)
			}
			switch {
			case tc.wantProblem == "" && len(problems) > 0:
				t.Errorf("problems: %v", problems)
			case tc.wantProblem != "" && (len(problems) != 1 || !strings.HasPrefix(problems[0], tc.wantProblem)):
				t.Errorf("problems %q, want one starting with %q", problems, tc.wantProblem)
			}
			if (p.Divergence != nil) != tc.wantDiverged {
				t.Errorf("divergence %v, want %v", p.Divergence, tc.wantDiverged)
			}
			got := p.Apply
			if got != nil {
				got = without(got, nodegroup.DivergenceAnnotation)
			}
			if diff := cmp.Diff(tc.wantApply, got); diff != "" {
				t.Errorf("apply (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReconcileSeed: through the reconciler, a MachinePool at zero that names a seed gets it,
// under the publisher's field manager, and a MachineDeployment naming an unknown seed gets a
// Warning event and nothing written, without holding up the pool.
func TestReconcileSeed(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"h100.yaml": seedSettings, "h100.json": string(templateDoc(t, h100))})
	pool := machinePool("pool", nil)
	pool.Annotations = map[string]string{nodegroup.SeedAnnotation: "h100"}
	md := machineDeployment("gpu", map[string]string{nodegroup.SeedAnnotation: "h200"})
	e := newEnv(t, pool, md, machineSet("gpu-1", "gpu", 1, 0))
	e.r.Seeds = Seeds{Dir: dir}
	poolKey, mdKey := GroupKey{KindMachinePool, ns, "pool"}, GroupKey{KindMachineDeployment, ns, "gpu"}
	e.reconcile(mdKey)
	e.reconcile(poolKey)

	want := Seeds{Dir: dir}.Source("h100", e.r.Config).Annotations
	if diff := cmp.Diff(want, managed(e.annotations(poolKey))); diff != "" {
		t.Errorf("pool annotations (-seed +got):\n%s", diff)
	}
	obj, err := e.r.getGroup(e.ctx, poolKey)
	if err != nil {
		t.Fatal(err)
	}
	if owners := annotationOwners(obj)[nodegroup.SourceAnnotation]; len(owners) != 1 || owners[0] != FieldManager {
		t.Errorf("source annotation owned by %q, want %s", owners, FieldManager)
	}
	if got := managed(e.annotations(mdKey)); len(got) > 0 {
		t.Errorf("annotations written for an unknown seed: %v", got)
	}
	var failed []string
	for _, ev := range e.events() {
		if strings.Contains(ev, ReasonSeedFailed) {
			failed = append(failed, ev)
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0], `seed "h200": no such seed`) {
		t.Errorf("%s events %q, want one for the unknown seed", ReasonSeedFailed, failed)
	}
}
