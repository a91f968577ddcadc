//go:build e2e

// Package topology runs the NVLink claims of docs/examples/topology-*.yaml through the real
// scheduler and the real plugin, on three mock nodes whose NVLink differs: bridged pairs
// (h100-nvl-4x), a hybrid cube mesh (v100-8x-cube-mesh) and PCIe only (l40s-4x). Each claim
// must get GPUs that are NVLink peers as the node's wiring says, and stay unallocated where no
// node has such GPUs free, even with other GPUs free. Run with:
//
//	KUBE_BIN_DIR=$(hack/build-k8s.sh) ACCEL_DRA_BIN_DIR=$PWD/bin go test -tags e2e -run TestTopology ./e2e/topology/
package topology

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

const (
	ns      = "default"
	podWait = 3 * time.Minute
)

// nodes are the mock nodes by name, with their profiles.
var nodes = map[string]string{"nvl": "h100-nvl-4x", "cube": "v100-8x-cube-mesh", "pcie": "l40s-4x"}

type env struct {
	ctx    context.Context
	client kubernetes.Interface
	// peers are each node's NVLink peers by device name, from the mock's wiring.
	peers map[string]map[[2]string]bool
}

// example is one docs/examples/topology-*.yaml: its claim template and its pod.
type example struct {
	template resourceapi.ResourceClaimTemplate
	pod      corev1.Pod
}

// load reads an example strictly, as a user's kubectl would apply it.
func load(t *testing.T, file string) example {
	t.Helper()
	data, err := os.ReadFile("../../docs/examples/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var ex example
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var head metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ResourceClaimTemplate":
			err = yaml.UnmarshalStrict([]byte(doc), &ex.template)
		case "Pod":
			err = yaml.UnmarshalStrict([]byte(doc), &ex.pod)
		default:
			t.Fatalf("%s: unexpected kind %q", file, head.Kind)
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if ex.template.Name == "" || ex.pod.Name == "" {
		t.Fatalf("%s: want a ResourceClaimTemplate and a Pod", file)
	}
	return ex
}

// apply creates the example's claim template and one copy of its pod per name.
func (e *env) apply(t *testing.T, ex example, pods ...string) {
	t.Helper()
	tmpl := ex.template.DeepCopy()
	tmpl.Namespace = ns
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range pods {
		e.createPod(t, ex, name)
	}
}

func (e *env) createPod(t *testing.T, ex example, name string) {
	t.Helper()
	pod := ex.pod.DeepCopy()
	pod.Namespace, pod.Name = ns, name
	if _, err := e.client.CoreV1().Pods(ns).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// allocation is what the scheduler gave a pod's claim: the node (pool), the devices and the
// requests (for a prioritized list, <request>/<subrequest>) they were allocated for.
type allocation struct {
	node     string
	devices  []string
	requests []string
}

func (e *env) running(t *testing.T, pod string) allocation {
	t.Helper()
	p, err := framework.WaitForPodRunning(e.ctx, e.client, ns, pod, podWait)
	if err != nil {
		t.Fatalf("pod %s: %v\n%s", pod, err, framework.DescribePod(e.ctx, e.client, ns, pod))
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has no claim: %+v", pod, p.Status.ResourceClaimStatuses)
	}
	c, err := e.client.ResourceV1().ResourceClaims(ns).Get(e.ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var a allocation
	for _, r := range c.Status.Allocation.Devices.Results {
		if a.node != "" && r.Pool != a.node {
			t.Fatalf("pod %s: devices of two pools %s and %s", pod, a.node, r.Pool)
		}
		a.node = r.Pool
		a.devices = append(a.devices, r.Device)
		if !slices.Contains(a.requests, r.Request) {
			a.requests = append(a.requests, r.Request)
		}
	}
	if a.node != p.Spec.NodeName {
		t.Fatalf("pod %s runs on %s with devices of %s", pod, p.Spec.NodeName, a.node)
	}
	slices.Sort(a.devices)
	return a
}

// pending waits for the scheduler to say a pod's claim cannot be allocated.
func (e *env) pending(t *testing.T, pod string) {
	t.Helper()
	if _, err := framework.WaitForPodEvent(e.ctx, e.client, ns, pod, podWait, "cannot allocate all claims"); err != nil {
		t.Fatalf("pod %s: %v\n%s", pod, err, framework.DescribePod(e.ctx, e.client, ns, pod))
	}
	p, err := e.client.CoreV1().Pods(ns).Get(e.ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("pod %s was bound to %s", pod, p.Spec.NodeName)
	}
}

// pairwise checks that an allocation's GPUs are NVLink peers on their node.
func (e *env) pairwise(t *testing.T, pod string, a allocation) {
	t.Helper()
	for i, x := range a.devices {
		for _, y := range a.devices[i+1:] {
			if !e.peers[a.node][[2]string{x, y}] {
				t.Errorf("pod %s got %v on %s: %s and %s are no NVLink peers", pod, a.devices, a.node, x, y)
			}
		}
	}
}

func (e *env) cleanup(t *testing.T, template string, pods ...string) {
	t.Helper()
	for _, p := range pods {
		if err := framework.DeletePod(e.ctx, e.client, ns, p, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.client.ResourceV1().ResourceClaimTemplates(ns).Delete(e.ctx, template, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestTopology(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{})
	e := &env{ctx: ctx, client: c.Client(), peers: map[string]map[[2]string]bool{}}
	if err := framework.EnsureChartDeviceClasses(ctx, e.client); err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range nodes {
			if !yield(n) {
				return
			}
		}
	}) {
		profile := nodes[name]
		n, err := c.AddNode(ctx, cluster.NodeOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := framework.StartPlugin(ctx, c, n, framework.PluginOptions{Backend: "mock", Profile: profile}); err != nil {
			t.Fatal(err)
		}
		s, err := nvmlmock.NewServer(profile, name)
		if err != nil {
			t.Fatal(err)
		}
		e.peers[name] = s.NVLinkPeers()
	}

	// The published attributes are the API the examples are written against: check that the
	// real API server holds them (a dropped field would make every claim here fail).
	t.Run("PublishedAttributes", func(t *testing.T) {
		for name, want := range map[string]int{"nvl": 4, "cube": 8, "pcie": 0} {
			sl, err := framework.WaitForSlices(ctx, e.client, framework.GPUDriver, name, map[string]int{"nvl": 4, "cube": 8, "pcie": 4}[name])
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for _, s := range sl {
				for _, d := range s.Spec.Devices {
					if _, ok := d.Attributes["nvlinkIsland"]; ok {
						got++
					}
					// The gate DRAListTypeAttributes is off here: the plugin's dry run sees the
					// server drop list values and publishes none (TestTopologyCliques has it on).
					if _, ok := d.Attributes["nvlinkCliques"]; ok {
						t.Errorf("node %s: %s has nvlinkCliques on a server that drops list values", name, d.Name)
					}
				}
			}
			if got != want {
				t.Errorf("node %s: %d GPUs with nvlinkIsland, want %d", name, got, want)
			}
		}
	})

	// Four pairwise-connected GPUs: only the cube mesh's two quads; a third claim has nowhere
	// to go although the other nodes have eight GPUs free.
	t.Run("FourConnected", func(t *testing.T) {
		ex := load(t, "topology-4-connected.yaml")
		e.apply(t, ex, "four-a", "four-b")
		var got [][]string
		for _, p := range []string{"four-a", "four-b"} {
			a := e.running(t, p)
			if a.node != "cube" || len(a.devices) != 4 {
				t.Errorf("pod %s got %v on %s, want 4 GPUs on cube", p, a.devices, a.node)
			}
			e.pairwise(t, p, a)
			got = append(got, a.devices)
		}
		slices.SortFunc(got, func(x, y []string) int { return strings.Compare(x[0], y[0]) })
		if want := [][]string{{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, {"gpu-4", "gpu-5", "gpu-6", "gpu-7"}}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("the two claims got %v, want the quads %v", got, want)
		}
		e.createPod(t, ex, "four-c")
		e.pending(t, "four-c")
		e.cleanup(t, ex.template.Name, "four-a", "four-b", "four-c")
	})

	// Eight GPUs in one island: the cube mesh, whose island is no full mesh; once only.
	t.Run("EightInOneIsland", func(t *testing.T) {
		ex := load(t, "topology-island-8.yaml")
		e.apply(t, ex, "eight-a")
		if a := e.running(t, "eight-a"); a.node != "cube" || len(a.devices) != 8 {
			t.Errorf("got %v on %s, want 8 GPUs on cube", a.devices, a.node)
		}
		e.createPod(t, ex, "eight-b")
		e.pending(t, "eight-b")
		e.cleanup(t, ex.template.Name, "eight-a", "eight-b")
	})

	// Pairs: two on the bridged node, four on the cube mesh; a seventh stays unallocated with
	// the PCIe node's four GPUs free. The pairs are held for PreferNVLink.
	pairs := []string{"pair-1", "pair-2", "pair-3", "pair-4", "pair-5", "pair-6"}
	pairNode := map[string]string{}
	pairEx := load(t, "topology-bridge-pair.yaml")
	t.Run("BridgePairs", func(t *testing.T) {
		e.apply(t, pairEx, pairs...)
		perNode := map[string]int{}
		for _, p := range pairs {
			a := e.running(t, p)
			if len(a.devices) != 2 {
				t.Errorf("pod %s got %v", p, a.devices)
			}
			e.pairwise(t, p, a)
			perNode[a.node]++
			pairNode[p] = a.node
		}
		if perNode["nvl"] != 2 || perNode["cube"] != 4 {
			t.Errorf("pairs per node %v, want 2 on nvl and 4 on cube", perNode)
		}
		e.createPod(t, pairEx, "pair-7")
		e.pending(t, "pair-7")
		if err := framework.DeletePod(ctx, e.client, ns, "pair-7", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	})

	// A prioritized list: with every NVLink pair taken it falls back to any two GPUs (the PCIe
	// node's); once a pair is free, a new claim gets the pair, for its first subrequest.
	t.Run("PreferNVLink", func(t *testing.T) {
		ex := load(t, "topology-prefer-nvlink.yaml")
		// Two of them fill the PCIe node, so that the freed pair below is the one place left.
		e.apply(t, ex, "prefer-a", "prefer-a2")
		for _, p := range []string{"prefer-a", "prefer-a2"} {
			a := e.running(t, p)
			if a.node != "pcie" || !slices.Equal(a.requests, []string{"gpus/any"}) {
				t.Errorf("%s got %v on %s for %v, want two GPUs on pcie for gpus/any", p, a.devices, a.node, a.requests)
			}
		}
		if err := framework.DeletePod(ctx, e.client, ns, "pair-1", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		e.createPod(t, ex, "prefer-b")
		b := e.running(t, "prefer-b")
		if b.node != pairNode["pair-1"] || !slices.Equal(b.requests, []string{"gpus/nvlink"}) {
			t.Errorf("prefer-b got %v on %s for %v, want pair-1's freed pair on %s for gpus/nvlink", b.devices, b.node, b.requests, pairNode["pair-1"])
		}
		e.pairwise(t, "prefer-b", b)
		e.cleanup(t, ex.template.Name, "prefer-a", "prefer-a2", "prefer-b")
	})
	e.cleanup(t, pairEx.template.Name, pairs[1:]...)
}

// TestTopologyCliques runs the claim for pairwise-connected GPUs by their list of maximal
// cliques on a cluster with list-type attributes (the alpha gate DRAListTypeAttributes on the
// API server and the scheduler): the plugin finds with a dry run that the server keeps list
// values and publishes nvlinkCliques; on the hybrid cube mesh four GPUs with a clique in
// common are one of its two quads, and with one GPU of each quad taken the claim waits
// although six GPUs are free.
func TestTopologyCliques(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	gate := "--feature-gates=DRAListTypeAttributes=true"
	c := cluster.StartForTest(t, cluster.Options{APIServerFlags: []string{gate}, SchedulerFlags: []string{gate}})
	e := &env{ctx: ctx, client: c.Client(), peers: map[string]map[[2]string]bool{}}
	if err := framework.EnsureChartDeviceClasses(ctx, e.client); err != nil {
		t.Fatal(err)
	}
	n, err := c.AddNode(ctx, cluster.NodeOptions{Name: "cube"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.StartPlugin(ctx, c, n, framework.PluginOptions{Backend: "mock", Profile: nodes["cube"]}); err != nil {
		t.Fatal(err)
	}
	s, err := nvmlmock.NewServer(nodes["cube"], "cube")
	if err != nil {
		t.Fatal(err)
	}
	e.peers["cube"] = s.NVLinkPeers()
	sl, err := framework.WaitForSlices(ctx, e.client, framework.GPUDriver, "cube", 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sl {
		for _, d := range s.Spec.Devices {
			if a := d.Attributes["nvlinkCliques"]; len(a.StringValues) != 2 {
				t.Errorf("%s: nvlinkCliques %+v, want its quad and its cross pair", d.Name, a)
			}
		}
	}
	ex := load(t, "topology-pairwise-list.yaml")
	// gpu-0 and gpu-4 taken leave six GPUs free and no four pairwise connected: one GPU of
	// each quad is gone, and the other cliques are pairs.
	for _, idx := range []int{0, 4} {
		name := fmt.Sprintf("hold-gpu-%d", idx)
		tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: framework.DeviceClaim("gpus", framework.GPUDriver, 1,
				[]string{fmt.Sprintf(`device.attributes[%q].index == %d`, framework.GPUDriver, idx)}, "")}}}
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := ex.pod.DeepCopy()
		pod.Spec.ResourceClaims[0].ResourceClaimTemplateName = &tmpl.Name
		e.createPod(t, example{pod: *pod}, name)
		if a := e.running(t, name); !slices.Equal(a.devices, []string{fmt.Sprintf("gpu-%d", idx)}) {
			t.Fatalf("%s got %v", name, a.devices)
		}
	}
	e.apply(t, ex, "pairwise-held")
	e.pending(t, "pairwise-held")
	e.cleanup(t, "hold-gpu-0", "hold-gpu-0", "hold-gpu-4", "pairwise-held")
	if err := e.client.ResourceV1().ResourceClaimTemplates(ns).Delete(ctx, "hold-gpu-4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createPod(t, ex, "pairwise-a")
	e.createPod(t, ex, "pairwise-b")
	var got [][]string
	for _, p := range []string{"pairwise-a", "pairwise-b"} {
		a := e.running(t, p)
		e.pairwise(t, p, a)
		got = append(got, a.devices)
	}
	slices.SortFunc(got, func(x, y []string) int { return strings.Compare(x[0], y[0]) })
	if want := [][]string{{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, {"gpu-4", "gpu-5", "gpu-6", "gpu-7"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the two claims got %v, want the quads %v", got, want)
	}
	e.cleanup(t, ex.template.Name, "pairwise-a", "pairwise-b")
}
