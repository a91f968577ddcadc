package annotations

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

// TestRemoveWithoutMachinePools: a Cluster API without its MachinePool feature serves no
// MachinePools (the REST mapper has no match for the kind); the clean-up then cleans
// MachineDeployments and MachineSets as before instead of failing the uninstall.
// (TestUninstallRemovesAnnotations in e2e/publisher runs it against a real API server with all
// three kinds.)
func TestRemoveWithoutMachinePools(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clusterv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "capi", Name: "md"}}
	// What controller-runtime's client answers for a kind its REST mapper finds no resource for.
	noPools := interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*clusterv1.MachinePoolList); ok {
			return &apimeta.NoKindMatchError{GroupKind: schema.GroupKind{Group: clusterv1.GroupVersion.Group, Kind: "MachinePool"}, SearchedVersions: []string{clusterv1.GroupVersion.Version}}
		}
		return c.List(ctx, list, opts...)
	}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(md).WithInterceptorFuncs(noPools).Build()
	changed, err := Remove(context.Background(), c, "", "accel-dra-template-publisher")
	if err != nil {
		t.Fatalf("without MachinePools: %v", err)
	}
	if len(changed) != 0 {
		t.Errorf("changed %v, want nothing (the publisher wrote nothing)", changed)
	}
}
