//go:build e2e

package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/accelctl"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

const (
	groupName = "gpu-h100"
	profile   = "h100-8x-2numa"
	podNS     = "default"
	podWait   = 3 * time.Minute
)

// groupLabels are labels Cluster API would sync from the MachineDeployment to its nodes.
var groupLabels = map[string]string{"node.cluster.x-k8s.io/pool": "h100", "example.com/accelerator": "h100"}

// claimCase is a claim for GPUs, whether it fits a real node of the h100-8x-2numa profile, and
// whether it fits the autoscaler's built-in template (gpu-count devices with only type=gpu).
type claimCase struct {
	name      string
	count     int64
	selectors []string
	sameNUMA  bool
	fits      bool
	builtin   bool
}

var claimCases = []claimCase{
	{name: "product-h100", count: 1, selectors: []string{`device.attributes["gpu.accel-dra.io"].productName == "NVIDIA H100 80GB HBM3"`}, fits: true},
	{name: "product-a100", count: 1, selectors: []string{`device.attributes["gpu.accel-dra.io"].productName.startsWith("NVIDIA A100")`}},
	{name: "memory-80gi-x8", count: 8, selectors: []string{`device.capacity["gpu.accel-dra.io"].memory.compareTo(quantity("80Gi")) >= 0`}, fits: true},
	{name: "memory-100gi", count: 1, selectors: []string{`device.capacity["gpu.accel-dra.io"].memory.compareTo(quantity("100Gi")) >= 0`}},
	{name: "numa-x4", count: 4, sameNUMA: true, fits: true},
	{name: "numa-x5", count: 5, sameNUMA: true},
	{name: "any-x8", count: 8, fits: true, builtin: true},
	{name: "any-x9", count: 9},
}

func (cc claimCase) template() *resourceapi.ResourceClaimTemplate {
	numa := ""
	if cc.sameNUMA {
		numa = "resource.kubernetes.io/numaNode"
	}
	claim := framework.DeviceClaim("gpus", framework.GPUDriver, cc.count, cc.selectors, numa)
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: cc.name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: claim}},
	}
}

func (cc claimCase) pod() *corev1.Pod {
	tmpl := cc.name
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: cc.name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(1)),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &tmpl}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}},
			}},
		},
	}
}

type env struct {
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	client kubernetes.Interface
	cl     client.Client
	pub    *publisherProcess
	dir    string
}

// startEnv starts a control plane with the DeviceClasses and Cluster API's CRDs, as every
// publisher test needs it.
func startEnv(ctx context.Context, t *testing.T) *env {
	t.Helper()
	c := cluster.StartForTest(t, cluster.Options{})
	cl, err := framework.NewCAPIClient(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, c: c, client: c.Client(), cl: cl, dir: t.TempDir()}
	if err := framework.EnsureDeviceClasses(ctx, e.client); err != nil {
		t.Fatal(err)
	}
	if err := framework.InstallClusterAPI(ctx, c.RESTConfig(), cl); err != nil {
		t.Fatal(err)
	}
	return e
}

// managed returns the publisher's keys of a set of annotations.
func managed(ann map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range ann {
		if nodegroup.IsManagedKey(k) {
			out[k] = v
		}
	}
	return out
}

// TestPublisher runs the publisher against a real control plane with Cluster API objects and
// real nodes running the node plugin, then scales the group to zero.
func TestPublisher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	start := time.Now()
	e := startEnv(ctx, t)
	c, cl := e.c, e.cl
	var err error
	g, err := framework.CreateNodeGroup(ctx, cl, groupName, nil)
	if err != nil {
		t.Fatal(err)
	}
	nodeA, _ := e.addGPUNode(g, "h100-a", "m-a")
	t.Logf("control plane, Cluster API CRDs and node %s ready after %s", nodeA.Name, time.Since(start).Round(time.Second))

	if e.pub, err = startPublisher(ctx, c, "--leader-elect=true", "--leader-election-namespace=default"); err != nil {
		t.Fatal(err)
	}

	// 1. Both sets of annotations are written, once.
	md, err := waitForMD(ctx, cl, groupName, 2*time.Minute, func(md *clusterv1.MachineDeployment) bool {
		return md.Annotations[template.HashAnnotation] != ""
	})
	if err != nil {
		t.Fatalf("no template on MachineDeployment %s: %v\n%s", groupName, err, e.pub.Proc.LogTail(30))
	}
	published := managed(md.Annotations)
	e.checkAnnotations(published)
	e.pub.settle(ctx, t, 2*time.Second)
	if w := e.pub.writes(t); w != 1 {
		t.Errorf("writes after the first publication = %v, want 1", w)
	}

	// 2. A second node of the group with other UUIDs: same template, no write.
	t.Run("SecondNodeNoWrite", func(t *testing.T) {
		rv := e.mdResourceVersion(groupName)
		writes, reconciles := e.pub.writes(t), e.pub.reconciles(t)
		nodeB, _ := e.addGPUNode(g, "h100-b", "m-b")
		if uuid(t, e.client, nodeA.Name) == uuid(t, e.client, nodeB.Name) {
			t.Fatalf("both nodes have GPU UUID %s; the test needs them to differ", uuid(t, e.client, nodeA.Name))
		}
		e.pub.settleAfter(ctx, t, 3*time.Second, reconciles)
		if w := e.pub.writes(t); w != writes {
			t.Errorf("writes went from %v to %v with a second node of the same shape", writes, w)
		}
		if got := e.mdResourceVersion(groupName); got != rv {
			t.Errorf("MachineDeployment resourceVersion changed from %s to %s", rv, got)
		}
	})

	// 3. What the real scheduler does with each claim on the real nodes.
	onNode := e.realOutcomes()

	// 4. Seeding groups that never had a node: copy-from and accelctl template seed.
	t.Run("SeedCopyFrom", func(t *testing.T) {
		if _, err := framework.CreateNodeGroup(ctx, cl, "gpu-h100-copy", map[string]string{nodegroup.CopyFromAnnotation: groupName}); err != nil {
			t.Fatal(err)
		}
		copied, err := waitForMD(ctx, cl, "gpu-h100-copy", time.Minute, func(md *clusterv1.MachineDeployment) bool {
			return md.Annotations[template.HashAnnotation] != ""
		})
		if err != nil {
			t.Fatalf("copy-from: no template: %v", err)
		}
		if got, want := copied.Annotations[template.HashAnnotation], published[template.HashAnnotation]; got != want {
			t.Errorf("copied hash %s, want %s", got, want)
		}
		if got := copied.Annotations[nodegroup.SourceAnnotation]; got != "copy-from:"+framework.CAPINamespace+"/"+groupName {
			t.Errorf("source = %q", got)
		}
		if got := copied.Annotations[nodegroup.CPUKey]; got != published[nodegroup.CPUKey] {
			t.Errorf("copied cpu = %q, want %q", got, published[nodegroup.CPUKey])
		}
	})
	t.Run("SeedAccelctl", func(t *testing.T) {
		reconciles := e.pub.reconciles(t)
		if _, err := framework.CreateNodeGroup(ctx, cl, "gpu-seeded", nil); err != nil {
			t.Fatal(err)
		}
		seed, err := filepath.Abs("../../api/templateconfig/v1alpha1/testdata/h100-seed.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := runAccelctl(ctx, c, "template", "seed", "gpu-seeded", "-n", framework.CAPINamespace, "-f", seed); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		writes := e.pub.writes(t)
		e.pub.settleAfter(ctx, t, 2*time.Second, reconciles)
		md, err := getMD(ctx, cl, "gpu-seeded")
		if err != nil {
			t.Fatal(err)
		}
		if md.Annotations[nodegroup.SourceAnnotation] != nodegroup.SourceSeed || md.Annotations[nodegroup.GPUCountKey] != "2" {
			t.Errorf("seeded annotations: %v", managed(md.Annotations))
		}
		if w := e.pub.writes(t); w != writes {
			t.Errorf("the publisher wrote to a seeded group without nodes (%v → %v)", writes, w)
		}
	})

	// 5. Scale to zero: machines deleted, kubelets and plugins stopped, nodes deleted.
	t.Run("ScaleToZeroKeepsAnnotations", func(t *testing.T) {
		writes, reconciles := e.pub.writes(t), e.pub.reconciles(t)
		for _, m := range []string{"m-a", "m-b"} {
			if err := cl.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: framework.CAPINamespace, Name: m}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range c.Processes() {
			if strings.HasPrefix(p.Name, "plugin-") {
				_ = p.Stop()
			}
		}
		for _, n := range c.Nodes() {
			n.Stop()
		}
		for _, name := range []string{"h100-a", "h100-b"} {
			if err := e.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		e.waitNoSlices()
		e.pub.settleAfter(ctx, t, 3*time.Second, reconciles)
		md, err := getMD(ctx, cl, groupName)
		if err != nil {
			t.Fatal(err)
		}
		if got := managed(md.Annotations); !maps.Equal(got, published) {
			t.Errorf("annotations changed at zero:\nbefore %v\nafter  %v", published, got)
		}
		if w := e.pub.writes(t); w != writes {
			t.Errorf("writes went from %v to %v when scaling to zero", writes, w)
		}
	})

	// 6. accelctl simulate on the template agrees with the real scheduler on the real node.
	t.Run("SimulateAgreesWithRealNode", func(t *testing.T) {
		for _, cc := range claimCases {
			file := filepath.Join(e.dir, cc.name+".yaml")
			data, err := yaml.Marshal(cc.template())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			// simulate's exit code follows the template's verdict: 0 fits, 2 does not fit.
			out, err := runAccelctl(ctx, c, "simulate", "-n", framework.CAPINamespace, "--node-group", groupName, "-f", file, "-o", "json")
			wantCode := accelctl.ExitFits
			if !onNode[cc.name] {
				wantCode = accelctl.ExitNotFit
			}
			code := 0
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != wantCode {
				t.Errorf("%s: simulate exited %d, want %d (real node: %v): %v", cc.name, code, wantCode, onNode[cc.name], err)
			}
			var rep accelctl.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("%s: %v\n%s", cc.name, err, out)
			}
			if rep.Template.Fits != onNode[cc.name] {
				t.Errorf("%s: simulate says fits=%v (%s), the real node said %v", cc.name, rep.Template.Fits, rep.Template.Reason, onNode[cc.name])
			}
			if rep.Builtin.Fits != cc.builtin {
				t.Errorf("%s: autoscaler built-in template fits=%v (%s), want %v", cc.name, rep.Builtin.Fits, rep.Builtin.Reason, cc.builtin)
			}
			t.Logf("%-15s real node: %-5v template: %-5v built-in: %v", cc.name, onNode[cc.name], rep.Template.Fits, rep.Builtin.Fits)
		}
	})

	t.Run("TemplateShow", func(t *testing.T) {
		out, err := runAccelctl(ctx, c, "template", "show", "-n", framework.CAPINamespace, groupName)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "NVIDIA H100 80GB HBM3") || !strings.Contains(out, "nodeName: "+accelctl.TemplateNodeName) || strings.Count(out, "  name: gpu-") != 8 {
			t.Errorf("accelctl template show:\n%s", out)
		}
	})

	// template list reads the groups from the real apiserver as metadata only.
	t.Run("TemplateList", func(t *testing.T) {
		out, err := runAccelctl(ctx, c, "template", "list", "-A", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		names := strings.Split(strings.TrimSpace(out), "\n")
		if !slices.Contains(names, "machinedeployment/"+groupName) || !slices.Contains(names, "machinedeployment/gpu-seeded") {
			t.Errorf("template list -A -o name lacks %s or gpu-seeded:\n%s", groupName, out)
		}
		out, err = runAccelctl(ctx, c, "template", "list", "-n", framework.CAPINamespace)
		if err != nil {
			t.Fatal(err)
		}
		var row string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[1] == groupName {
				row = strings.Join(f, " ")
			}
		}
		if !strings.HasPrefix(row, "MachineDeployment "+groupName+" nodes "+framework.GPUDriver+"=8 8 ") {
			t.Errorf("template list row of %s is %q:\n%s", groupName, row, out)
		}
	})

	t.Run("LeaderElectionAndEvents", func(t *testing.T) {
		lease, err := e.client.CoordinationV1().Leases("default").Get(ctx, "accel-dra-template-publisher", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("leader election lease: %v", err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Errorf("lease has no holder: %+v", lease.Spec)
		}
		evs, err := e.client.CoreV1().Events(framework.CAPINamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + groupName})
		if err != nil {
			t.Fatal(err)
		}
		published := 0
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning {
				t.Errorf("warning event on %s: %s %s", groupName, ev.Reason, ev.Message)
			}
			if ev.Reason == "TemplatePublished" {
				published++
			}
		}
		if published != 1 {
			t.Errorf("%d TemplatePublished events, want 1", published)
		}
	})
}

// addGPUNode starts a node with a real kubelet and the plugin on the H100 profile and makes it a
// machine of the group.
func (e *env) addGPUNode(g *framework.NodeGroup, name, machine string) (*cluster.Node, *framework.Plugin) {
	e.t.Helper()
	n, p := e.startGPUNode(name, nil)
	if _, err := g.AddMachine(e.ctx, e.cl, machine, name, true); err != nil {
		e.t.Fatal(err)
	}
	return n, p
}

// startGPUNode starts a node with a real kubelet (groupLabels and labels) and the plugin on the
// H100 profile, in no group yet.
func (e *env) startGPUNode(name string, labels map[string]string) (*cluster.Node, *framework.Plugin) {
	e.t.Helper()
	all := maps.Clone(groupLabels)
	maps.Copy(all, labels)
	n, err := e.c.AddNode(e.ctx, cluster.NodeOptions{Name: name, Labels: all})
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := framework.StartPlugin(e.ctx, e.c, n, framework.PluginOptions{Backend: "mock", Profile: profile})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := framework.WaitForSlices(e.ctx, e.client, framework.GPUDriver, name, 8); err != nil {
		e.t.Fatal(err)
	}
	return n, p
}

// allocatable returns a node's allocatable cpu and memory as the capacity keys write them. A
// seed that is to agree with the harness's nodes must say these: a seed's capacity keys are
// compared with the node's like its devices (divergence). Every node of the harness runs on
// this machine with the same kubelet settings, so they have the same.
func (e *env) allocatable(node string) (cpu, memory string) {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(e.ctx, node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	ann := nodegroup.Capacity([]*corev1.Node{n})
	return ann[nodegroup.CPUKey], ann[nodegroup.MemoryKey]
}

func (e *env) checkAnnotations(ann map[string]string) {
	t := e.t
	t.Helper()
	for _, k := range []string{
		template.VersionAnnotation, template.HashAnnotation, template.EncodingAnnotation, template.ResourceSlicesAnnotation,
		nodegroup.CPUKey, nodegroup.MemoryKey, nodegroup.EphemeralDiskKey, nodegroup.MaxPodsKey, nodegroup.LabelsKey,
	} {
		if ann[k] == "" {
			t.Errorf("annotation %s missing", k)
		}
	}
	for k, v := range map[string]string{
		nodegroup.DRADriverKey: framework.GPUDriver, nodegroup.GPUCountKey: "8", nodegroup.DRAPoolKey: framework.GPUDriver,
		nodegroup.SourceAnnotation: nodegroup.SourceNodes,
	} {
		if ann[k] != v {
			t.Errorf("%s = %q, want %q", k, ann[k], v)
		}
	}
	labels, err := nodegroup.ParseLabels(ann[nodegroup.LabelsKey])
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range groupLabels {
		if labels[k] != v {
			t.Errorf("labels annotation lacks %s=%s: %s", k, v, ann[nodegroup.LabelsKey])
		}
	}
	if _, ok := labels["kubernetes.io/hostname"]; ok {
		t.Errorf("labels annotation carries the hostname: %s", ann[nodegroup.LabelsKey])
	}
	tmpl, err := template.Decode(ann)
	if err != nil {
		t.Fatalf("published template does not decode: %v", err)
	}
	if len(tmpl.Drivers) != 1 || len(tmpl.Drivers[0].Devices) != 8 {
		t.Fatalf("template: %d drivers, want one with 8 devices", len(tmpl.Drivers))
	}
	d := tmpl.Drivers[0].Devices[0]
	if got := *d.Attributes["productName"].StringValue; got != "NVIDIA H100 80GB HBM3" {
		t.Errorf("productName %q", got)
	}
	if got := *d.Attributes["uuid"].StringValue; got != "uuid-0" {
		t.Errorf("uuid of gpu-0 is %q, want the placeholder uuid-0", got)
	}
	t.Logf("published: %d template bytes, cpu=%s memory=%s ephemeral-disk=%s maxPods=%s labels=%s",
		len(ann[template.ResourceSlicesAnnotation]), ann[nodegroup.CPUKey], ann[nodegroup.MemoryKey], ann[nodegroup.EphemeralDiskKey], ann[nodegroup.MaxPodsKey], ann[nodegroup.LabelsKey])
}

func (e *env) mdResourceVersion(name string) string {
	e.t.Helper()
	md, err := getMD(e.ctx, e.cl, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return md.ResourceVersion
}

// realOutcomes runs a pod with each claim on the real nodes and records whether it was
// scheduled (and started) or refused by the scheduler's DRA plugin.
func (e *env) realOutcomes() map[string]bool {
	t, ctx := e.t, e.ctx
	t.Helper()
	out := map[string]bool{}
	for _, cc := range claimCases {
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(podNS).Create(ctx, cc.template(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Claims that must not fit first, all at once: they allocate nothing.
	for _, cc := range claimCases {
		if !cc.fits {
			if _, err := e.client.CoreV1().Pods(podNS).Create(ctx, cc.pod(), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, cc := range claimCases {
		if cc.fits {
			continue
		}
		if _, err := framework.WaitForPodEvent(ctx, e.client, podNS, cc.name, podWait, "cannot allocate all claims"); err != nil {
			t.Errorf("%s: %v", cc.name, err)
		}
		pod, err := e.client.CoreV1().Pods(podNS).Get(ctx, cc.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out[cc.name] = pod.Spec.NodeName != ""
	}
	e.deletePods()
	for _, cc := range claimCases {
		if !cc.fits {
			continue
		}
		if _, err := e.client.CoreV1().Pods(podNS).Create(ctx, cc.pod(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := framework.WaitForPodRunning(ctx, e.client, podNS, cc.name, podWait); err != nil {
			t.Errorf("%s: %v", cc.name, err)
		} else {
			out[cc.name] = true
		}
		e.deletePods()
	}
	for _, cc := range claimCases {
		if out[cc.name] != cc.fits {
			t.Errorf("real node: %s fits=%v, want %v", cc.name, out[cc.name], cc.fits)
		}
	}
	return out
}

// deletePods deletes the pods and waits until they and their claims are gone, so that the
// devices are free again.
func (e *env) deletePods() {
	t, ctx := e.t, e.ctx
	t.Helper()
	if err := e.client.CoreV1().Pods(podNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.client.CoreV1().Pods(podNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		claims, err := e.client.ResourceV1().ResourceClaims(podNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		return len(pods.Items) == 0 && len(claims.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("pods and claims not gone: %v", err)
	}
}

// waitNoSlices waits until the deleted nodes' ResourceSlices are gone (garbage collected with
// their Node), deleting leftovers after a while as a node's removal would.
func (e *env) waitNoSlices() {
	t, ctx := e.t, e.ctx
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		if len(list.Items) > 0 && time.Now().After(deadline) {
			for _, s := range list.Items {
				_ = e.client.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{})
			}
		}
		return len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("ResourceSlices not gone: %v", err)
	}
}

// uuid returns the uuid attribute of gpu-0 of a node.
func uuid(t *testing.T, client kubernetes.Interface, node string) string {
	t.Helper()
	slices, err := framework.WaitForSlices(context.Background(), client, framework.GPUDriver, node, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name == "gpu-0" {
				return *d.Attributes["uuid"].StringValue
			}
		}
	}
	t.Fatalf("node %s has no gpu-0", node)
	return ""
}
