package publisher

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

func machinePool(name string, providerIDs []string, nodeRefs ...string) *clusterv1.MachinePool {
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-mp-" + name),
			Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}},
		Spec: clusterv1.MachinePoolSpec{ClusterName: "c1", ProviderIDList: providerIDs},
	}
	for _, n := range nodeRefs {
		mp.Status.NodeRefs = append(mp.Status.NodeRefs, corev1.ObjectReference{Kind: "Node", Name: n})
	}
	return mp
}

func withProviderID(n *corev1.Node, id string) *corev1.Node {
	n.Spec.ProviderID = id
	return n
}

func TestNormalizedProviderID(t *testing.T) {
	for in, want := range map[string]string{
		"aws:///us-east-1a/i-0123": "i-0123",
		"fake://capi/pool-0":       "pool-0",
		"plain":                    "plain",
		"azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/v/virtualMachines/0": "azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/v/virtualMachines/0",
		"": "",
	} {
		if got := NormalizedProviderID(in); got != want {
			t.Errorf("NormalizedProviderID(%q) = %q, want %q", in, got, want)
		}
	}
}

// A MachinePool is a node group of its own: its nodes are those whose spec.providerID is in its
// spec.providerIDList (as the autoscaler finds them), not those of any MachineSet, and its
// annotations get the template.
func TestReconcileMachinePool(t *testing.T) {
	mp := machinePool("pool", []string{"aws:///zone-a/i-1", "aws:///zone-a/i-2", "aws:///zone-a/i-gone"}, "pool-1")
	objs := []client.Object{mp,
		withProviderID(gpuNode("pool-1"), "aws:///zone-a/i-1"),
		withProviderID(gpuNode("pool-2"), "aws:///zone-a/i-2"),
		// Not in the pool's list: an A100 node of something else.
		withProviderID(gpuNode("other"), "aws:///zone-a/i-3"),
	}
	objs = append(objs, slicesOf("pool-1", h100)...)
	objs = append(objs, slicesOf("pool-2", h100)...)
	objs = append(objs, slicesOf("other", a100)...)
	e := newEnv(t, objs...)
	key := GroupKey{KindMachinePool, ns, "pool"}

	e.reconcile(key)
	ann := e.annotations(key)
	if got := productOf(t, ann); got != h100.product {
		t.Errorf("template from product %q, want the pool's nodes' %q", got, h100.product)
	}
	for k, v := range map[string]string{nodegroup.GPUCountKey: "8", nodegroup.CPUKey: "96", nodegroup.SourceAnnotation: nodegroup.SourceNodes} {
		if ann[k] != v {
			t.Errorf("%s = %q, want %q", k, ann[k], v)
		}
	}
	nodes, err := e.r.machinePoolNodes(e.ctx, mp, e.client, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Node.Name)
	}
	if diff := cmp.Diff([]string{"pool-1", "pool-2"}, names); diff != "" {
		t.Errorf("nodes of the pool (-want +got):\n%s", diff)
	}

	// A pool at zero keeps its annotations.
	e.pool(mp, nil)
	e.reconcile(key)
	if diff := cmp.Diff(ann, e.annotations(key)); diff != "" {
		t.Errorf("annotations changed at zero (-before +after):\n%s", diff)
	}
}

// pool sets a MachinePool's providerIDList.
func (e *env) pool(mp *clusterv1.MachinePool, ids []string) {
	e.t.Helper()
	cur := &clusterv1.MachinePool{}
	if err := e.client.Get(e.ctx, client.ObjectKeyFromObject(mp), cur); err != nil {
		e.t.Fatal(err)
	}
	cur.Spec.ProviderIDList = ids
	if err := e.client.Update(e.ctx, cur); err != nil {
		e.t.Fatal(err)
	}
}

func TestMachinePoolEventMapping(t *testing.T) {
	mp := machinePool("pool", []string{"fake://capi/pool-1"}, "pool-1")
	// A node that left the list but is still in status.nodeRefs (CAPI has not caught up).
	leaving := machinePool("leaving", nil, "pool-9")
	md := machineDeployment("gpu", nil)
	ms := machineSet("gpu-1", "gpu", 1, 0)
	copying := machinePool("copying", nil)
	copying.Annotations = map[string]string{nodegroup.CopyFromAnnotation: "gpu"}
	e := newEnv(t, mp, leaving, md, ms, copying, machine("m1", ms, "n1"),
		withProviderID(gpuNode("pool-1"), "fake://capi/pool-1"), gpuNode("n1"), gpuNode("pool-9"))
	poolKey, mdKey := GroupKey{KindMachinePool, ns, "pool"}, GroupKey{KindMachineDeployment, ns, "gpu"}

	slice := slicesOf("pool-1", h100)[0].(*resourceapi.ResourceSlice)
	for _, tc := range []struct {
		name string
		got  []GroupKey
		want []GroupKey
	}{
		{"node of a pool (providerID)", e.r.groupsOfNode(e.ctx, nil, "pool-1"), []GroupKey{poolKey}},
		{"node only in a pool's nodeRefs", e.r.groupsOfNode(e.ctx, nil, "pool-9"), []GroupKey{{KindMachinePool, ns, "leaving"}}},
		{"node of an MD", e.r.groupsOfNode(e.ctx, nil, "n1"), []GroupKey{mdKey}},
		{"slice of a pool's node", e.r.groupsOfSlice(e.ctx, slice, false), []GroupKey{poolKey}},
		{"the pool itself", e.r.groupsOfMachinePool(e.ctx, mp, false), []GroupKey{poolKey}},
		{"a pool copying from an MD", e.r.groupsOfMachineDeployment(e.ctx, md, false), []GroupKey{mdKey, {KindMachinePool, ns, "copying"}}},
		{"groups of the cluster", e.r.groupsOfCluster(e.ctx, ClusterRef{ns, "c1"}), []GroupKey{mdKey, {KindMachinePool, ns, "copying"}, {KindMachinePool, ns, "leaving"}, poolKey}},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// The MachinePool CRD is optional: without it the publisher must start and leave pools out.
func TestMachinePoolsServed(t *testing.T) {
	gv := clusterv1.GroupVersion
	without := apimeta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	without.Add(gv.WithKind(KindMachineDeployment), apimeta.RESTScopeNamespace)
	with := apimeta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	with.Add(gv.WithKind(KindMachineDeployment), apimeta.RESTScopeNamespace)
	with.Add(gv.WithKind(KindMachinePool), apimeta.RESTScopeNamespace)
	for name, tc := range map[string]struct {
		mapper apimeta.RESTMapper
		want   bool
	}{"without the CRD": {without, false}, "with the CRD": {with, true}} {
		got, err := MachinePoolsServed(tc.mapper)
		if err != nil || got != tc.want {
			t.Errorf("%s: MachinePoolsServed = %v, %v; want %v", name, got, err, tc.want)
		}
	}
}

// In management mode node names repeat across workload clusters: a pool's node events come
// only from its own cluster.
func TestManagementMachinePoolsStayInTheirCluster(t *testing.T) {
	mine := machinePool("mine", nil, "n1")
	theirs := machinePool("theirs", nil, "n1")
	theirs.Spec.ClusterName = "c2"
	e := newEnv(t, mine, theirs)
	if got := e.r.groupsOfNode(e.ctx, &ClusterRef{ns, "c1"}, "n1"); !cmp.Equal(got, []GroupKey{{KindMachinePool, ns, "mine"}}) {
		t.Errorf("groups of c1's n1 = %v", got)
	}
	if got := e.r.groupsOfCluster(e.ctx, ClusterRef{ns, "c2"}); !cmp.Equal(got, []GroupKey{{KindMachinePool, ns, "theirs"}}) {
		t.Errorf("groups of cluster c2 = %v", got)
	}
}
