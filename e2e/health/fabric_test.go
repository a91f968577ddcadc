//go:build e2e

package health

import (
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// testFabric: on a GB200 tray (mock gb200-4x), an NVLink fabric whose health mask reports an
// unhealthy route taints the GPU with <driver>/fabric (value the condition) and shows in the
// running pod's status; the mask clearing removes both. Every other GPU of the tray stays
// untainted.
func (e *env) testFabric(t *testing.T) {
	const node, dev = "gb200-node", "gpu-1"
	n, err := e.c.AddNode(e.ctx, cluster.NodeOptions{Name: node})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.StartPlugin(e.ctx, e.c, n, framework.PluginOptions{Backend: "mock", Profile: "gb200-4x"}); err != nil {
		t.Fatal(err)
	}
	slices, err := framework.WaitForSlices(e.ctx, e.client, framework.GPUDriver, node, 4)
	if err != nil {
		t.Fatal(err)
	}
	var uuid string
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name == dev {
				uuid = *d.Attributes["uuid"].StringValue
			}
		}
	}
	if uuid == "" {
		t.Fatalf("no %s in the slices of %s", dev, node)
	}
	e.uuids["gb200-"+dev] = uuid
	e.template(t, "gb200-gpu-1-only", "gb200-"+dev)
	e.createPodOn(t, "fabric-user", "gb200-gpu-1-only", node)
	e.waitPodHealth(t, "fabric-user", "Healthy", "")

	faults := filepath.Join(n.PluginDataDir(framework.GPUDriver), "mock", health.FaultDir)
	if err := os.MkdirAll(faults, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(faults, "."+dev+".tmp")
	if err := os.WriteFile(tmp, []byte("fabric route-unhealthy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(faults, dev)); err != nil {
		t.Fatal(err)
	}
	key := framework.GPUDriver + "/" + string(health.CauseFabric)
	taint := e.waitTaintOn(t, node, dev, key, true)
	if taint.Value != health.FabricRouteUnhealthy || taint.Effect != resourceapi.DeviceTaintEffectNoSchedule || taint.TimeAdded == nil {
		t.Errorf("fabric taint %+v, want value %s, NoSchedule, a timeAdded", taint, health.FabricRouteUnhealthy)
	}
	e.waitPodHealth(t, "fabric-user", "Unhealthy", "route-unhealthy")
	for _, other := range []string{"gpu-0", "gpu-2", "gpu-3"} {
		e.waitTaintOn(t, node, other, key, false)
	}

	if err := os.Remove(filepath.Join(faults, dev)); err != nil {
		t.Fatal(err)
	}
	e.waitTaintOn(t, node, dev, key, false)
	e.waitPodHealth(t, "fabric-user", "Healthy", "")
	e.deletePod(t, "fabric-user")
}
