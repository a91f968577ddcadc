package accelctl

import (
	"context"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestGroupsWithoutMachinePools: a Cluster API without its MachinePool feature serves no
// MachinePools (no REST mapping for the kind); accelctl then lists and finds the other node
// groups as before, and a machinepool/ reference says there is none. (TestAccelctlMachinePool
// in e2e/publisher runs the binary against an API server that serves all three.)
func TestGroupsWithoutMachinePools(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clusterv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	noMatch := func(kind string) error {
		return &apimeta.NoKindMatchError{GroupKind: schema.GroupKind{Group: clusterv1.GroupVersion.Group, Kind: kind}, SearchedVersions: []string{clusterv1.GroupVersion.Version}}
	}
	isPool := func(o runtime.Object) bool {
		gvk := o.GetObjectKind().GroupVersionKind()
		return gvk.Kind == "MachinePool" || gvk.Kind == "MachinePoolList"
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "capi", Name: "md"}}).
		WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if isPool(list) {
					return noMatch("MachinePool")
				}
				return c.List(ctx, list, opts...)
			},
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if isPool(obj) {
					return noMatch("MachinePool")
				}
				return c.Get(ctx, key, obj, opts...)
			},
		}).Build()
	cl := NewCluster(c)
	groups, err := cl.ListGroups(context.Background(), "capi")
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Kind != "MachineDeployment" {
		t.Errorf("groups %v, want the MachineDeployment", groups)
	}
	if g, err := cl.GetGroup(context.Background(), "capi", "md"); err != nil || g.Kind != "MachineDeployment" {
		t.Errorf("md: %v, %v", g, err)
	}
	if _, err := cl.GetGroup(context.Background(), "capi", "machinepool/md"); err == nil {
		t.Error("machinepool/md found a group where MachinePools are not served")
	}
}
