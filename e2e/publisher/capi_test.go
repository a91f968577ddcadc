//go:build e2e

// Package publisher holds the template publisher's end-to-end test and benchmark: a real
// control plane with Cluster API's CRDs (from the cluster-api module's config/crd/bases),
// MachineDeployments, MachineSets and Machines created as Cluster API would, nodes with real
// kubelets and the real node plugin (or, for the benchmark, Node objects and ResourceSlices
// created directly), and the real accel-dra-template-publisher and accelctl binaries.
//
//	KUBE_BIN_DIR=... go test -tags e2e -v -timeout 30m ./e2e/publisher/
//	KUBE_BIN_DIR=... go test -tags e2e -run '^$' -bench Publisher ./e2e/publisher/
package publisher

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/publisher"
)

// capiNamespace holds the Cluster API objects.
const capiNamespace = "capi"

// capiCRDs are the Cluster API CRDs the publisher reads.
var capiCRDs = []string{"clusters", "machinedeployments", "machinesets", "machines"}

// installCAPI applies Cluster API's CRDs from the cluster-api module in the Go module cache to
// the apiserver, waits until they are served, and creates the namespace and a Cluster.
func installCAPI(ctx context.Context, cfg *rest.Config, c client.Client) error {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api").Output()
	if err != nil {
		return fmt.Errorf("locating the cluster-api module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "core", "config", "crd", "bases")
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, name := range capiCRDs {
		data, err := os.ReadFile(filepath.Join(dir, "cluster.x-k8s.io_"+name+".yaml"))
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return fmt.Errorf("CRD %s: %w", name, err)
		}
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return fmt.Errorf("CRD %s not established: %w", crd.Name, err)
		}
	}
	// The discovery cache of a client created before the CRDs would not know them; poll.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: capiNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cl := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: capiNamespace, Name: "workload"},
		// No Cluster API controllers run here; paused says so.
		Spec: clusterv1.ClusterSpec{Paused: new(true)},
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, cl)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true, nil
		}
		return false, nil
	})
}

// newClient returns a controller-runtime client that knows the Cluster API types.
func newClient(cfg *rest.Config) (client.Client, error) {
	scheme, err := publisher.NewScheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

func machineTemplate(clusterName string) clusterv1.MachineTemplateSpec {
	return clusterv1.MachineTemplateSpec{
		ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"pool": "x"}},
		Spec: clusterv1.MachineSpec{
			ClusterName:       clusterName,
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: new("bootstrap-data")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate", Name: "gpu"},
		},
	}
}

// group is a MachineDeployment with its current MachineSet, as Cluster API creates them.
type group struct {
	md *clusterv1.MachineDeployment
	ms *clusterv1.MachineSet
}

// createGroup creates a MachineDeployment and a MachineSet of revision 1 owned by it.
func createGroup(ctx context.Context, c client.Client, name string, annotations map[string]string) (*group, error) {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: name}}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: capiNamespace, Name: name, Annotations: annotations,
			Labels: map[string]string{clusterv1.ClusterNameLabel: "workload"}},
		Spec: clusterv1.MachineDeploymentSpec{ClusterName: "workload", Replicas: new(int32(0)), Selector: sel, Template: machineTemplate("workload")},
	}
	if err := c.Create(ctx, md); err != nil {
		return nil, fmt.Errorf("creating MachineDeployment %s: %w", name, err)
	}
	ms := &clusterv1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: capiNamespace, Name: name + "-abcde",
			Labels:      map[string]string{clusterv1.ClusterNameLabel: "workload", clusterv1.MachineDeploymentNameLabel: name},
			Annotations: map[string]string{clusterv1.RevisionAnnotation: "1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment", Name: name, UID: md.UID,
				Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		Spec: clusterv1.MachineSetSpec{ClusterName: "workload", Replicas: new(int32(0)), Selector: sel, Template: machineTemplate("workload")},
	}
	if err := c.Create(ctx, ms); err != nil {
		return nil, fmt.Errorf("creating MachineSet %s: %w", ms.Name, err)
	}
	return &group{md: md, ms: ms}, nil
}

// addMachine creates a Machine of the group's MachineSet and, as Cluster API does once the node
// has joined, sets its status.nodeRef and the node's Cluster API annotations.
func (g *group) addMachine(ctx context.Context, c client.Client, name, node string, annotateNode bool) (*clusterv1.Machine, error) {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: capiNamespace, Name: name,
			Labels: map[string]string{
				clusterv1.ClusterNameLabel: "workload", clusterv1.MachineSetNameLabel: g.ms.Name, clusterv1.MachineDeploymentNameLabel: g.md.Name,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Name: g.ms.Name, UID: g.ms.UID,
				Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		Spec: machineTemplate("workload").Spec,
	}
	if err := c.Create(ctx, m); err != nil {
		return nil, fmt.Errorf("creating Machine %s: %w", name, err)
	}
	orig := m.DeepCopy()
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
	if err := c.Status().Patch(ctx, m, client.MergeFrom(orig)); err != nil {
		return nil, fmt.Errorf("setting status.nodeRef of Machine %s: %w", name, err)
	}
	if annotateNode {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:"MachineSet",%q:%q,%q:"workload",%q:%q}}}`,
			clusterv1.MachineAnnotation, name, clusterv1.OwnerKindAnnotation, clusterv1.OwnerNameAnnotation, g.ms.Name,
			clusterv1.ClusterNameAnnotation, clusterv1.ClusterNamespaceAnnotation, capiNamespace)
		if err := c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			return nil, fmt.Errorf("annotating node %s: %w", node, err)
		}
	}
	return m, nil
}

// publisherProcess is a running accel-dra-template-publisher.
type publisherProcess struct {
	proc        *cluster.Process
	metricsAddr string
}

// startPublisher runs the real binary with the admin kubeconfig and waits until it is healthy.
func startPublisher(ctx context.Context, c *cluster.Cluster, extra ...string) (*publisherProcess, error) {
	bin, err := framework.Binary("accel-dra-template-publisher")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	p := &publisherProcess{metricsAddr: "127.0.0.1:" + strconv.Itoa(ports[0])}
	healthAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	args := append([]string{bin,
		"--kubeconfig=" + c.KubeconfigPath(),
		"--metrics-bind-address=" + p.metricsAddr,
		"--health-probe-bind-address=" + healthAddr,
		"-v=2",
	}, extra...)
	if p.proc, err = c.StartProcess("template-publisher", args, nil); err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.proc.Done():
			return false, fmt.Errorf("publisher exited")
		default:
		}
		resp, err := http.Get("http://" + healthAddr + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return nil, fmt.Errorf("publisher not ready: %w\n%s", err, p.proc.LogTail(40))
	}
	return p, nil
}

// metric sums the samples of a metric whose labels contain all of the given "k=\"v\"" pairs.
func (p *publisherProcess) metric(name string, labels ...string) (float64, error) {
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
next:
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("metric %s%v not found", name, labels)
	}
	return sum, nil
}

// writes is the publisher's count of successful annotation writes.
func (p *publisherProcess) writes(t testing.TB) float64 {
	t.Helper()
	v, err := p.metric("accel_dra_template_publisher_writes_total", `result="success"`)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// reconciles is controller-runtime's count of the publisher's finished reconciles.
func (p *publisherProcess) reconciles(t testing.TB) float64 {
	t.Helper()
	v, err := p.metric("controller_runtime_reconcile_total", `controller="accel-dra-template-publisher"`)
	if err != nil {
		return 0
	}
	return v
}

// settle waits until the publisher has not reconciled anything for quiet, so that whatever it
// would do about the current state is done.
func (p *publisherProcess) settle(ctx context.Context, t testing.TB, quiet time.Duration) {
	t.Helper()
	p.settleAfter(ctx, t, quiet, -1)
}

// settleAfter is settle that also waits until the reconcile count exceeds before (a count read
// before a change the publisher must look at).
func (p *publisherProcess) settleAfter(ctx context.Context, t testing.TB, quiet time.Duration, before float64) {
	t.Helper()
	last, lastChange := p.reconciles(t), time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		now := p.reconciles(t)
		if now != last {
			last, lastChange = now, time.Now()
		}
		return last > before && time.Since(lastChange) >= quiet, nil
	})
	if err != nil {
		t.Fatalf("publisher did not settle (reconciles %v → %v): %v", before, last, err)
	}
}

// runAccelctl runs the accelctl binary with the admin kubeconfig.
func runAccelctl(ctx context.Context, c *cluster.Cluster, args ...string) (string, error) {
	bin, err := framework.Binary("accelctl")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + c.KubeconfigPath()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("accelctl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// getMD reads a MachineDeployment.
func getMD(ctx context.Context, c client.Client, name string) (*clusterv1.MachineDeployment, error) {
	md := &clusterv1.MachineDeployment{}
	return md, c.Get(ctx, types.NamespacedName{Namespace: capiNamespace, Name: name}, md)
}

// waitForMD waits until a MachineDeployment satisfies cond.
func waitForMD(ctx context.Context, c client.Client, name string, timeout time.Duration, cond func(*clusterv1.MachineDeployment) bool) (*clusterv1.MachineDeployment, error) {
	var md *clusterv1.MachineDeployment
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := getMD(ctx, c, name)
		if err != nil {
			return false, nil
		}
		md = got
		return cond(got), nil
	})
	return md, err
}
