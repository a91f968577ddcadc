package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/pkg/publisher"
)

// CAPINamespace holds the Cluster API objects.
const CAPINamespace = "capi"

var setCtrlLogger sync.Once

// capiCRDs are the Cluster API CRDs the publisher reads. MachinePools are optional in Cluster
// API (its MachinePool feature, on by default since v1.7); the publisher and the autoscaler
// look for them at start.
var capiCRDs = []string{"clusters", "machinedeployments", "machinesets", "machines", "machinepools"}

// InstallClusterAPI applies Cluster API's CRDs from the cluster-api module in the Go module cache to
// the apiserver, waits until they are served, and creates the namespace and a Cluster.
func InstallClusterAPI(ctx context.Context, cfg *rest.Config, c client.Client) error {
	dir, err := ClusterAPICRDDir(ctx)
	if err != nil {
		return err
	}
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
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CAPINamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cl := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: CAPINamespace, Name: "workload"},
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

// ClusterAPICRDDir finds Cluster API's CRD manifests in the Go module cache. They ship in the
// root sigs.k8s.io/cluster-api module, which the project does not import (its types live in
// sigs.k8s.io/cluster-api/api), so the root module is fetched at the version of the api module
// in go.mod: one pin for both.
func ClusterAPICRDDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/cluster-api/api").Output()
	if err != nil {
		return "", fmt.Errorf("version of sigs.k8s.io/cluster-api/api: %w", err)
	}
	version := strings.TrimSpace(string(out))
	out, err = exec.CommandContext(ctx, "go", "mod", "download", "-json", "sigs.k8s.io/cluster-api@"+version).Output()
	if err != nil {
		return "", fmt.Errorf("downloading sigs.k8s.io/cluster-api@%s for its CRDs: %w", version, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("locating sigs.k8s.io/cluster-api@%s: %v", version, err)
	}
	return filepath.Join(mod.Dir, "core", "config", "crd", "bases"), nil
}

// NewCAPIClient returns a controller-runtime client that knows the Cluster API types.
func NewCAPIClient(cfg *rest.Config) (client.Client, error) {
	// controller-runtime's client logs through its own logger, and prints a stack trace when
	// none was set.
	setCtrlLogger.Do(func() { ctrllog.SetLogger(klog.NewKlogr()) })
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

// NodeGroup is a MachineDeployment with its current MachineSet, as Cluster API creates them.
type NodeGroup struct {
	MD *clusterv1.MachineDeployment
	MS *clusterv1.MachineSet
}

// CreateNodeGroup creates a MachineDeployment and a MachineSet of revision 1 owned by it.
func CreateNodeGroup(ctx context.Context, c client.Client, name string, annotations map[string]string) (*NodeGroup, error) {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: name}}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: CAPINamespace, Name: name, Annotations: annotations,
			Labels: map[string]string{clusterv1.ClusterNameLabel: "workload"}},
		Spec: clusterv1.MachineDeploymentSpec{ClusterName: "workload", Replicas: new(int32(0)), Selector: sel, Template: machineTemplate("workload")},
	}
	if err := c.Create(ctx, md); err != nil {
		return nil, fmt.Errorf("creating MachineDeployment %s: %w", name, err)
	}
	ms := &clusterv1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: CAPINamespace, Name: name + "-abcde",
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
	return &NodeGroup{MD: md, MS: ms}, nil
}

// AddMachine creates a Machine of the group's MachineSet and, as Cluster API does once the node
// has joined, sets its status.nodeRef and the node's Cluster API annotations.
func (g *NodeGroup) AddMachine(ctx context.Context, c client.Client, name, node string, annotateNode bool) (*clusterv1.Machine, error) {
	return g.addMachine(ctx, c, name, node, "", annotateNode)
}

// addMachine is AddMachine with the Machine's spec.providerID (which the infrastructure
// provider sets, and by which the autoscaler maps a node to its Machine), if not empty.
func (g *NodeGroup) addMachine(ctx context.Context, c client.Client, name, node, providerID string, annotateNode bool) (*clusterv1.Machine, error) {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: CAPINamespace, Name: name,
			Labels: map[string]string{
				clusterv1.ClusterNameLabel: "workload", clusterv1.MachineSetNameLabel: g.MS.Name, clusterv1.MachineDeploymentNameLabel: g.MD.Name,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Name: g.MS.Name, UID: g.MS.UID,
				Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		Spec: machineTemplate("workload").Spec,
	}
	m.Spec.ProviderID = providerID
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
			clusterv1.MachineAnnotation, name, clusterv1.OwnerKindAnnotation, clusterv1.OwnerNameAnnotation, g.MS.Name,
			clusterv1.ClusterNameAnnotation, clusterv1.ClusterNamespaceAnnotation, CAPINamespace)
		if err := c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			return nil, fmt.Errorf("annotating node %s: %w", node, err)
		}
	}
	return m, nil
}

// Publisher is a running accel-dra-template-publisher.
type Publisher struct {
	Proc        *cluster.Process
	MetricsAddr string
}

// StartPublisher runs the real binary with the admin kubeconfig and waits until it is healthy.
func StartPublisher(ctx context.Context, c *cluster.Cluster, extra ...string) (*Publisher, error) {
	bin, err := Binary("accel-dra-template-publisher")
	if err != nil {
		return nil, err
	}
	mport, err := FreePort()
	if err != nil {
		return nil, err
	}
	hport, err := FreePort()
	if err != nil {
		return nil, err
	}
	p := &Publisher{MetricsAddr: "127.0.0.1:" + strconv.Itoa(mport)}
	healthAddr := "127.0.0.1:" + strconv.Itoa(hport)
	args := append([]string{bin,
		"--kubeconfig=" + c.KubeconfigPath(),
		"--metrics-bind-address=" + p.MetricsAddr,
		"--health-probe-bind-address=" + healthAddr,
		"-v=2",
	}, extra...)
	if p.Proc, err = c.StartProcess("template-publisher", args, nil); err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.Proc.Done():
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
		return nil, fmt.Errorf("publisher not ready: %w\n%s", err, p.Proc.LogTail(40))
	}
	return p, nil
}

// ScalableGroup is a node group at the harness's fake infrastructure: no Cluster API or
// infrastructure controllers run, so a test reads the replicas the autoscaler set and, to bring
// a node up for them, starts a real kubelet and calls Join, which does what Cluster API and the
// infrastructure provider would do once that node has joined.
type ScalableGroup interface {
	// Key names the group as the autoscaler does: "<Kind>/<namespace>/<name>".
	Key() string
	// Replicas returns spec.replicas (0 when unset).
	Replicas(ctx context.Context, c client.Client) (int32, error)
	// Join records that the node with the provider ID came up for the group.
	Join(ctx context.Context, c client.Client, node, providerID string) error
	// Delete removes the group's objects.
	Delete(ctx context.Context, c client.Client) error
}

// ProviderID is the fake infrastructure's provider ID of a node: the kubelet's --provider-id,
// and what a Machine's spec.providerID or a MachinePool's spec.providerIDList holds.
func ProviderID(node string) string { return "fake://" + CAPINamespace + "/" + node }

func (g *NodeGroup) Key() string { return "MachineDeployment/" + g.MD.Namespace + "/" + g.MD.Name }

func (g *NodeGroup) Replicas(ctx context.Context, c client.Client) (int32, error) {
	md := &clusterv1.MachineDeployment{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(g.MD), md); err != nil {
		return 0, err
	}
	return ptrValue(md.Spec.Replicas), nil
}

// Join creates a Machine of the current MachineSet with the node's provider ID and node
// reference, and annotates the node as Cluster API does.
func (g *NodeGroup) Join(ctx context.Context, c client.Client, node, providerID string) error {
	_, err := g.addMachine(ctx, c, node, node, providerID, true)
	return err
}

func (g *NodeGroup) Delete(ctx context.Context, c client.Client) error {
	return errors.Join(client.IgnoreNotFound(c.Delete(ctx, g.MS)), client.IgnoreNotFound(c.Delete(ctx, g.MD)))
}

// MachinePool is a Cluster API MachinePool. Cluster API finds a pool's nodes through its
// spec.providerIDList, which it copies from the infrastructure provider's pool, and reports
// them in status.nodeRefs; no Machines or MachineSets are involved.
type MachinePool struct {
	MP *clusterv1.MachinePool
}

// CreateMachinePool creates a MachinePool at zero replicas with the annotations.
func CreateMachinePool(ctx context.Context, c client.Client, name string, annotations map[string]string) (*MachinePool, error) {
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: CAPINamespace, Name: name, Annotations: annotations,
			Labels: map[string]string{clusterv1.ClusterNameLabel: "workload"}},
		Spec: clusterv1.MachinePoolSpec{ClusterName: "workload", Replicas: new(int32(0)), Template: machineTemplate("workload")},
	}
	if err := c.Create(ctx, mp); err != nil {
		return nil, fmt.Errorf("creating MachinePool %s: %w", name, err)
	}
	return &MachinePool{MP: mp}, nil
}

func (p *MachinePool) Key() string { return "MachinePool/" + p.MP.Namespace + "/" + p.MP.Name }

func (p *MachinePool) Replicas(ctx context.Context, c client.Client) (int32, error) {
	mp := &clusterv1.MachinePool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p.MP), mp); err != nil {
		return 0, err
	}
	return ptrValue(mp.Spec.Replicas), nil
}

// Join adds the provider ID to spec.providerIDList (the infrastructure provider's list, which
// Cluster API copies), and, as Cluster API's MachinePool controller does once it finds the node,
// appends it to status.nodeRefs, counts it in the status replicas and annotates the node.
func (p *MachinePool) Join(ctx context.Context, c client.Client, node, providerID string) error {
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return err
	}
	mp := &clusterv1.MachinePool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p.MP), mp); err != nil {
		return err
	}
	orig := mp.DeepCopy()
	mp.Spec.ProviderIDList = append(mp.Spec.ProviderIDList, providerID)
	if err := c.Patch(ctx, mp, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding %s to the providerIDList of MachinePool %s: %w", providerID, mp.Name, err)
	}
	orig = mp.DeepCopy()
	mp.Status.NodeRefs = append(mp.Status.NodeRefs, corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID})
	count := int32(len(mp.Status.NodeRefs))
	mp.Status.Replicas, mp.Status.ReadyReplicas, mp.Status.AvailableReplicas, mp.Status.UpToDateReplicas = &count, &count, &count, &count
	if err := c.Status().Patch(ctx, mp, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("setting status.nodeRefs of MachinePool %s: %w", mp.Name, err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"MachinePool",%q:%q,%q:"workload",%q:%q}}}`,
		clusterv1.OwnerKindAnnotation, clusterv1.OwnerNameAnnotation, mp.Name,
		clusterv1.ClusterNameAnnotation, clusterv1.ClusterNamespaceAnnotation, CAPINamespace)
	if err := c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("annotating node %s: %w", node, err)
	}
	p.MP = mp
	return nil
}

func (p *MachinePool) Delete(ctx context.Context, c client.Client) error {
	return client.IgnoreNotFound(c.Delete(ctx, p.MP))
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
