//go:build e2e

package publisher

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/publisher"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// seedSettings is what the Helm chart renders into the seeds ConfigMap for a seed of
// publisher.seeds: what the device model does not know, here the cpu and memory of the node
// that joins later (so that it agrees with the seed on them).
const seedSettings = `apiVersion: templateconfig.accel-dra.io/v1alpha1
kind: NodeGroupSeed
capacity:
  cpu: "%s"
  memory: %s
  maxPods: 110
labels:
  node.kubernetes.io/instance-type: p5.48xlarge
`

// instanceType is the label the seed names; the joining node has it.
var instanceType = map[string]string{"node.kubernetes.io/instance-type": "p5.48xlarge"}

// TestPublisherSeedMode runs the publisher's seed mode with the real binaries, laid out as the
// Helm chart lays them out: the seed's settings in --seeds-dir, and its template generated into
// --seed-templates-dir by the real plugin binary's generate-template (what the chart's init
// container runs). Then:
//
//   - a MachineDeployment annotated template.accel-dra.io/seed that never had a node gets the
//     seed from the publisher (its field manager, source seed), with exactly the annotations that
//     `accelctl template generate | accelctl template seed` writes on another group for the same
//     node;
//   - a group naming a seed the publisher does not have gets a TemplateSeedFailed event and no
//     annotations, and the other groups are not held up;
//   - when a real node running the plugin on that profile joins the seeded group, its template
//     replaces the seed, equal in every template key, and no divergence is reported.
func TestPublisherSeedMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := startEnv(ctx, t)
	c, cl := e.c, e.cl
	var err error

	// The chart's layout: the ConfigMap's file, and the init container's output.
	seedsDir, templatesDir := filepath.Join(e.dir, "seeds"), filepath.Join(e.dir, "seed-templates")
	for _, d := range []string{seedsDir, templatesDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The node that joins the seeded group later, started first for its cpu and memory.
	e.startGPUNode("gpu-seeded-node", instanceType)
	cpu, memory := e.allocatable("gpu-seeded-node")
	if err := os.WriteFile(filepath.Join(seedsDir, "gpu-h100.yaml"), []byte(fmt.Sprintf(seedSettings, cpu, memory)), 0o644); err != nil {
		t.Fatal(err)
	}
	plugin, err := framework.Binary("accel-dra-kubelet-plugin")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, plugin, "generate-template", "--mock-profile="+profile,
		"--output="+filepath.Join(templatesDir, "gpu-h100.json")).CombinedOutput(); err != nil {
		t.Fatalf("generate-template: %v\n%s", err, out)
	}

	if e.pub, err = startPublisher(ctx, c, "--leader-elect=false", "--seeds-dir="+seedsDir, "--seed-templates-dir="+templatesDir); err != nil {
		t.Fatal(err)
	}

	// The same node given to accelctl, on a group without the annotation.
	generated, err := runAccelctl(ctx, c, "template", "generate", "--profile", profile, "--cpu", cpu, "--memory", memory,
		"--max-pods", "110", "--labels", "node.kubernetes.io/instance-type=p5.48xlarge")
	if err != nil {
		t.Fatal(err)
	}
	seedFile := filepath.Join(e.dir, "accelctl-seed.yaml")
	if err := os.WriteFile(seedFile, []byte(generated), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.CreateNodeGroup(ctx, cl, "gpu-accelctl", nil); err != nil {
		t.Fatal(err)
	}
	if out, err := runAccelctl(ctx, c, "template", "seed", "gpu-accelctl", "-n", framework.CAPINamespace, "-f", seedFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	byAccelctl, err := getMD(ctx, cl, "gpu-accelctl")
	if err != nil {
		t.Fatal(err)
	}

	seeded, err := framework.CreateNodeGroup(ctx, cl, "gpu-seeded", map[string]string{nodegroup.SeedAnnotation: "gpu-h100"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.CreateNodeGroup(ctx, cl, "gpu-unknown", map[string]string{nodegroup.SeedAnnotation: "gpu-h900"}); err != nil {
		t.Fatal(err)
	}

	isSeed := func(md *clusterv1.MachineDeployment) bool {
		return md.Annotations[nodegroup.SourceAnnotation] == nodegroup.SourceSeed
	}
	t.Run("SeededAtZero", func(t *testing.T) {
		md, err := waitForMD(ctx, cl, "gpu-seeded", time.Minute, isSeed)
		if err != nil {
			t.Fatalf("the publisher did not seed the group: %v\n%s", err, e.pub.Proc.LogTail(30))
		}
		// The publisher records which machines the seed was written for; accelctl does not.
		if got, want := md.Annotations[nodegroup.MachineTemplateAnnotation], publisher.MachineTemplateRef(md.Spec.Template.Spec.InfrastructureRef); got != want {
			t.Errorf("%s = %q, want the group's %q", nodegroup.MachineTemplateAnnotation, got, want)
		}
		mine := managed(md.Annotations)
		delete(mine, nodegroup.MachineTemplateAnnotation)
		if diff := cmp.Diff(managed(byAccelctl.Annotations), mine); diff != "" {
			t.Errorf("annotations (-accelctl template seed +publisher seed mode):\n%s", diff)
		}
		var managers []string
		for _, f := range md.ManagedFields {
			managers = append(managers, f.Manager)
		}
		if !slices.Contains(managers, publisher.FieldManager) || slices.Contains(managers, "accelctl") {
			t.Errorf("field managers %q, want the publisher's", managers)
		}
	})

	t.Run("UnknownSeed", func(t *testing.T) {
		if err := waitForEvent(ctx, c, "gpu-unknown", publisher.ReasonSeedFailed); err != nil {
			t.Fatal(err)
		}
		md, err := getMD(ctx, cl, "gpu-unknown")
		if err != nil {
			t.Fatal(err)
		}
		if m := managed(md.Annotations); len(m) > 0 {
			t.Errorf("annotations written for an unknown seed: %v", m)
		}
	})

	t.Run("NodeReplacesSeed", func(t *testing.T) {
		seedAnn := managed(byAccelctl.Annotations)
		if _, err := seeded.AddMachine(ctx, cl, "gpu-seeded-m", "gpu-seeded-node", true); err != nil {
			t.Fatal(err)
		}
		md, err := waitForMD(ctx, cl, "gpu-seeded", 2*time.Minute, func(md *clusterv1.MachineDeployment) bool {
			return md.Annotations[nodegroup.SourceAnnotation] == nodegroup.SourceNodes
		})
		if err != nil {
			t.Fatalf("the node's template did not replace the seed: %v\n%s", err, e.pub.Proc.LogTail(30))
		}
		for _, k := range append(append([]string{}, nodegroup.TemplateKeys...), nodegroup.DRADriverKey, nodegroup.GPUCountKey, nodegroup.DRAPoolKey) {
			if got := md.Annotations[k]; got != seedAnn[k] {
				t.Errorf("%s: mirrored from the node %.80q, seeded %.80q", k, got, seedAnn[k])
			}
		}
		if v, ok := md.Annotations[nodegroup.DivergenceAnnotation]; ok {
			t.Errorf("divergence reported for the generated seed: %s", v)
		}
	})
}
