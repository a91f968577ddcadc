package publisher

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// builderIndexer registers AddIndexes' indexes on a fake client builder.
type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

type env struct {
	t        *testing.T
	ctx      context.Context
	client   client.Client
	r        *Reconciler
	recorder *events.FakeRecorder
}

// newEnv returns a reconciler on a fake client holding objs.
func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithReturnManagedFields()
	if err := AddIndexes(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	if err := AddMachinePoolIndexes(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	c := b.Build()
	rec := events.NewFakeRecorder(100)
	o := NewOptions()
	r := NewReconciler(c, rec, NewMetrics(prometheus.NewRegistry()), o)
	r.MachinePools = true
	_, ctx := ktesting.NewTestContext(t)
	return &env{t: t, ctx: ctx, client: c, r: r, recorder: rec}
}

func slicesOf(node string, s shape) []client.Object {
	var out []client.Object
	for _, sl := range gpuSlices(node, s) {
		out = append(out, sl.DeepCopy())
	}
	return out
}

func (e *env) reconcile(key GroupKey) {
	e.t.Helper()
	if _, err := e.r.Reconcile(e.ctx, key); err != nil {
		e.t.Fatalf("Reconcile(%s): %v", key, err)
	}
}

func (e *env) annotations(key GroupKey) map[string]string {
	e.t.Helper()
	obj, err := e.r.getGroup(e.ctx, key)
	if err != nil {
		e.t.Fatal(err)
	}
	return obj.GetAnnotations()
}

func (e *env) writes() float64 {
	return testutil.ToFloat64(e.r.Metrics.Writes.WithLabelValues("success"))
}

func (e *env) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// productOf decodes a group's template and returns the product name of its first device.
func productOf(t *testing.T, ann map[string]string) string {
	t.Helper()
	tmpl, err := template.Decode(ann)
	if err != nil {
		t.Fatalf("decoding the template: %v", err)
	}
	return *tmpl.Drivers[0].Devices[0].Attributes["productName"].StringValue
}

func TestReconcileMachineDeployment(t *testing.T) {
	md := machineDeployment("gpu", nil)
	old := machineSet("gpu-old", "gpu", 1, time.Hour)
	cur := machineSet("gpu-new", "gpu", 2, 0)
	objs := []client.Object{md, old, cur,
		machine("m-old", old, "node-old"), machine("m-new-1", cur, "node-new-1"), machine("m-new-2", cur, "node-new-2"),
		machine("m-nonode", cur, ""),
		gpuNode("node-old"), gpuNode("node-new-1"), gpuNode("node-new-2"),
	}
	objs = append(objs, slicesOf("node-old", a100)...)
	objs = append(objs, slicesOf("node-new-1", h100)...)
	objs = append(objs, slicesOf("node-new-2", h100)...)
	e := newEnv(t, objs...)
	key := GroupKey{KindMachineDeployment, ns, "gpu"}

	e.reconcile(key)
	ann := e.annotations(key)
	if got := productOf(t, ann); got != h100.product {
		t.Errorf("template from product %q, want the current revision's %q (old revision ignored)", got, h100.product)
	}
	for k, v := range map[string]string{nodegroup.GPUCountKey: "8", nodegroup.CPUKey: "96", nodegroup.SourceAnnotation: nodegroup.SourceNodes} {
		if ann[k] != v {
			t.Errorf("%s = %q, want %q", k, ann[k], v)
		}
	}
	if w := e.writes(); w != 1 {
		t.Errorf("writes = %v, want 1", w)
	}
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], "TemplatePublished") {
		t.Errorf("events = %q, want one TemplatePublished", ev)
	}

	// Steady state: no write.
	e.reconcile(key)
	if w := e.writes(); w != 1 {
		t.Errorf("writes after a second reconcile = %v, want still 1", w)
	}

	// The owned keys are tracked through managed fields.
	obj, _ := e.r.getGroup(e.ctx, key)
	owners := annotationOwners(obj)
	for _, k := range []string{template.HashAnnotation, nodegroup.CPUKey, nodegroup.SourceAnnotation} {
		if !slices.Contains(owners[k], FieldManager) {
			t.Errorf("publisher does not own %s after its write; owners %v", k, owners)
		}
	}

	// A node of the current revision starts publishing a different shape: conflict, template
	// kept, warning event and metric.
	var s resourceapi.ResourceSlice
	if err := e.client.Get(e.ctx, types.NamespacedName{Name: "node-new-2-gpu"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Devices = s.Spec.Devices[:7]
	if err := e.client.Update(e.ctx, &s); err != nil {
		t.Fatal(err)
	}
	e.reconcile(key)
	if diff := cmp.Diff(ann, e.annotations(key)); diff != "" {
		t.Errorf("annotations changed on a conflict (-before +after):\n%s", diff)
	}
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], ReasonNodesDisagree) || !strings.Contains(ev[0], "node-new-2") {
		t.Errorf("events = %q, want one %s naming node-new-2", ev, ReasonNodesDisagree)
	}
	if v := testutil.ToFloat64(e.r.Metrics.GroupsWithProblems.WithLabelValues(ReasonNodesDisagree)); v != 1 {
		t.Errorf("groups_with_problems{%s} = %v, want 1", ReasonNodesDisagree, v)
	}
	e.reconcile(key)
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("the same conflict reported again: %q", ev)
	}
	if v := testutil.ToFloat64(e.r.Metrics.Conflicts.WithLabelValues(ReasonNodesDisagree)); v != 1 {
		t.Errorf("conflicts_total{%s} = %v, want 1", ReasonNodesDisagree, v)
	}

	// Scale to zero: the machines and nodes go away, the annotations stay.
	for _, o := range []client.Object{
		&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m-new-1"}},
		&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m-new-2"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-new-1"}},
		&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-new-1-gpu"}},
	} {
		if err := e.client.Delete(e.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	e.reconcile(key)
	if diff := cmp.Diff(ann, e.annotations(key)); diff != "" {
		t.Errorf("annotations changed at zero (-before +after):\n%s", diff)
	}
	if v := testutil.ToFloat64(e.r.Metrics.GroupsWithProblems.WithLabelValues(ReasonNodesDisagree)); v != 0 {
		t.Errorf("groups_with_problems{%s} = %v at zero, want 0", ReasonNodesDisagree, v)
	}
	if w := e.writes(); w != 1 {
		t.Errorf("writes = %v, want still 1", w)
	}
}

func TestReconcileBareMachineSetAndCopyFrom(t *testing.T) {
	bare := machineSet("bare", "", 0, 0)
	owned := machineSet("owned", "gpu", 1, 0)
	seeded := machineDeployment("seeded", map[string]string{nodegroup.CopyFromAnnotation: "bare-md"})
	bareMD := machineDeployment("bare-md", nil)
	objs := []client.Object{bare, owned, seeded, bareMD, machineDeployment("gpu", nil),
		machine("m1", bare, "n1"), gpuNode("n1")}
	objs = append(objs, slicesOf("n1", a100)...)
	e := newEnv(t, objs...)

	// A MachineSet without a MachineDeployment is a group of its own.
	e.reconcile(GroupKey{KindMachineSet, ns, "bare"})
	if got := productOf(t, e.annotations(GroupKey{KindMachineSet, ns, "bare"})); got != a100.product {
		t.Errorf("bare MachineSet template product %q, want %q", got, a100.product)
	}
	// A MachineSet of a MachineDeployment is not.
	e.reconcile(GroupKey{KindMachineSet, ns, "owned"})
	if ann := e.annotations(GroupKey{KindMachineSet, ns, "owned"}); ann[template.HashAnnotation] != "" {
		t.Errorf("MachineSet owned by a MachineDeployment got a template")
	}
	e.events()

	// copy-from a MachineDeployment without a template: warning, nothing written.
	seededKey := GroupKey{KindMachineDeployment, ns, "seeded"}
	e.reconcile(seededKey)
	if ann := e.annotations(seededKey); ann[template.HashAnnotation] != "" {
		t.Errorf("copied a template that does not exist")
	}
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], ReasonCopyFromFailed) {
		t.Errorf("events = %q, want one %s", ev, ReasonCopyFromFailed)
	}

	// Give bare-md a template (as if it had nodes), then the copy works.
	src := e.annotations(GroupKey{KindMachineSet, ns, "bare"})
	md := &clusterv1.MachineDeployment{}
	if err := e.client.Get(e.ctx, types.NamespacedName{Namespace: ns, Name: "bare-md"}, md); err != nil {
		t.Fatal(err)
	}
	md.Annotations = src
	if err := e.client.Update(e.ctx, md); err != nil {
		t.Fatal(err)
	}
	keys := e.r.groupsOfMachineDeployment(e.ctx, md, false)
	if diff := cmp.Diff([]GroupKey{{KindMachineDeployment, ns, "bare-md"}, seededKey}, keys); diff != "" {
		t.Errorf("a change of bare-md does not requeue the group copying from it (-want +got):\n%s", diff)
	}
	e.reconcile(seededKey)
	ann := e.annotations(seededKey)
	if ann[template.HashAnnotation] != src[template.HashAnnotation] || ann[nodegroup.CPUKey] != src[nodegroup.CPUKey] {
		t.Errorf("copy: hash %q cpu %q, want %q %q", ann[template.HashAnnotation], ann[nodegroup.CPUKey], src[template.HashAnnotation], src[nodegroup.CPUKey])
	}
	if ann[nodegroup.SourceAnnotation] != "copy-from:"+ns+"/bare-md" {
		t.Errorf("source = %q", ann[nodegroup.SourceAnnotation])
	}
	if _, ok := ann[nodegroup.LabelsKey]; ok {
		t.Errorf("labels copied from another group")
	}
}

func TestEventMapping(t *testing.T) {
	md := machineDeployment("gpu", nil)
	ms := machineSet("gpu-1", "gpu", 1, 0)
	bare := machineSet("bare", "", 0, 0)
	e := newEnv(t, md, ms, bare,
		machine("m1", ms, "n1"), machine("m2", bare, "n2"), gpuNode("n1"), gpuNode("n2"))
	mdKey, bareKey := GroupKey{KindMachineDeployment, ns, "gpu"}, GroupKey{KindMachineSet, ns, "bare"}

	slice := slicesOf("n1", h100)[0].(*resourceapi.ResourceSlice)
	otherDriver := slice.DeepCopy()
	otherDriver.Spec.Driver = "nic.example.com"
	for _, tc := range []struct {
		name string
		got  []GroupKey
		want []GroupKey
	}{
		{"node of an MD's machine", e.r.groupsOfNode(e.ctx, nil, "n1"), []GroupKey{mdKey}},
		{"node of a bare MS's machine", e.r.groupsOfNode(e.ctx, nil, "n2"), []GroupKey{bareKey}},
		{"node without machine", e.r.groupsOfNode(e.ctx, nil, "n3"), nil},
		{"slice of a node", e.r.groupsOfSlice(e.ctx, slice, false), []GroupKey{mdKey}},
		{"slice of another driver", e.r.groupsOfSlice(e.ctx, otherDriver, false), nil},
		{"machineset", e.r.groupsOfMachineSet(e.ctx, ms, false), []GroupKey{mdKey}},
		{"bare machineset", e.r.groupsOfMachineSet(e.ctx, bare, false), []GroupKey{bareKey}},
		{"machine whose MachineSet is not known yet", e.r.groupsOfMachine(e.ctx, machine("m3", machineSet("later", "other", 1, 0), "n3"), false), []GroupKey{{KindMachineDeployment, ns, "other"}}},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// applyAs server-side applies annotations to a MachineDeployment as another field manager.
func (e *env) applyAs(manager, name string, ann map[string]string, force bool) error {
	md := &clusterv1.MachineDeployment{}
	if err := e.client.Get(e.ctx, types.NamespacedName{Namespace: ns, Name: name}, md); err != nil {
		return err
	}
	body := fmt.Sprintf(`{"apiVersion":%q,"kind":"MachineDeployment","metadata":{"name":%q,"namespace":%q,"annotations":%s}}`,
		clusterv1.GroupVersion.String(), name, ns, mustJSON(e.t, ann))
	opts := []client.PatchOption{client.FieldOwner(manager)}
	if force {
		opts = append(opts, client.ForceOwnership)
	}
	return e.client.Patch(e.ctx, md, client.RawPatch(types.ApplyPatchType, []byte(body)), opts...)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReconcileLeavesForeignKeysAlone(t *testing.T) {
	md := machineDeployment("gpu", nil)
	ms := machineSet("gpu-1", "gpu", 1, 0)
	objs := []client.Object{md, ms, machine("m1", ms, "n1"), gpuNode("n1")}
	objs = append(objs, slicesOf("n1", h100)...)
	e := newEnv(t, objs...)
	key := GroupKey{KindMachineDeployment, ns, "gpu"}
	e.reconcile(key)
	e.events()
	before := e.annotations(key)

	// An operator sets gpu-count and memory by hand (a forced apply, as `kubectl annotate
	// --overwrite` takes a field over): ownership moves to them.
	if err := e.applyAs("operator", "gpu", map[string]string{nodegroup.GPUCountKey: "16", nodegroup.MemoryKey: "2000Gi"}, true); err != nil {
		t.Fatal(err)
	}
	// The node's shape changes (7 GPUs): the publisher writes the new template but leaves the
	// operator's keys alone and says so once.
	var s resourceapi.ResourceSlice
	if err := e.client.Get(e.ctx, types.NamespacedName{Name: "n1-gpu"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Devices = s.Spec.Devices[:7]
	if err := e.client.Update(e.ctx, &s); err != nil {
		t.Fatal(err)
	}
	e.reconcile(key)
	ann := e.annotations(key)
	if ann[nodegroup.GPUCountKey] != "16" || ann[nodegroup.MemoryKey] != "2000Gi" {
		t.Errorf("operator's keys overwritten: gpu-count %q memory %q", ann[nodegroup.GPUCountKey], ann[nodegroup.MemoryKey])
	}
	if ann[template.HashAnnotation] == before[template.HashAnnotation] {
		t.Error("template not updated for the new shape")
	}
	ev := e.events()
	if len(ev) != 2 || !strings.Contains(strings.Join(ev, "\n"), ReasonAnnotationConflict) ||
		!strings.Contains(strings.Join(ev, "\n"), nodegroup.GPUCountKey+` (manager "operator")`) {
		t.Errorf("events = %q, want TemplatePublished and one %s naming gpu-count and the operator", ev, ReasonAnnotationConflict)
	}
	if v := testutil.ToFloat64(e.r.Metrics.GroupsWithProblems.WithLabelValues(ReasonAnnotationConflict)); v != 1 {
		t.Errorf("groups_with_problems{%s} = %v, want 1", ReasonAnnotationConflict, v)
	}
	writes := e.writes()
	e.reconcile(key)
	if w := e.writes(); w != writes {
		t.Errorf("a reconcile with an unchanged conflict wrote (%v → %v)", writes, w)
	}
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("the same conflict reported again: %q", ev)
	}

	// The operator hands memory back (removes it): the publisher manages it again.
	if err := e.applyAs("operator", "gpu", map[string]string{nodegroup.GPUCountKey: "16"}, true); err != nil {
		t.Fatal(err)
	}
	e.reconcile(key)
	ann = e.annotations(key)
	if ann[nodegroup.MemoryKey] != "1000Gi" || ann[nodegroup.GPUCountKey] != "16" {
		t.Errorf("after the operator dropped memory: memory %q (want 1000Gi), gpu-count %q (want 16)", ann[nodegroup.MemoryKey], ann[nodegroup.GPUCountKey])
	}
}

func TestReconcileTemplateConflictKeepsTemplate(t *testing.T) {
	md := machineDeployment("gpu", nil)
	ms := machineSet("gpu-1", "gpu", 1, 0)
	objs := []client.Object{md, ms, machine("m1", ms, "n1"), gpuNode("n1")}
	objs = append(objs, slicesOf("n1", h100)...)
	e := newEnv(t, objs...)
	key := GroupKey{KindMachineDeployment, ns, "gpu"}
	e.reconcile(key)
	before := e.annotations(key)
	// Someone pins the hash: a new template from the publisher would not decode against it, so
	// the publisher keeps its other template keys as they are.
	if err := e.applyAs("operator", "gpu", map[string]string{template.HashAnnotation: before[template.HashAnnotation]}, true); err != nil {
		t.Fatal(err)
	}
	var s resourceapi.ResourceSlice
	if err := e.client.Get(e.ctx, types.NamespacedName{Name: "n1-gpu"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Devices = s.Spec.Devices[:7]
	if err := e.client.Update(e.ctx, &s); err != nil {
		t.Fatal(err)
	}
	e.reconcile(key)
	ann := e.annotations(key)
	for _, k := range nodegroup.TemplateKeys {
		if ann[k] != before[k] {
			t.Errorf("template key %s changed although the hash is someone else's", k)
		}
	}
	if _, err := template.Decode(ann); err != nil {
		t.Errorf("template no longer decodes: %v", err)
	}
	if ann[nodegroup.GPUCountKey] != "7" {
		t.Errorf("gpu-count = %q, want 7 (not a template key, still the publisher's)", ann[nodegroup.GPUCountKey])
	}
}

func TestReconcileTakesOverSeed(t *testing.T) {
	md := machineDeployment("gpu", nil)
	ms := machineSet("gpu-1", "gpu", 1, 0)
	e := newEnv(t, md, ms)
	key := GroupKey{KindMachineDeployment, ns, "gpu"}
	// A seed from accelctl (its field manager), then the group's first node of another shape.
	if err := e.applyAs("accelctl", "gpu", map[string]string{nodegroup.GPUCountKey: "2", nodegroup.CPUKey: "8", nodegroup.SourceAnnotation: nodegroup.SourceSeed}, true); err != nil {
		t.Fatal(err)
	}
	for _, o := range append([]client.Object{machine("m1", ms, "n1"), gpuNode("n1")}, slicesOf("n1", h100)...) {
		o.SetResourceVersion("")
		if err := e.client.Create(e.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	e.reconcile(key)
	ann := e.annotations(key)
	if ann[nodegroup.GPUCountKey] != "8" || ann[nodegroup.CPUKey] != "96" || ann[nodegroup.SourceAnnotation] != nodegroup.SourceNodes {
		t.Errorf("seed not replaced by the node's values: %v", ann)
	}
	for _, ev := range e.events() {
		if strings.Contains(ev, ReasonAnnotationConflict) {
			t.Errorf("taking over a seed reported a conflict: %s", ev)
		}
	}
}

func TestConflictProblem(t *testing.T) {
	md := machineDeployment("gpu", nil)
	e := newEnv(t, md)
	if err := e.applyAs("operator", "gpu", map[string]string{nodegroup.GPUCountKey: "16"}, false); err != nil {
		t.Fatal(err)
	}
	err := e.applyAs(FieldManager, "gpu", map[string]string{nodegroup.GPUCountKey: "8", nodegroup.CPUKey: "96"}, false)
	p := conflictProblem(err)
	if p == nil {
		t.Fatalf("conflictProblem(%v) = nil, want a problem", err)
	}
	if p.Reason != ReasonAnnotationConflict || !strings.Contains(p.Message, nodegroup.GPUCountKey+` (manager "operator")`) || strings.Contains(p.Message, nodegroup.CPUKey) {
		t.Errorf("problem = %+v", p)
	}
	if p := conflictProblem(fmt.Errorf("some other error")); p != nil {
		t.Errorf("conflictProblem(other error) = %+v, want nil", p)
	}
}

func TestManagementModeUnreachableKeepsAnnotations(t *testing.T) {
	md := machineDeployment("gpu", map[string]string{nodegroup.CPUKey: "96", template.HashAnnotation: "sha256:kept"})
	ms := machineSet("gpu-1", "gpu", 1, 0)
	e := newEnv(t, md, ms, machine("m1", ms, "n1"))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	e.r.Workloads = &WorkloadClusters{Secrets: e.client, Scheme: e.client.Scheme(), SyncTimeout: 300 * time.Millisecond, ProbeInterval: time.Hour,
		Reachable: e.r.Metrics.WorkloadReachable}
	go func() { _ = e.r.Workloads.Start(ctx) }()
	key := GroupKey{KindMachineDeployment, ns, "gpu"}
	if got := ClusterOf(md); got != (ClusterRef{ns, "c1"}) {
		t.Fatalf("ClusterOf = %v", got)
	}

	// No kubeconfig Secret yet.
	if _, err := e.r.Reconcile(ctx, key); err != nil {
		t.Fatal(err)
	}
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], ReasonWorkloadClusterUnreachable) || !strings.Contains(ev[0], "c1-kubeconfig") {
		t.Errorf("events = %q, want one %s naming the Secret", ev, ReasonWorkloadClusterUnreachable)
	}

	// A Secret whose API server does not answer (a closed loopback port): the cache does not
	// sync, the group keeps its annotations, the cluster is reported unreachable.
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: w, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: w, user: {token: x}}]\ncontexts: [{name: w, context: {cluster: w, user: w}}]\ncurrent-context: w\n"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}},
		Data: map[string][]byte{KubeconfigSecretKey: []byte(kubeconfig)}}
	if err := e.client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if got := e.r.groupsOfSecret(ctx, secret, false); !slices.Equal(got, []GroupKey{key}) {
		t.Errorf("groupsOfSecret = %v, want [%v]", got, key)
	}
	res, err := e.r.Reconcile(ctx, key)
	if err != nil || res.RequeueAfter != time.Hour {
		t.Fatalf("Reconcile = %+v, %v; want a requeue after the probe interval", res, err)
	}
	if diff := cmp.Diff(md.Annotations, e.annotations(key)); diff != "" {
		t.Errorf("annotations changed while the workload cluster is unreachable (-want +got):\n%s", diff)
	}
	if v := testutil.ToFloat64(e.r.Metrics.WorkloadReachable.WithLabelValues(ns, "c1")); v != 0 {
		t.Errorf("workload_cluster_reachable = %v, want 0", v)
	}
	if v := testutil.ToFloat64(e.r.Metrics.GroupsWithProblems.WithLabelValues(ReasonWorkloadClusterUnreachable)); v != 1 {
		t.Errorf("groups_with_problems{%s} = %v, want 1", ReasonWorkloadClusterUnreachable, v)
	}
	if w := e.writes(); w != 0 {
		t.Errorf("writes = %v, want 0", w)
	}

	// A kubeconfig that does not parse is an error of its own, not a hang.
	secret.Data[KubeconfigSecretKey] = []byte("{not yaml")
	if err := e.client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Workloads.Reader(ctx, ClusterRef{ns, "c1"}); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("Reader with a broken kubeconfig: %v", err)
	}
}

func TestManagementGroupsOfNodeStayInTheirCluster(t *testing.T) {
	md := machineDeployment("gpu", nil)
	ms := machineSet("gpu-1", "gpu", 1, 0)
	other := machineDeployment("other", nil)
	other.Spec.ClusterName = "c2"
	oms := machineSet("other-1", "other", 1, 0)
	oms.Spec.ClusterName = "c2"
	om := machine("om1", oms, "n1") // the same node name in another workload cluster
	om.Spec.ClusterName = "c2"
	e := newEnv(t, md, ms, other, oms, machine("m1", ms, "n1"), om)
	if got := e.r.groupsOfNode(e.ctx, &ClusterRef{ns, "c1"}, "n1"); !slices.Equal(got, []GroupKey{{KindMachineDeployment, ns, "gpu"}}) {
		t.Errorf("groups of c1's n1 = %v", got)
	}
	if got := e.r.groupsOfNode(e.ctx, &ClusterRef{ns, "c2"}, "n1"); !slices.Equal(got, []GroupKey{{KindMachineDeployment, ns, "other"}}) {
		t.Errorf("groups of c2's n1 = %v", got)
	}
	if got := e.r.groupsOfCluster(e.ctx, ClusterRef{ns, "c2"}); !slices.Equal(got, []GroupKey{{KindMachineDeployment, ns, "other"}}) {
		t.Errorf("groups of cluster c2 = %v", got)
	}
}
