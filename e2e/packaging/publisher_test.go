//go:build e2e

package packaging

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/accel-dra/accel-dra/deployments/helm"
	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/publisher"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

const capiNamespace = "capi"

// installCAPICRDs applies the Cluster API CRDs the publisher reads, from the cluster-api module
// in the module cache, and waits until they are served.
func (e *env) installCAPICRDs(ctx context.Context, t *testing.T) {
	t.Helper()
	dir, err := framework.ClusterAPICRDDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var crds []*unstructured.Unstructured
	for _, name := range []string{"clusters", "machinedeployments", "machinesets", "machines"} {
		data, err := os.ReadFile(filepath.Join(dir, "cluster.x-k8s.io_"+name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		crds = append(crds, u)
	}
	if err := e.apply(ctx, crds); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		e.mapper.(*restmapper.DeferredDiscoveryRESTMapper).Reset()
		for _, r := range []string{"machinedeployments", "machinesets", "machines"} {
			if _, err := e.mapper.KindFor(clusterv1.GroupVersion.WithResource(r)); err != nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("Cluster API CRDs not served: %v", err)
	}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: capiNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// createGroup creates a MachineDeployment, its MachineSet of revision 1 and one Machine whose
// node is node, as Cluster API would (no Cluster API controller runs here).
func createGroup(ctx context.Context, c client.Client, name, node string) error {
	tmpl := clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
		ClusterName:       "workload",
		Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap-data")},
		InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate", Name: "gpu"},
	}}
	sel := metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: name}}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: capiNamespace, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: "workload"}},
		Spec:       clusterv1.MachineDeploymentSpec{ClusterName: "workload", Replicas: ptr.To(int32(1)), Selector: sel, Template: tmpl},
	}
	if err := c.Create(ctx, md); err != nil {
		return fmt.Errorf("creating MachineDeployment: %w", err)
	}
	owner := func(kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
	}
	ms := &clusterv1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: capiNamespace, Name: name + "-1",
			Labels:          map[string]string{clusterv1.ClusterNameLabel: "workload", clusterv1.MachineDeploymentNameLabel: name},
			Annotations:     map[string]string{clusterv1.RevisionAnnotation: "1"},
			OwnerReferences: owner("MachineDeployment", md.Name, md.UID),
		},
		Spec: clusterv1.MachineSetSpec{ClusterName: "workload", Replicas: ptr.To(int32(1)), Selector: sel, Template: tmpl},
	}
	if err := c.Create(ctx, ms); err != nil {
		return fmt.Errorf("creating MachineSet: %w", err)
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: capiNamespace, Name: name + "-1-a",
			Labels: map[string]string{
				clusterv1.ClusterNameLabel: "workload", clusterv1.MachineSetNameLabel: ms.Name, clusterv1.MachineDeploymentNameLabel: name,
			},
			OwnerReferences: owner("MachineSet", ms.Name, ms.UID),
		},
		Spec: tmpl.Spec,
	}
	if err := c.Create(ctx, m); err != nil {
		return fmt.Errorf("creating Machine: %w", err)
	}
	orig := m.DeepCopy()
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
	if err := c.Status().Patch(ctx, m, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("setting the Machine's status.nodeRef: %w", err)
	}
	return nil
}

// testPublisherRuns runs the real template publisher with the args the chart gives its
// Deployment (kubeconfig and listen addresses replaced), authenticated as the chart's
// publisher ServiceAccount, against a Cluster API node group whose node is the real kubelet's
// node with both plugins: it must win leader election, write the group's template and the
// autoscaler keys, and record its event, with no refusal in its log.
func (e *env) testPublisherRuns(ctx context.Context, t *testing.T, r *helm.Rendered, vals map[string]any, node string) {
	d, err := r.PublisherDeployment()
	if err != nil {
		t.Fatal(err)
	}
	sa, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName")
	e.installCAPICRDs(ctx, t)
	scheme, err := publisher.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	ctrllog.SetLogger(klog.NewKlogr()) // controller-runtime's client logs through it
	admin, err := client.New(e.c.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const group = "gpu-group"
	if err := createGroup(ctx, admin, group, node); err != nil {
		t.Fatal(err)
	}

	tr, err := e.client.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeTokenKubeconfig(kubeconfig, e.c.RESTConfig(), e.c.CAFile(), tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	metricsPort, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	healthPort, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	healthAddr := "127.0.0.1:" + strconv.Itoa(healthPort)
	args, err := helm.PublisherArgs(vals, map[string]string{
		"kubeconfig":                kubeconfig,
		"metrics-bind-address":      "127.0.0.1:" + strconv.Itoa(metricsPort),
		"health-probe-bind-address": healthAddr,
	})
	if err != nil {
		t.Fatal(err)
	}
	bin, err := framework.Binary("accel-dra-template-publisher")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s", filepath.Base(bin), strings.Join(args, " "))
	proc, err := e.c.StartProcess("template-publisher", append([]string{bin}, args...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitHTTP(ctx, proc, "http://"+healthAddr+"/readyz"); err != nil {
		t.Fatal(err)
	}

	var md clusterv1.MachineDeployment
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := admin.Get(ctx, client.ObjectKey{Namespace: capiNamespace, Name: group}, &md); err != nil {
			return false, nil
		}
		return md.Annotations[template.HashAnnotation] != "", nil
	})
	if err != nil {
		t.Fatalf("no template on MachineDeployment %s/%s: %v\n%s", capiNamespace, group, err, proc.LogTail(40))
	}
	want := map[string]string{
		nodegroup.SourceAnnotation: "nodes",
		nodegroup.DRADriverKey:     gpuDriver,
		nodegroup.GPUCountKey:      "8",
	}
	for k, v := range want {
		if got := md.Annotations[k]; got != v {
			t.Errorf("MachineDeployment annotation %s = %q, want %q", k, got, v)
		}
	}

	// Its events (events.k8s.io) and its Lease (leader election in the release namespace).
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := e.client.EventsV1().Events(capiNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Reason == "TemplatePublished" && ev.Regarding.Name == group {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("no TemplatePublished event on %s: %v\n%s", group, err, proc.LogTail(40))
	}
	lease, err := e.client.CoordinationV1().Leases(releaseNS).Get(ctx, d.GetName(), metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("leader election Lease %s/%s: %v %+v", releaseNS, d.GetName(), err, lease)
	}
	logs, err := os.ReadFile(proc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"forbidden", "Forbidden"} {
		if strings.Contains(string(logs), bad) {
			t.Errorf("publisher log mentions %q: its RBAC refused a call:\n%s", bad, proc.LogTail(40))
			break
		}
	}

	e.checkPublisherRBAC(ctx, t, sa, d.GetName())
	t.Run("WriteScope", func(t *testing.T) { e.checkPublisherWriteScope(ctx, t, scheme, tr.Status.Token, group) })
}

// checkPublisherWriteScope: with the publisher's own token, the chart's admission policy lets
// the publisher change its own annotation keys of a MachineDeployment and nothing else of it,
// although its RBAC allows patching the whole object.
func (e *env) checkPublisherWriteScope(ctx context.Context, t *testing.T, scheme *runtime.Scheme, token, group string) {
	cfg := rest.AnonymousClientConfig(e.c.RESTConfig())
	cfg.BearerToken = token
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: capiNamespace, Name: group}}
	merge := func(patch string) error {
		return cl.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("write-scope-probe"))
	}
	if err := merge(fmt.Sprintf(`{"metadata":{"annotations":{%q:"7"}}}`, nodegroup.MaxPodsKey)); err != nil {
		t.Errorf("the publisher may not change its own key %s: %v", nodegroup.MaxPodsKey, err)
	}
	for _, tc := range []struct{ what, patch, want string }{
		{"another annotation", `{"metadata":{"annotations":{"example.com/other":"x"}}}`, "not: example.com/other"},
		{"an autoscaler key it does not own", `{"metadata":{"annotations":{"cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size":"100"}}}`, "cluster-api-autoscaler-node-group-max-size"},
		{"a label", `{"metadata":{"labels":{"example.com/l":"x"}}}`, "not the spec, labels"},
		{"the spec", `{"spec":{"replicas":5}}`, "not the spec, labels"},
		{"a finalizer", `{"metadata":{"finalizers":["example.com/f"]}}`, "not the spec, labels"},
	} {
		wantForbidden(t, tc.what, merge(tc.patch), tc.want)
	}
	// An admin may still do all of that: the policy binds only the publisher.
	admin, err := client.New(e.c.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/other":"x"}}}`))); err != nil {
		t.Errorf("admin refused: %v", err)
	}
}

// checkPublisherRBAC: what the publisher's e2e needed is allowed (it just ran), and a sample of
// what it does not need is not.
func (e *env) checkPublisherRBAC(ctx context.Context, t *testing.T, sa, lease string) {
	type access struct{ group, resource, verb, ns, name string }
	denied := []access{
		{"cluster.x-k8s.io", "machinedeployments", "update", capiNamespace, ""},
		{"cluster.x-k8s.io", "machinedeployments", "delete", capiNamespace, ""},
		{"cluster.x-k8s.io", "machinedeployments", "create", capiNamespace, ""},
		{"cluster.x-k8s.io", "machines", "patch", capiNamespace, ""},
		{"cluster.x-k8s.io", "machines", "delete", capiNamespace, ""},
		{"cluster.x-k8s.io", "clusters", "get", capiNamespace, ""},
		{"", "nodes", "patch", "", ""},
		{"", "nodes", "delete", "", ""},
		{"resource.k8s.io", "resourceslices", "create", "", ""},
		{"resource.k8s.io", "resourceslices", "delete", "", ""},
		{"resource.k8s.io", "resourceclaims", "get", "default", ""},
		{"coordination.k8s.io", "leases", "update", releaseNS, "someone-else"},
		{"coordination.k8s.io", "leases", "get", "kube-system", lease},
		{"", "events", "create", capiNamespace, ""},
		{"", "secrets", "get", capiNamespace, ""},
		{"", "secrets", "list", "", ""},
		{"", "pods", "list", "", ""},
	}
	allowed := []access{
		{"coordination.k8s.io", "leases", "update", releaseNS, lease},
		{"cluster.x-k8s.io", "machinedeployments", "patch", capiNamespace, ""},
		{"events.k8s.io", "events", "create", capiNamespace, ""},
	}
	user := "system:serviceaccount:" + releaseNS + ":" + sa
	check := func(a access) bool {
		sar, err := e.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: a.group, Resource: a.resource, Verb: a.verb, Namespace: a.ns, Name: a.name},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	for _, a := range allowed {
		if !check(a) {
			t.Errorf("%s may not %s %s %q (ns %q)", sa, a.verb, a.resource, a.name, a.ns)
		}
	}
	for _, a := range denied {
		if check(a) {
			t.Errorf("%s may %s %s %q (ns %q); the publisher does not need it", sa, a.verb, a.resource, a.name, a.ns)
		}
	}
}

func waitHTTP(ctx context.Context, proc *cluster.Process, url string) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if proc.Exited() {
			return false, fmt.Errorf("%s exited", proc.Name)
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %s not ready: %w\n%s", proc.Name, url, err, proc.LogTail(40))
	}
	return nil
}
