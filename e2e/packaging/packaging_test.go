//go:build e2e

// Package packaging tests the Helm chart (deployments/helm) against a real control plane: every
// rendered object is server-side applied, the admission policy confines each plugin's token to
// its own node's ResourceSlices, the real plugin binary runs with the chart's args under the
// chart's ServiceAccount on a real kubelet, and the real template publisher under its own.
//
//	KUBE_BIN_DIR=... go test -tags e2e -v -timeout 20m ./e2e/packaging/
package packaging

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/deployments/helm"
	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/sharing/mpspod"
)

const (
	releaseNS    = "accel-dra"
	fieldManager = "e2e-helm"
	gpuDriver    = "gpu.accel-dra.io"
	npuDriver    = "npu.accel-dra.io"
	// fakeNodeLabel is the chart's mock node selector here. Only Node objects without a kubelet
	// carry it, never a real kubelet's node: the DaemonSet's pods would mount host paths
	// (/var/lib/kubelet, /dev) through it. The plugin runs as a process instead, with the
	// DaemonSet's args and identity.
	fakeNodeLabel = "e2e.accel-dra.io/fake-plugin-node"
)

// valueSets are the installations applied to the cluster, as a user would pass them with -f and
// --set. The unit tests in deployments/helm render the same sets and check their content.
var valueSets = []struct {
	name   string
	file   string
	values map[string]any
}{
	{name: "default", values: devicePluginOff},
	{name: "gpu-operator", values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaDriverRoot": "/run/nvidia/driver", "nvidiaDevicePluginDisabled": true}}}},
	{name: "mock-flag", values: map[string]any{"mock": map[string]any{"enabled": true}}},
	{name: "mock-file", file: "values-mock.yaml"},
	{name: "npu", values: map[string]any{"drivers": map[string]any{
		"gpu": map[string]any{"enabled": false}, "npu": map[string]any{"enabled": true},
	}}},
	{name: "no-surge-extended-resource", values: map[string]any{
		"plugin": map[string]any{"rollingUpdateWithSurge": false},
		"drivers": map[string]any{"gpu": map[string]any{
			"deviceClass":                map[string]any{"extendedResourceName": "accel-dra.io/gpu"},
			"nvidiaDevicePluginDisabled": true,
		}},
	}},
	{name: "publisher", file: "values-mock.yaml", values: map[string]any{"publisher": map[string]any{"enabled": true}}},
	{name: "publisher-watch-namespace", values: merge(devicePluginOff, map[string]any{"publisher": map[string]any{"enabled": true, "watchNamespace": capiNamespace}})},
}

// devicePluginOff states what the chart requires of the nvml backend: no NVIDIA device plugin
// on its nodes.
var devicePluginOff = map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaDevicePluginDisabled": true}}}

func userValues(t *testing.T, file string, set map[string]any) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if file != "" {
		var err error
		if vals, err = helm.ValuesFile(file); err != nil {
			t.Fatal(err)
		}
	}
	return merge(vals, set)
}

func merge(dst, src map[string]any) map[string]any {
	out := maps.Clone(dst)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := out[k].(map[string]any); ok {
				out[k] = merge(dm, sm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// env is one control plane shared by the package's scenarios.
type env struct {
	c      *cluster.Cluster
	client kubernetes.Interface
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func TestPackaging(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{})
	e := &env{c: c, client: c.Client()}
	var err error
	if e.dyn, err = dynamic.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	e.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(e.client.Discovery()))
	// The release namespace, and the Cluster API namespace a publisher.watchNamespace names.
	for _, ns := range []string{releaseNS, capiNamespace} {
		if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Each value set in turn: they share cluster-scoped names (DeviceClasses, the policy).
	for _, vs := range valueSets {
		ok := t.Run("Apply/"+vs.name, func(t *testing.T) {
			e.testApply(ctx, t, userValues(t, vs.file, vs.values))
		})
		if !ok {
			t.FailNow()
		}
	}

	// The mock installation stays for the remaining scenarios.
	fakeNodes := map[string]any{fakeNodeLabel: "true"}
	vals := userValues(t, "values-mock.yaml", map[string]any{
		"mock":      map[string]any{"nodeSelector": fakeNodes},
		"publisher": map[string]any{"enabled": true, "nodeSelector": fakeNodes},
	})
	r, err := helm.Render(helm.Options{Namespace: releaseNS, Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.apply(ctx, r.Objects); err != nil {
		t.Fatal(err)
	}
	e.waitPolicyActive(ctx, t, r)
	t.Run("WorkloadPodsAdmitted", func(t *testing.T) { e.testWorkloadPods(ctx, t, r) })
	t.Run("NodeScopedSlices", func(t *testing.T) { e.testNodeScopedSlices(ctx, t, r) })
	t.Run("NodeScopedMPSDaemonPods", func(t *testing.T) { e.testNodeScopedMPSDaemons(ctx, t, r) })
	t.Run("NodeScopedLabel", func(t *testing.T) { e.testNodeScopedLabel(ctx, t, r) })
	t.Run("PluginRBACIsLeast", func(t *testing.T) { e.testPluginRBAC(ctx, t, r) })
	var node string
	if !t.Run("PluginRunsWithChartArgsAndIdentity", func(t *testing.T) { node = e.testPluginRuns(ctx, t, r, vals) }) {
		t.FailNow()
	}
	t.Run("PublisherRunsWithChartArgsAndIdentity", func(t *testing.T) { e.testPublisherRuns(ctx, t, r, vals, node) })
}

// testApply server-side applies every rendered object, checks that a second apply changes
// nothing (no churn on `helm upgrade`), that the admission policy type-checks, and deletes them.
func (e *env) testApply(ctx context.Context, t *testing.T, vals map[string]any) {
	r, err := helm.Render(helm.Options{Namespace: releaseNS, Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.apply(ctx, r.Objects); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.deleteAll(context.Background(), r.Objects); err != nil {
			t.Errorf("deleting: %v", err)
		}
	})
	// Controllers write the status of some objects (DaemonSets, the policy), which changes their
	// resourceVersion but not their generation; objects without a generation have no status.
	version := func(o *unstructured.Unstructured) string {
		if o.GetGeneration() > 0 {
			return "generation " + strconv.FormatInt(o.GetGeneration(), 10)
		}
		return "resourceVersion " + o.GetResourceVersion()
	}
	versions := map[string]string{}
	for _, o := range r.Objects {
		got, err := e.get(ctx, o)
		if err != nil {
			t.Fatalf("%s after apply: %v", key(o), err)
		}
		versions[key(o)] = version(got)
	}
	if err := e.apply(ctx, r.Objects); err != nil {
		t.Fatal(err)
	}
	for _, o := range r.Objects {
		got, err := e.get(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if v := version(got); v != versions[key(o)] {
			t.Errorf("%s: a second apply of the same manifest changed it (%s -> %s)", key(o), versions[key(o)], v)
		}
	}
	e.waitPolicyActive(ctx, t, r)
	t.Logf("applied %d objects: %s", len(r.Objects), strings.Join(mapSlice(r.Objects, key), ", "))
}

// waitPolicyActive waits until the apiserver has type-checked every rendered admission policy
// and fails on any type-check warning (a misspelt field, a type error in an expression).
func (e *env) waitPolicyActive(ctx context.Context, t *testing.T, r *helm.Rendered) {
	t.Helper()
	vaps := r.OfKind("ValidatingAdmissionPolicy")
	if len(vaps) == 0 {
		t.Fatal("no ValidatingAdmissionPolicy rendered")
	}
	for _, vap := range vaps {
		name := vap.GetName()
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := e.client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.TypeChecking == nil || p.Status.ObservedGeneration != p.Generation {
				return false, nil
			}
			if w := p.Status.TypeChecking.ExpressionWarnings; len(w) > 0 {
				return false, fmt.Errorf("policy %s type-check warnings: %+v", name, w)
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("policy %s: %v", name, err)
		}
	}
}

func key(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	return o.GetKind() + " " + o.GetName()
}

func mapSlice[T any](in []T, f func(T) string) []string {
	out := make([]string, 0, len(in))
	for _, v := range in {
		out = append(out, f(v))
	}
	return out
}

func (e *env) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key(o), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := o.GetNamespace()
		if ns == "" {
			ns = releaseNS
		}
		return e.dyn.Resource(m.Resource).Namespace(ns), nil
	}
	return e.dyn.Resource(m.Resource), nil
}

// apply server-side applies objs, as `helm install --server-side` and `kubectl apply
// --server-side` do: the apiserver validates every field and refuses unknown ones.
func (e *env) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		ri, err := e.resource(o)
		if err != nil {
			return err
		}
		if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying %s: %w", key(o), err)
		}
	}
	return nil
}

func (e *env) get(ctx context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := e.resource(o)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, o.GetName(), metav1.GetOptions{})
}

func (e *env) deleteAll(ctx context.Context, objs []*unstructured.Unstructured) error {
	var errs []error
	for _, o := range objs {
		ri, err := e.resource(o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, o := range objs {
			if _, err := e.get(ctx, o); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

// pluginSA returns the ServiceAccount of a driver's DaemonSet.
func pluginSA(t *testing.T, r *helm.Rendered, driver string) string {
	t.Helper()
	ds, err := r.PluginDaemonSet(driver)
	if err != nil {
		t.Fatal(err)
	}
	sa, _, _ := unstructured.NestedString(ds.Object, "spec", "template", "spec", "serviceAccountName")
	if sa == "" {
		t.Fatalf("DaemonSet %s has no serviceAccountName", ds.GetName())
	}
	return sa
}

// boundPod creates a pod of the ServiceAccount on a node, standing in for the DaemonSet's pod
// there: a token bound to it carries the node's name, as the kubelet's projected token does.
func (e *env) boundPod(ctx context.Context, t *testing.T, sa, node string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: sa + "-on-" + node},
		Spec: corev1.PodSpec{
			ServiceAccountName:            sa,
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers:                    []corev1.Container{{Name: "plugin", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	pod, err := e.client.CoreV1().Pods(releaseNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.client.CoreV1().Pods(releaseNS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	})
	return pod
}

// token requests a token of sa, bound to pod if it is not nil.
func (e *env) token(ctx context.Context, t *testing.T, sa string, pod *corev1.Pod) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := e.client.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	return tr.Status.Token
}

func (e *env) clientFor(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := e.c.RESTConfig()
	cfg.BearerToken = token
	cl, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// whoAmI returns the node name the apiserver sees in a token, through SelfSubjectReview.
func whoAmI(ctx context.Context, t *testing.T, cl kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	r, err := cl.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.UserInfo
}

func slice(name, driver string, node *string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: "pool-" + name, Generation: 1, ResourceSliceCount: 1},
			NodeName: node,
			Devices:  []resourceapi.Device{{Name: "dev-0"}},
		},
	}
	if node == nil {
		s.Spec.AllNodes = ptr.To(true)
	}
	return s
}

func (e *env) createNode(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	_, err := e.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// testWorkloadPods gives the DaemonSets and the publisher Deployment a node (an object without a
// kubelet, so nothing runs) and checks that their controllers create their pods: pod admission
// (priority class, pod security, service account) accepts what the chart's pod templates ask
// for.
func (e *env) testWorkloadPods(ctx context.Context, t *testing.T, r *helm.Rendered) {
	const node = "fake-plugin-node"
	_, err := e.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{fakeNodeLabel: "true"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = e.client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
		_ = e.client.CoreV1().Pods(releaseNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))},
			metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + helm.DefaultReleaseName})
	})
	for _, ds := range append(r.OfKind("DaemonSet"), r.OfKind("Deployment")...) {
		var pods *corev1.PodList
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			sel, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "selector", "matchLabels")
			var err error
			pods, err = e.client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: labels(sel)})
			return err == nil && len(pods.Items) > 0, nil
		})
		if err != nil {
			msg := ""
			if evs, err := e.client.CoreV1().Events(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
				for _, ev := range evs.Items {
					msg += "\n  event " + ev.InvolvedObject.Name + " " + ev.Reason + ": " + ev.Message
				}
			}
			t.Errorf("%s created no pod for node %s: %v%s", key(ds), node, err, msg)
			continue
		}
		p := pods.Items[0]
		sa, _, _ := unstructured.NestedString(ds.Object, "spec", "template", "spec", "serviceAccountName")
		if p.Spec.ServiceAccountName != sa {
			t.Errorf("pod %s: service account %q, want %q", p.Name, p.Spec.ServiceAccountName, sa)
		}
		if ds.GetKind() == "DaemonSet" && (p.Spec.PriorityClassName != "system-node-critical" || p.Spec.Priority == nil) {
			t.Errorf("pod %s: priority class %q (%v)", p.Name, p.Spec.PriorityClassName, p.Spec.Priority)
		}
	}
}

func labels(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// wantForbidden checks that err is the policy's (or RBAC's) refusal and mentions want.
func wantForbidden(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want forbidden", what)
		return
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want forbidden with %q", what, err, want)
	}
}

// testNodeScopedSlices: a plugin token bound to a pod on node A writes its own node's slices of
// its own driver and nothing else; a token not bound to a pod writes none.
func (e *env) testNodeScopedSlices(ctx context.Context, t *testing.T, r *helm.Rendered) {
	e.createNode(ctx, t, "node-a")
	e.createNode(ctx, t, "node-b")
	gpuSA, npuSA := pluginSA(t, r, gpuDriver), pluginSA(t, r, npuDriver)
	gpuA := e.clientFor(t, e.token(ctx, t, gpuSA, e.boundPod(ctx, t, gpuSA, "node-a")))
	npuB := e.clientFor(t, e.token(ctx, t, npuSA, e.boundPod(ctx, t, npuSA, "node-b")))
	unbound := e.clientFor(t, e.token(ctx, t, gpuSA, nil))

	// No extra apiserver flag is needed: the token carries the pod's node (1.32+).
	if u := whoAmI(ctx, t, gpuA); !slices.Equal(u.Extra["authentication.kubernetes.io/node-name"], []string{"node-a"}) {
		t.Fatalf("pod-bound token's user %+v lacks node-name node-a", u)
	}
	admin := e.client.ResourceV1().ResourceSlices()
	mine := gpuA.ResourceV1().ResourceSlices()
	t.Cleanup(func() {
		_ = admin.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})

	// The apiserver picks up a new or changed policy within about a second (it refreshes its
	// compiled policies every second); until then an earlier value set's policy, which names
	// only one driver, may still apply. A dry run goes through admission without writing.
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		_, errA := mine.Create(ctx, slice("probe", gpuDriver, ptr.To("node-b")), dryRun)
		_, errB := npuB.ResourceV1().ResourceSlices().Create(ctx, slice("probe", gpuDriver, ptr.To("node-b")), dryRun)
		return apierrors.IsForbidden(errA) && apierrors.IsForbidden(errB), nil
	}); err != nil {
		t.Fatalf("the policy never refused both plugins' probes: %v", err)
	}

	// Its own node and driver: create, update, delete.
	s, err := mine.Create(ctx, slice("gpu-a", gpuDriver, ptr.To("node-a")), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("plugin on node-a creating its own slice: %v", err)
	}
	s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: "dev-1"})
	if s, err = mine.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("plugin on node-a updating its own slice: %v", err)
	}
	if _, err := npuB.ResourceV1().ResourceSlices().Create(ctx, slice("npu-b", npuDriver, ptr.To("node-b")), metav1.CreateOptions{}); err != nil {
		t.Errorf("NPU plugin on node-b creating its own slice: %v", err)
	}

	// Another node's slices: neither create nor, for one the admin made, update or delete.
	_, err = mine.Create(ctx, slice("gpu-b", gpuDriver, ptr.To("node-b")), metav1.CreateOptions{})
	wantForbidden(t, "plugin on node-a creating a slice of node-b", err, "may not modify ResourceSlices of node 'node-b'")
	other, err := admin.Create(ctx, slice("gpu-b-admin", gpuDriver, ptr.To("node-b")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other.Spec.Devices = nil
	_, err = mine.Update(ctx, other, metav1.UpdateOptions{})
	wantForbidden(t, "plugin on node-a updating a slice of node-b", err, "node 'node-b'")
	err = mine.Delete(ctx, other.Name, metav1.DeleteOptions{})
	wantForbidden(t, "plugin on node-a deleting a slice of node-b", err, "node 'node-b'")

	// Slices that are not node-local, and another driver's on its own node.
	_, err = mine.Create(ctx, slice("gpu-all", gpuDriver, nil), metav1.CreateOptions{})
	wantForbidden(t, "plugin on node-a creating an all-nodes slice", err, "not node-local")
	_, err = mine.Create(ctx, slice("npu-a", npuDriver, ptr.To("node-a")), metav1.CreateOptions{})
	wantForbidden(t, "GPU plugin creating an NPU slice on its node", err, "may not modify ResourceSlices of driver npu.accel-dra.io")
	_, err = npuB.ResourceV1().ResourceSlices().Create(ctx, slice("gpu-b2", gpuDriver, ptr.To("node-b")), metav1.CreateOptions{})
	wantForbidden(t, "NPU plugin creating a GPU slice on its node", err, "of driver gpu.accel-dra.io")

	// A token not bound to a pod (a leaked or hand-made one) writes nothing.
	_, err = unbound.ResourceV1().ResourceSlices().Create(ctx, slice("gpu-a2", gpuDriver, ptr.To("node-a")), metav1.CreateOptions{})
	wantForbidden(t, "unbound plugin token creating a slice", err, "not bound to a pod")

	// Other users are not affected by the policy.
	if err := admin.Delete(ctx, other.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("admin deleting node-b's slice: %v", err)
	}
	if err := mine.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("plugin on node-a deleting its own slice: %v", err)
	}
}

// testNodeScopedMPSDaemons: the GPU plugin's token bound to a pod on node A creates and deletes
// the MPS control daemon pods the plugin builds (mpspod) for node A, and nothing else: no daemon
// pod of another node, no pod that is not a daemon's (the plugin pods beside it), no daemon pod
// with API credentials; a token not bound to a pod none at all.
func (e *env) testNodeScopedMPSDaemons(ctx context.Context, t *testing.T, r *helm.Rendered) {
	e.createNode(ctx, t, "mps-node-a")
	e.createNode(ctx, t, "mps-node-b")
	sa := pluginSA(t, r, gpuDriver)
	self := e.boundPod(ctx, t, sa, "mps-node-a")
	mine := e.clientFor(t, e.token(ctx, t, sa, self)).CoreV1().Pods(releaseNS)
	unbound := e.clientFor(t, e.token(ctx, t, sa, nil)).CoreV1().Pods(releaseNS)
	admin := e.client.CoreV1().Pods(releaseNS)
	daemon := func(node, key string) *corev1.Pod {
		return mpspod.Pods{Namespace: releaseNS, NodeName: node, DriverName: gpuDriver, Image: "accel-dra-kubelet-plugin:dev", HostDriverRoot: "/"}.
			Pod(sharing.DaemonSpec{Key: key, Dir: "/var/lib/kubelet/plugins/gpu.accel-dra.io/mps/" + key, Devices: []string{key}})
	}
	t.Cleanup(func() {
		_ = admin.DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))},
			metav1.ListOptions{LabelSelector: mpspod.ComponentLabel + "=" + mpspod.Component})
	})
	// The policy is picked up within about a second of being applied.
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := mine.Create(ctx, daemon("mps-node-b", "GPU-probe"), dryRun)
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Fatalf("the policy never refused a daemon pod of another node: %v", err)
	}

	// Its own node's daemon pod, owned by its Node as Start makes it: create, read, list,
	// delete. Owned by another node it is refused.
	nodeA, err := e.client.CoreV1().Nodes().Get(ctx, "mps-node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ownerB := daemon("mps-node-a", "GPU-o")
	ownerB.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "mps-node-b", UID: "uid-b", Controller: ptr.To(true)}}
	_, err = mine.Create(ctx, ownerB, dryRun)
	wantForbidden(t, "plugin creating a daemon pod owned by another node", err, "only the plugin's own Node as its owner")
	ownPod := daemon("mps-node-a", "GPU-a")
	ownPod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "mps-node-a", UID: nodeA.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false)}}
	own, err := mine.Create(ctx, ownPod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("plugin on mps-node-a creating its daemon pod: %v", err)
	}
	if _, err := mine.Get(ctx, own.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("plugin reading its daemon pod: %v", err)
	}
	if _, err := mine.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=mps-node-a"}); err != nil {
		t.Errorf("plugin listing its node's daemon pods: %v", err)
	}
	if err := mine.Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("plugin on mps-node-a deleting its daemon pod: %v", err)
	}

	_, err = mine.Create(ctx, daemon("mps-node-b", "GPU-b"), metav1.CreateOptions{})
	wantForbidden(t, "plugin on mps-node-a creating a daemon pod of mps-node-b", err, "may not create or delete pods of node 'mps-node-b'")
	unboundPod := daemon("", "GPU-u")
	_, err = mine.Create(ctx, unboundPod, metav1.CreateOptions{})
	wantForbidden(t, "plugin creating a daemon pod the scheduler would place", err, "pods that are not bound to a node")
	other := daemon("mps-node-a", "GPU-c")
	delete(other.Labels, mpspod.ComponentLabel)
	_, err = mine.Create(ctx, other, metav1.CreateOptions{})
	wantForbidden(t, "plugin creating a pod that is not a daemon's", err, "only MPS control daemon pods")
	for what, change := range map[string]func(*corev1.Pod){
		"a service account token": func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil },
		"a Secret volume": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}})
		},
	} {
		p := daemon("mps-node-a", "GPU-d")
		change(p)
		_, err = mine.Create(ctx, p, dryRun)
		wantForbidden(t, "plugin creating a daemon pod with "+what, err, "no API credentials")
	}
	theirs, err := admin.Create(ctx, daemon("mps-node-b", "GPU-e"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = mine.Delete(ctx, theirs.Name, metav1.DeleteOptions{})
	wantForbidden(t, "plugin on mps-node-a deleting mps-node-b's daemon pod", err, "pods of node 'mps-node-b'")
	err = mine.Delete(ctx, self.Name, metav1.DeleteOptions{})
	wantForbidden(t, "plugin deleting its own pod", err, "only MPS control daemon pods")
	_, err = unbound.Create(ctx, daemon("mps-node-a", "GPU-f"), metav1.CreateOptions{})
	wantForbidden(t, "unbound plugin token creating a daemon pod", err, "not bound to a pod")
}

// testPluginRBAC checks the plugin ServiceAccounts' permissions with SubjectAccessReviews: what
// the plugin calls is allowed, and a sample of what it does not call is not.
func (e *env) testPluginRBAC(ctx context.Context, t *testing.T, r *helm.Rendered) {
	type access struct{ group, resource, verb, ns string }
	allowed := []access{
		{"resource.k8s.io", "resourceslices", "list", ""},
		{"resource.k8s.io", "resourceslices", "watch", ""},
		{"resource.k8s.io", "resourceslices", "create", ""},
		{"resource.k8s.io", "resourceslices", "update", ""},
		{"resource.k8s.io", "resourceslices", "delete", ""},
		{"resource.k8s.io", "resourceclaims", "get", "team-a"},
		{"", "nodes", "get", ""},
		// Its Node's fabric clique label (pkg/nodelabels); the node-label policy confines it
		// (testNodeScopedLabel).
		{"", "nodes", "patch", ""},
		// Node events, through events.k8s.io, in rbac.nodeEventsNamespace (docs/observability.md).
		{"events.k8s.io", "events", "create", "default"},
		{"events.k8s.io", "events", "patch", "default"},
	}
	denied := []access{
		{"resource.k8s.io", "resourceslices", "deletecollection", ""},
		{"resource.k8s.io", "resourceslices", "patch", ""},
		{"resource.k8s.io", "resourceclaims", "list", "team-a"},
		{"resource.k8s.io", "resourceclaims", "update", "team-a"},
		{"resource.k8s.io", "deviceclasses", "create", ""},
		{"resource.k8s.io", "devicetaintrules", "create", ""},
		{"", "nodes", "list", ""},
		{"", "nodes", "update", ""},
		{"", "nodes", "create", ""},
		{"", "events", "create", "default"},
		{"events.k8s.io", "events", "create", "team-a"},
		{"", "pods", "list", ""},
		{"", "pods", "get", "team-a"},
		{"", "pods", "create", "team-a"},
		{"", "pods", "update", releaseNS},
		{"", "pods", "patch", releaseNS},
		{"", "secrets", "get", releaseNS},
		{"", "secrets", "list", ""},
		{"", "configmaps", "get", releaseNS},
		{"", "serviceaccounts", "create", releaseNS},
	}
	// The GPU plugin's MPS control daemon pods, in the release namespace only.
	daemonPods := []access{{"", "pods", "get", releaseNS}, {"", "pods", "list", releaseNS}, {"", "pods", "create", releaseNS}, {"", "pods", "delete", releaseNS}}
	for _, driver := range []string{gpuDriver, npuDriver} {
		allowed, denied := allowed, denied
		if driver == gpuDriver {
			allowed = append(slices.Clone(allowed), daemonPods...)
		} else {
			denied = append(slices.Clone(denied), daemonPods...)
		}
		sa := pluginSA(t, r, driver)
		user := "system:serviceaccount:" + releaseNS + ":" + sa
		check := func(a access) bool {
			sar, err := e.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               user,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: a.group, Resource: a.resource, Verb: a.verb, Namespace: a.ns},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return sar.Status.Allowed
		}
		for _, a := range allowed {
			if !check(a) {
				t.Errorf("%s may not %s %s (ns %q); the plugin needs it", sa, a.verb, a.resource, a.ns)
			}
		}
		for _, a := range denied {
			if check(a) {
				t.Errorf("%s may %s %s (ns %q); the plugin does not need it", sa, a.verb, a.resource, a.ns)
			}
		}
	}
}

// testPluginRuns runs the real plugin binary, for each driver, with the args the chart gives its
// DaemonSet (only paths, node name, kubeconfig and the HTTP address replaced for this harness) and
// authenticated as the DaemonSet's ServiceAccount with a token bound to a pod on a real kubelet's
// node: it must publish its slices and prepare a pod's claim from the chart's DeviceClass, so
// the chart's RBAC and policy are enough for what the plugin really does.
func (e *env) testPluginRuns(ctx context.Context, t *testing.T, r *helm.Rendered, vals map[string]any) string {
	node, err := e.c.AddNode(ctx, cluster.NodeOptions{Name: "kubelet-a"})
	if err != nil {
		t.Fatal(err)
	}
	bin, err := framework.Binary("accel-dra-kubelet-plugin")
	if err != nil {
		t.Fatal(err)
	}
	devices := map[string]int{gpuDriver: 8, npuDriver: 8} // h100-8x-2numa, ascend910b-8x
	for _, driver := range []string{gpuDriver, npuDriver} {
		sa := pluginSA(t, r, driver)
		pod := e.boundPod(ctx, t, sa, node.Name)
		kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
		if err := writeTokenKubeconfig(kubeconfig, e.c.RESTConfig(), e.c.CAFile(), e.token(ctx, t, sa, pod)); err != nil {
			t.Fatal(err)
		}
		port, err := framework.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		httpAddr := "127.0.0.1:" + strconv.Itoa(port)
		args, err := helm.PluginArgs(vals, driver, map[string]string{
			"node-name":       node.Name,
			"kubeconfig":      kubeconfig,
			"registrar-dir":   node.RegistrarDir(),
			"plugin-data-dir": node.PluginDataDir(driver),
			"cdi-root":        node.CDIDirs[len(node.CDIDirs)-1],
			"http-address":    httpAddr,
			"dev-char-dir":    filepath.Join(t.TempDir(), "char"),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s %s", driver, filepath.Base(bin), strings.Join(args, " "))
		proc, err := e.c.StartProcess("plugin-"+strings.Split(driver, ".")[0], append([]string{bin}, args...), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitHTTP(ctx, proc, "http://"+httpAddr+"/readyz"); err != nil {
			t.Fatal(err)
		}
		if _, err := framework.WaitForSlices(ctx, e.client, driver, node.Name, devices[driver]); err != nil {
			t.Fatalf("%v\n%s", err, proc.LogTail(40))
		}

		// A pod's claim from the chart's DeviceClass: the plugin reads the claim (RBAC get).
		ns := "default"
		tmplName := "one-" + strings.Split(driver, ".")[0]
		tmpl := &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tmplName},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: driver}}},
			}}},
		}
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		workload := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workload-" + strings.Split(driver, ".")[0]},
			Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{"kubernetes.io/hostname": node.Name},
				TerminationGracePeriodSeconds: ptr.To(int64(1)),
				ResourceClaims:                []corev1.PodResourceClaim{{Name: "acc", ResourceClaimTemplateName: &tmplName}},
				Containers: []corev1.Container{{
					Name: "ctr", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "acc"}}},
				}},
			},
		}
		if _, err := e.client.CoreV1().Pods(ns).Create(ctx, workload, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := framework.WaitForPodRunning(ctx, e.client, ns, workload.Name, 3*time.Minute); err != nil {
			t.Fatalf("%v\n%s", err, proc.LogTail(40))
		}
		rec, err := node.CRI.WaitForContainer(ctx, ns, workload.Name, "ctr")
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.CDIDevices) == 0 {
			t.Errorf("%s: container got no CDI devices", driver)
		}
		logs, err := os.ReadFile(proc.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"forbidden", "Forbidden", "denied"} {
			if strings.Contains(string(logs), bad) {
				t.Errorf("%s plugin log mentions %q: its RBAC or the policy refused a call:\n%s", driver, bad, proc.LogTail(40))
				break
			}
		}
	}
	return node.Name
}

func writeTokenKubeconfig(path string, cfg *rest.Config, caFile, token string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: caFile}
	kc.AuthInfos["plugin"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "plugin"}
	kc.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*kc, path)
}
