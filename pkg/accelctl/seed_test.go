package accelctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

const seedFile = "../../api/templateconfig/v1alpha1/testdata/h100-seed.yaml"

func TestSeedAnnotations(t *testing.T) {
	data, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := seedv1alpha1.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	ann, err := SeedAnnotations(seed, SeedOptions{GPUDriver: gpuDriver})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		nodegroup.CPUKey: "96", nodegroup.MemoryKey: "1000Gi", nodegroup.EphemeralDiskKey: "500Gi", nodegroup.MaxPodsKey: "110",
		nodegroup.LabelsKey: "node.kubernetes.io/instance-type=gpu-2x", nodegroup.TaintsKey: "nvidia.com/gpu=present:NoSchedule",
		nodegroup.DRADriverKey: gpuDriver, nodegroup.GPUCountKey: "2", nodegroup.SourceAnnotation: nodegroup.SourceSeed,
	} {
		if ann[k] != v {
			t.Errorf("%s = %q, want %q", k, ann[k], v)
		}
	}
	tmpl, err := template.Decode(ann)
	if err != nil {
		t.Fatal(err)
	}
	if uuid := *tmpl.Drivers[0].Devices[1].Attributes["uuid"].StringValue; uuid != "uuid-1" {
		t.Errorf("uuid of gpu-1 = %q, want the placeholder uuid-1", uuid)
	}

	// The same seed with the template document instead of the slices gives the same template.
	doc, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	viaDoc := strings.SplitN(string(data), "resourceSlices:", 2)[0] + "template: " + string(doc) + "\n"
	seed2, err := seedv1alpha1.Decode([]byte(viaDoc))
	if err != nil {
		t.Fatal(err)
	}
	ann2, err := SeedAnnotations(seed2, SeedOptions{GPUDriver: gpuDriver})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(ann, ann2) {
		t.Errorf("seeding from the template document gives other annotations:\n%s\n%s", FormatAnnotations(ann), FormatAnnotations(ann2))
	}

	// A seed whose template is over the budget is refused, not truncated.
	if _, err := SeedAnnotations(seed, SeedOptions{Budget: 100}); err == nil {
		t.Error("no error over budget")
	}
}

// fakeCluster is a Cluster in memory.
type fakeCluster struct {
	groups  map[string]*Group
	classes []*resourceapi.DeviceClass
	applied map[string]string
}

func (f *fakeCluster) GetGroup(_ context.Context, ns, ref string) (*Group, error) {
	g, ok := f.groups[ns+"/"+ref]
	if !ok {
		return nil, fmt.Errorf("no MachineDeployment or MachineSet %s/%s", ns, ref)
	}
	return g, nil
}

func (f *fakeCluster) ListGroups(_ context.Context, ns string) ([]*Group, error) {
	var out []*Group
	for _, g := range f.groups {
		if ns == "" || g.Namespace == ns {
			out = append(out, g)
		}
	}
	return out, nil
}

func (f *fakeCluster) DeviceClasses(context.Context) ([]*resourceapi.DeviceClass, error) {
	return f.classes, nil
}

func (f *fakeCluster) ApplyAnnotations(_ context.Context, g *Group, ann map[string]string) error {
	f.applied = ann
	return nil
}

func run(t *testing.T, f *fakeCluster, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := NewCommand(IOStreams{Out: &out, ErrOut: &out}, func(ClientGetter) (Cluster, string, error) { return f, "clusters", nil })
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestCommands(t *testing.T) {
	f := gpuAndEmptyCluster(t)

	out, err := run(t, f, "template", "show", "gpu")
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	docs := strings.Split(out, "---\n")
	if !strings.Contains(docs[0], "# "+nodegroup.GPUCountKey+": 8") || len(docs) != 2 {
		t.Errorf("show output:\n%s", out)
	}
	var s resourceapi.ResourceSlice
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &s); err != nil {
		t.Fatalf("show printed a slice that does not parse: %v", err)
	}
	if len(s.Spec.Devices) != 8 || *s.Spec.NodeName != TemplateNodeName {
		t.Errorf("show printed %d devices on %v", len(s.Spec.Devices), s.Spec.NodeName)
	}
	if out, err := run(t, f, "template", "show", "empty"); err == nil || !strings.Contains(err.Error(), "no node group template") {
		t.Errorf("show of a group without template: %v\n%s", err, out)
	}
	out, err = run(t, f, "template", "show", "gpu", "-o", "annotations")
	if err != nil || !strings.Contains(out, nodegroup.SourceAnnotation+`: "nodes"`) {
		t.Errorf("show -o annotations: %v\n%s", err, out)
	}

	claim := t.TempDir() + "/claim.yaml"
	if err := os.WriteFile(claim, []byte(claimYAML("c", 4, "", true)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, f, "simulate", "--node-group", "gpu", "-f", claim)
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	if !strings.Contains(out, "accel-dra template: YES") || !strings.Contains(out, "autoscaler built-in (dra-driver/gpu-count), with the slice-count fix: NO") {
		t.Errorf("simulate output:\n%s", out)
	}

	// Seeding: refused over a template from the group's own nodes, done on an empty group.
	if out, err := run(t, f, "template", "seed", "gpu", "-f", seedFile); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("seed over a node template: %v\n%s", err, out)
	}
	if out, err := run(t, f, "template", "seed", "empty", "-f", seedFile); err != nil {
		t.Errorf("seed: %v\n%s", err, out)
	}
	if f.applied[nodegroup.SourceAnnotation] != nodegroup.SourceSeed || f.applied[nodegroup.GPUCountKey] != "2" {
		t.Errorf("seed applied %v", f.applied)
	}
	f.applied = nil
	out, err = run(t, f, "template", "seed", "empty", "-f", seedFile, "--dry-run")
	if err != nil || f.applied != nil || !strings.Contains(out, nodegroup.GPUCountKey+`: "2"`) {
		t.Errorf("seed --dry-run: %v, applied %v\n%s", err, f.applied, out)
	}
}

func with(m map[string]string, kv ...string) map[string]string {
	out := maps.Clone(m)
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// gpuAndEmptyCluster has a group "gpu" with the publisher's template of an H100 node and a group
// "empty" without annotations, in namespace clusters, and the GPU class.
func gpuAndEmptyCluster(t *testing.T) *fakeCluster {
	t.Helper()
	return &fakeCluster{
		groups: map[string]*Group{
			"clusters/gpu":   {Kind: "MachineDeployment", Namespace: "clusters", Name: "gpu", Annotations: with(h100Annotations(t), nodegroup.SourceAnnotation, nodegroup.SourceNodes)},
			"clusters/empty": {Kind: "MachineDeployment", Namespace: "clusters", Name: "empty"},
		},
		classes: []*resourceapi.DeviceClass{gpuClass()},
	}
}

// A template document over the annotation limit uncompressed (a dynamic-MIG node's is) seeds
// like any other: the limit is the document's, and Encode compresses it.
func TestSeedLargeTemplateDocument(t *testing.T) {
	var devs []resourceapi.Device
	for i := range 2500 {
		devs = append(devs, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"productName": {StringValue: new("NVIDIA H100 80GB HBM3")},
				"type":        {StringValue: new("gpu")},
				"index":       {IntValue: new(int64(i))},
			},
		})
	}
	tmpl, err := template.Build([]resourceapi.ResourceSlice{{
		Spec: resourceapi.ResourceSliceSpec{Driver: gpuDriver, NodeName: new("n"), Pool: resourceapi.ResourcePool{Name: "n", Generation: 1, ResourceSliceCount: 1}, Devices: devs},
	}}, template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc) <= template.MaxBudget {
		t.Fatalf("document of %d bytes, the test needs more than %d", len(doc), template.MaxBudget)
	}
	seed := &seedv1alpha1.NodeGroupSeed{Capacity: seedv1alpha1.Capacity{CPU: new(resource.MustParse("8")), Memory: new(resource.MustParse("64Gi"))}, Template: &runtime.RawExtension{Raw: doc}}
	ann, err := SeedAnnotations(seed, SeedOptions{GPUDriver: gpuDriver})
	if err != nil {
		t.Fatal(err)
	}
	if ann[nodegroup.GPUCountKey] != "2500" {
		t.Errorf("gpu-count = %q, want 2500", ann[nodegroup.GPUCountKey])
	}
	got, err := template.Decode(ann)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(tmpl) {
		t.Error("the seeded template is not the document's")
	}
}
