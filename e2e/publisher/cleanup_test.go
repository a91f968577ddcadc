//go:build e2e

package publisher

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/cleanup/annotations"
	"github.com/accel-dra/accel-dra/pkg/publisher"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// TestUninstallRemovesAnnotations: the uninstall's clean-up (pkg/cleanup/annotations) against a
// real API server's server-side apply: the keys the publisher's field manager applied go, from
// MachineDeployments, MachineSets and MachinePools (node groups the publisher writes too), and
// an operator's annotations, on the same object and on one the publisher never wrote, stay.
func TestUninstallRemovesAnnotations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{})
	cl, err := framework.NewCAPIClient(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.InstallClusterAPI(ctx, c.RESTConfig(), cl); err != nil {
		t.Fatal(err)
	}
	written, err := framework.CreateNodeGroup(ctx, cl, "written", map[string]string{"example.com/owner": "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	untouched, err := framework.CreateNodeGroup(ctx, cl, "untouched", map[string]string{"example.com/owner": "team-b"})
	if err != nil {
		t.Fatal(err)
	}
	// The publisher's write, as pkg/publisher applies it: its keys, under its field manager.
	apply := func(obj client.Object, kind string, ann map[string]string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{
			"apiVersion": clusterv1.GroupVersion.String(), "kind": kind,
			"metadata": map[string]any{"name": obj.GetName(), "namespace": obj.GetNamespace(), "annotations": ann},
		})
		if err := cl.Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(publisher.FieldManager)); err != nil {
			t.Fatal(err)
		}
	}
	published := map[string]string{nodegroup.GPUCountKey: "8", nodegroup.DRADriverKey: "gpu.accel-dra.io", nodegroup.SourceAnnotation: nodegroup.SourceNodes}
	apply(written.MD, "MachineDeployment", published)
	apply(written.MS, "MachineSet", map[string]string{nodegroup.GPUCountKey: "8"})
	pool, err := framework.CreateMachinePool(ctx, cl, "pool", map[string]string{"example.com/owner": "team-c"})
	if err != nil {
		t.Fatal(err)
	}
	apply(pool.MP, "MachinePool", published)

	changed, err := annotations.Remove(ctx, cl, "", publisher.FieldManager)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"MachineDeployment/" + framework.CAPINamespace + "/written", "MachineSet/" + framework.CAPINamespace + "/written-abcde", "MachinePool/" + framework.CAPINamespace + "/pool"}
	if !slices.Equal(changed, want) {
		t.Errorf("changed %v, want %v", changed, want)
	}
	for _, o := range []client.Object{&clusterv1.MachineDeployment{}, &clusterv1.MachineSet{}, &clusterv1.MachinePool{}} {
		key := client.ObjectKeyFromObject(written.MD)
		switch o.(type) {
		case *clusterv1.MachineSet:
			key = client.ObjectKeyFromObject(written.MS)
		case *clusterv1.MachinePool:
			key = client.ObjectKeyFromObject(pool.MP)
		}
		if err := cl.Get(ctx, key, o); err != nil {
			t.Fatal(err)
		}
		for k := range published {
			if v, ok := o.GetAnnotations()[k]; ok {
				t.Errorf("%s: the publisher's %s=%q is still there", key, k, v)
			}
		}
	}
	var got clusterv1.MachineDeployment
	if err := cl.Get(ctx, client.ObjectKeyFromObject(written.MD), &got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations["example.com/owner"] != "team-a" {
		t.Errorf("the operator's annotation went with the publisher's: %v", got.Annotations)
	}
	var gotPool clusterv1.MachinePool
	if err := cl.Get(ctx, client.ObjectKeyFromObject(pool.MP), &gotPool); err != nil {
		t.Fatal(err)
	}
	if gotPool.Annotations["example.com/owner"] != "team-c" {
		t.Errorf("the operator's annotation on the MachinePool went with the publisher's: %v", gotPool.Annotations)
	}
	var md clusterv1.MachineDeployment
	if err := cl.Get(ctx, client.ObjectKeyFromObject(untouched.MD), &md); err != nil {
		t.Fatal(err)
	}
	if md.Annotations["example.com/owner"] != "team-b" || md.ResourceVersion != untouched.MD.ResourceVersion {
		t.Errorf("a group the publisher never wrote was changed: %v (resourceVersion %s, was %s)", md.Annotations, md.ResourceVersion, untouched.MD.ResourceVersion)
	}
	// Nothing left to remove: no change.
	if again, err := annotations.Remove(ctx, cl, "", publisher.FieldManager); err != nil || len(again) != 0 {
		t.Errorf("second run: changed %v, %v", again, err)
	}
}
