//go:build e2e

package publisher

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/publisher"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// TestManagementCluster runs the publisher with --mode=management against a management cluster
// (Cluster API objects, the kubeconfig Secret, no nodes) while the node, its real kubelet and
// the node plugin live in a second, workload cluster: the template must land on the management
// cluster's MachineDeployment. Then the Secret is rotated to an API server that does not answer
// (the group keeps its annotations, Warning event, metric) and back; and an operator's value of
// one of the publisher's keys is left alone.
func TestManagementCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	wl := cluster.StartForTest(t, cluster.Options{})
	mgmt := cluster.StartForTest(t, cluster.Options{})
	mcl, err := framework.NewCAPIClient(mgmt.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.InstallClusterAPI(ctx, mgmt.RESTConfig(), mcl); err != nil {
		t.Fatal(err)
	}
	g, err := framework.CreateNodeGroup(ctx, mcl, groupName, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := wl.AddNode(ctx, cluster.NodeOptions{Name: "w-h100-a", Labels: groupLabels})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.StartPlugin(ctx, wl, n, framework.PluginOptions{Backend: "mock", Profile: profile}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForSlices(ctx, wl.Client(), framework.GPUDriver, n.Name, 8); err != nil {
		t.Fatal(err)
	}
	// The Machine is in the management cluster; its node only in the workload cluster.
	if _, err := g.AddMachine(ctx, mcl, "m-a", n.Name, false); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.Client().CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err == nil {
		t.Fatalf("node %s exists in the management cluster; the test needs it only in the workload cluster", n.Name)
	}
	// As Cluster API writes it: the CA inline, not a path.
	kc, err := clientcmd.LoadFromFile(wl.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := clientcmdapi.FlattenConfig(kc); err != nil {
		t.Fatal(err)
	}
	good, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: framework.CAPINamespace, Name: "workload" + publisher.KubeconfigSecretSuffix,
			Labels: map[string]string{clusterv1.ClusterNameLabel: "workload"}},
		Type: "cluster.x-k8s.io/secret",
		Data: map[string][]byte{publisher.KubeconfigSecretKey: good},
	}
	if err := mcl.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	t.Logf("two control planes, Cluster API objects and workload node %s ready after %s", n.Name, time.Since(start).Round(time.Second))

	pub, err := startPublisher(ctx, mgmt, "--mode=management", "--leader-elect=false", "--workload-cluster-probe-interval=1s", "--workload-cluster-sync-timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	md, err := waitForMD(ctx, mcl, groupName, 2*time.Minute, func(md *clusterv1.MachineDeployment) bool {
		return md.Annotations[template.HashAnnotation] != ""
	})
	if err != nil {
		t.Fatalf("no template on the management cluster's MachineDeployment: %v\n%s", err, pub.Proc.LogTail(40))
	}
	for k, v := range map[string]string{
		nodegroup.DRADriverKey: framework.GPUDriver, nodegroup.GPUCountKey: "8", nodegroup.DRAPoolKey: framework.GPUDriver,
		nodegroup.SourceAnnotation: nodegroup.SourceNodes,
	} {
		if md.Annotations[k] != v {
			t.Errorf("%s = %q, want %q", k, md.Annotations[k], v)
		}
	}
	tmpl, err := template.Decode(md.Annotations)
	if err != nil || len(tmpl.Drivers) == 0 || len(tmpl.Drivers[0].Devices) != 8 {
		t.Fatalf("template of the workload node: %v %+v", err, tmpl)
	}
	labels, err := nodegroup.ParseLabels(md.Annotations[nodegroup.LabelsKey])
	if err != nil || labels["example.com/accelerator"] != "h100" {
		t.Errorf("labels of the workload node not carried: %q %v", md.Annotations[nodegroup.LabelsKey], err)
	}
	published := managed(md.Annotations)
	reachable := func() float64 {
		v, err := pub.metric("accel_dra_template_publisher_workload_cluster_reachable", `cluster="workload"`)
		if err != nil {
			return -1
		}
		return v
	}
	if v := reachable(); v != 1 {
		t.Errorf("workload_cluster_reachable = %v, want 1", v)
	}

	t.Run("RotatedToUnreachable", func(t *testing.T) {
		// A kubeconfig naming a loopback port nothing listens on.
		bad := strings.Replace(string(good), wl.RESTConfig().Host, "https://127.0.0.1:1", 1)
		if bad == string(good) {
			t.Fatalf("could not find the server %s in the kubeconfig", wl.RESTConfig().Host)
		}
		setKubeconfig(ctx, t, mcl, []byte(bad))
		if err := waitForEvent(ctx, mgmt, groupName, publisher.ReasonWorkloadClusterUnreachable); err != nil {
			t.Fatalf("%v\n%s", err, pub.Proc.LogTail(30))
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return reachable() == 0, nil
		}); err != nil {
			t.Errorf("workload_cluster_reachable = %v, want 0", reachable())
		}
		md, err := getMD(ctx, mcl, groupName)
		if err != nil {
			t.Fatal(err)
		}
		if got := managed(md.Annotations); !mapsEqual(got, published) {
			t.Errorf("annotations changed while the workload cluster is unreachable:\n%v\nwant\n%v", got, published)
		}
	})

	t.Run("RotatedBack", func(t *testing.T) {
		setKubeconfig(ctx, t, mcl, good)
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return reachable() == 1, nil
		}); err != nil {
			t.Fatalf("workload cluster not reachable again after the Secret was restored: %v\n%s", reachable(), pub.Proc.LogTail(30))
		}
	})

	t.Run("OperatorKeyLeftAlone", func(t *testing.T) {
		md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: framework.CAPINamespace, Name: groupName}}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"16"}}}`, nodegroup.GPUCountKey)
		if err := mcl.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("operator")); err != nil {
			t.Fatal(err)
		}
		if err := waitForEvent(ctx, mgmt, groupName, publisher.ReasonAnnotationConflict); err != nil {
			t.Fatalf("%v\n%s", err, pub.Proc.LogTail(30))
		}
		pub.settle(ctx, t, 2*time.Second)
		got, err := getMD(ctx, mcl, groupName)
		if err != nil {
			t.Fatal(err)
		}
		if got.Annotations[nodegroup.GPUCountKey] != "16" {
			t.Errorf("the publisher overwrote the operator's gpu-count: %q", got.Annotations[nodegroup.GPUCountKey])
		}
		// Removed by the operator: the publisher writes its value again.
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, nodegroup.GPUCountKey)
		if err := mcl.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("operator")); err != nil {
			t.Fatal(err)
		}
		if _, err := waitForMD(ctx, mcl, groupName, time.Minute, func(md *clusterv1.MachineDeployment) bool {
			return md.Annotations[nodegroup.GPUCountKey] == "8"
		}); err != nil {
			t.Errorf("gpu-count not restored after the operator removed it: %v", err)
		}
	})
}

func setKubeconfig(ctx context.Context, t *testing.T, c client.Client, kubeconfig []byte) {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: framework.CAPINamespace, Name: "workload" + publisher.KubeconfigSecretSuffix}, s); err != nil {
		t.Fatal(err)
	}
	s.Data[publisher.KubeconfigSecretKey] = kubeconfig
	if err := c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// waitForEvent waits for an events.k8s.io event with reason on a MachineDeployment.
func waitForEvent(ctx context.Context, c *cluster.Cluster, name, reason string) error {
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client().EventsV1().Events(framework.CAPINamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, ev := range evs.Items {
			seen = append(seen, ev.Reason+": "+ev.Note)
			if ev.Reason == reason && ev.Regarding.Name == name {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no %s event on %s: %w; events: %q", reason, name, err, seen)
	}
	return nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
