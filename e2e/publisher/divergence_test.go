//go:build e2e

package publisher

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/accelctl"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// TestSeedDivergence seeds a group that never had a node with `accelctl template generate` (the
// real plugin binary's generate-template on the h100-8x-2numa profile) and `accelctl template
// seed`, once as generated and once with the memory of every GPU wrong, then lets a real node
// running the plugin on that profile join each group:
//
//   - the generated seed is exactly what the publisher then mirrors from the real node (same
//     template keys), and nothing is reported; likewise for a GPU the mock does not know,
//     declared by docs/examples/shapes/h200-4x-pcie.yaml, on a plugin running that shape;
//   - the wrong seed is replaced all the same, and reported: a TemplateDiverged event on the
//     MachineDeployment, the divergence counter, and the divergence annotation.
func TestSeedDivergence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	e := startEnv(ctx, t)
	c, cl := e.c, e.cl
	var err error
	if e.pub, err = startPublisher(ctx, c, "--leader-elect=false"); err != nil {
		t.Fatal(err)
	}

	// The nodes that will join the two groups, started first for their cpu and memory: a seed
	// that says other values diverges on them.
	for _, group := range []string{"gpu-generated", "gpu-wrong", "gpu-lying"} {
		e.startGPUNode(group+"-node", nil)
	}
	cpu, memory := e.allocatable("gpu-generated-node")

	// The generated seed, and the same with 40Gi GPUs.
	generated, err := runAccelctl(ctx, c, "template", "generate", "--profile", profile, "--cpu", cpu, "--memory", memory)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(generated, "value: 80Gi"); n != 8 {
		t.Fatalf("generated seed has %d GPUs of 80Gi, want 8:\n%s", n, generated)
	}
	wrong := strings.ReplaceAll(generated, "value: 80Gi", "value: 40Gi")
	seed := func(group, content string) {
		t.Helper()
		file := filepath.Join(e.dir, group+".yaml")
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := framework.CreateNodeGroup(ctx, cl, group, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := runAccelctl(ctx, c, "template", "seed", group, "-n", framework.CAPINamespace, "-f", file); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		md, err := getMD(ctx, cl, group)
		if err != nil {
			t.Fatal(err)
		}
		if md.Annotations[nodegroup.SourceAnnotation] != nodegroup.SourceSeed {
			t.Fatalf("%s: source %q after seeding", group, md.Annotations[nodegroup.SourceAnnotation])
		}
		if _, err := g.AddMachine(ctx, cl, group+"-m", group+"-node", true); err != nil {
			t.Fatal(err)
		}
	}
	seed("gpu-generated", generated)
	seed("gpu-wrong", wrong)

	// A seed that disagrees with the node on every capacity key it states: a one-GPU arm64
	// GH200 with other cpu and memory and a taint, for an 8×H100 amd64 node without it.
	lying, err := runAccelctl(ctx, c, "template", "generate", "--profile", "gh200-1x", "--cpu", "64", "--memory", "512Gi", "--labels", "kubernetes.io/arch=arm64")
	if err != nil {
		t.Fatal(err)
	}
	seed("gpu-lying", lying+"taints:\n- key: dedicated\n  value: ml\n  effect: NoSchedule\n")

	// A GPU the mock does not know, declared by a shape file, on a plugin that runs the shape.
	shape, err := filepath.Abs("../../docs/examples/shapes/h200-4x-pcie.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h200, err := runAccelctl(ctx, c, "template", "generate", "--profile", "shape:"+shape, "--cpu", cpu, "--memory", memory)
	if err != nil {
		t.Fatal(err)
	}
	h200File := filepath.Join(e.dir, "gpu-h200.yaml")
	if err := os.WriteFile(h200File, []byte(h200), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := framework.CreateNodeGroup(ctx, cl, "gpu-h200", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runAccelctl(ctx, c, "template", "seed", "gpu-h200", "-n", framework.CAPINamespace, "-f", h200File); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	n, err := c.AddNode(ctx, cluster.NodeOptions{Name: "gpu-h200-node", Labels: groupLabels})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.StartPlugin(ctx, c, n, framework.PluginOptions{Backend: "mock", Profile: "shape:" + shape}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForSlices(ctx, e.client, framework.GPUDriver, "gpu-h200-node", 4); err != nil {
		t.Fatal(err)
	}
	if _, err := g.AddMachine(ctx, cl, "gpu-h200-m", "gpu-h200-node", true); err != nil {
		t.Fatal(err)
	}

	fromNodes := func(md *clusterv1.MachineDeployment) bool {
		return md.Annotations[nodegroup.SourceAnnotation] == nodegroup.SourceNodes
	}
	for group, seedFile := range map[string]string{"gpu-generated": generated, "gpu-h200": h200} {
		t.Run("GeneratedEqualsMirrored/"+group, func(t *testing.T) {
			md, err := waitForMD(ctx, cl, group, 2*time.Minute, fromNodes)
			if err != nil {
				t.Fatalf("the node's template did not replace the seed: %v\n%s", err, e.pub.Proc.LogTail(30))
			}
			s, err := seedv1alpha1.Decode([]byte(seedFile))
			if err != nil {
				t.Fatal(err)
			}
			want, err := accelctl.SeedAnnotations(s, accelctl.SeedOptions{Budget: template.DefaultBudget, GPUDriver: framework.GPUDriver})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range append(append([]string{}, nodegroup.TemplateKeys...), nodegroup.DRADriverKey, nodegroup.GPUCountKey, nodegroup.DRAPoolKey) {
				if got := md.Annotations[k]; got != want[k] {
					t.Errorf("%s: mirrored from the node %.80q, generated %.80q", k, got, want[k])
				}
			}
			if v, ok := md.Annotations[nodegroup.DivergenceAnnotation]; ok {
				t.Errorf("divergence reported for the generated seed: %s", v)
			}
		})
	}

	t.Run("WrongMemoryReported", func(t *testing.T) {
		md, err := waitForMD(ctx, cl, "gpu-wrong", 2*time.Minute, fromNodes)
		if err != nil {
			t.Fatalf("the node's template did not replace the seed: %v\n%s", err, e.pub.Proc.LogTail(30))
		}
		const diff = "gpu.accel-dra.io device gpu-0 capacity memory: template 40Gi, node 80Gi"
		if report := md.Annotations[nodegroup.DivergenceAnnotation]; !strings.Contains(report, diff) || !strings.Contains(report, "source seed") || !strings.Contains(report, "(gpu-wrong-node)") {
			t.Errorf("%s = %q, want it to say %q", nodegroup.DivergenceAnnotation, report, diff)
		}
		if err := waitForEvent(ctx, c, "gpu-wrong", "TemplateDiverged"); err != nil {
			t.Error(err)
		}
		for group, want := range map[string]float64{"gpu-wrong": 1, "gpu-lying": 1, "gpu-generated": 0, "gpu-h200": 0} {
			got, err := e.pub.metric("accel_dra_template_publisher_template_divergences_total", `name="`+group+`"`)
			if err != nil && want > 0 {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: divergences_total = %v, want %v", group, got, want)
			}
		}
	})

	// Every key the lying seed stated is reported, before the devices; cpu and memory the
	// node's real values, whatever this machine has.
	t.Run("EveryCapacityKeyReported", func(t *testing.T) {
		md, err := waitForMD(ctx, cl, "gpu-lying", 2*time.Minute, fromNodes)
		if err != nil {
			t.Fatalf("the node's template did not replace the seed: %v\n%s", err, e.pub.Proc.LogTail(30))
		}
		report := md.Annotations[nodegroup.DivergenceAnnotation]
		for _, want := range []string{
			"cpu: template 64, node " + cpu,
			"memory: template 512Gi, node " + memory,
			"gpu-count: template 1, node 8",
			"taint dedicated:NoSchedule: template ml, node <none>",
			"label kubernetes.io/arch: template arm64, node amd64",
		} {
			if !strings.Contains(report, want) {
				t.Errorf("%s = %q, want it to say %q", nodegroup.DivergenceAnnotation, report, want)
			}
		}
		if err := waitForEvent(ctx, c, "gpu-lying", "TemplateDiverged"); err != nil {
			t.Error(err)
		}
	})
}
