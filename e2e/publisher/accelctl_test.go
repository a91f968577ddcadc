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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// TestAccelctlMachinePool: MachinePools are node groups (the publisher writes them, the
// autoscaler scales them), so accelctl seeds, shows and lists them as it does
// MachineDeployments: by machinepool/<name> (mp/<name>), and by a bare name that no
// MachineDeployment or MachineSet has. The real accelctl binary against a real API server.
func TestAccelctlMachinePool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := startEnv(ctx, t)
	pool, err := framework.CreateMachinePool(ctx, e.cl, "pool", nil)
	if err != nil {
		t.Fatal(err)
	}
	generated, err := runAccelctl(ctx, e.c, "template", "generate", "--profile", "h100-8x-2numa", "--cpu", "96", "--memory", "1000Gi")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(e.dir, "seed.yaml")
	if err := os.WriteFile(file, []byte(generated), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runAccelctl(ctx, e.c, "template", "seed", "machinepool/pool", "-n", framework.CAPINamespace, "-f", file); err != nil {
		t.Fatalf("seeding machinepool/pool: %v\n%s", err, out)
	}
	var mp clusterv1.MachinePool
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(pool.MP), &mp); err != nil {
		t.Fatal(err)
	}
	if mp.Annotations[nodegroup.SourceAnnotation] != nodegroup.SourceSeed || mp.Annotations[nodegroup.GPUCountKey] != "8" {
		t.Errorf("MachinePool after accelctl template seed: source %q, gpu-count %q; want seed and 8", mp.Annotations[nodegroup.SourceAnnotation], mp.Annotations[nodegroup.GPUCountKey])
	}
	for _, ref := range []string{"machinepool/pool", "mp/pool", "pool"} {
		out, err := runAccelctl(ctx, e.c, "template", "show", ref, "-n", framework.CAPINamespace, "-o", "annotations")
		if err != nil || !strings.Contains(out, nodegroup.GPUCountKey) {
			t.Errorf("accelctl template show %s: %v\n%s", ref, err, out)
		}
	}
	out, err := runAccelctl(ctx, e.c, "template", "list", "-n", framework.CAPINamespace, "-o", "name")
	if err != nil || strings.TrimSpace(out) != "machinepool/pool" {
		t.Errorf("accelctl template list -o name: %q (%v), want machinepool/pool", out, err)
	}
}
