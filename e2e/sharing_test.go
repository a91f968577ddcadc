//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
)

// TestDeviceSharing covers who may hold a GPU on a node when more than one party is involved: two
// plugin instances during a rolling update, and admin-access claims next to workloads.
func TestDeviceSharing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c := cluster.StartForTest(t, cluster.Options{})
	e := &driverEnv{t: t, ctx: ctx, c: c, client: c.Client(), ns: "default"}
	if err := framework.EnsureDeviceClasses(ctx, e.client); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.gpuNode, err = c.AddNode(ctx, cluster.NodeOptions{Name: "gpu-node"}); err != nil {
		t.Fatal(err)
	}
	// As the chart runs it: with the pod's UID, so the kubelet can hand over to a new pod. The
	// UID is short because the helper puts it into a socket name, and the harness's directories
	// are deeper than /var/lib/kubelet/plugins.
	if e.gpuPlugin, err = framework.StartPlugin(ctx, c, e.gpuNode, framework.PluginOptions{Backend: "mock", Profile: "h100-8x-2numa", PodUID: "old-pod"}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForSlices(ctx, e.client, gpuClass, "gpu-node", 8); err != nil {
		t.Fatal(err)
	}
	if !t.Run("RollingUpdate", e.testRollingUpdate) {
		return
	}
	t.Run("AdminAccess", e.testAdminAccess)
}

// nodeState is what is on the node's disk for the GPU driver, checked for the invariants that
// matter: no GPU in two workload claims, every prepared claim with exactly one spec.
type nodeState struct {
	records map[string][]string // claim UID -> non-admin device UUIDs
	specs   map[string][]string // claim UID -> GPU device nodes
}

var gpuNodeRE = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

func (e *driverEnv) readNodeState(t *testing.T) nodeState {
	t.Helper()
	st := nodeState{records: map[string][]string{}, specs: map[string][]string{}}
	dir := filepath.Join(e.gpuNode.PluginDataDir(gpuClass), "checkpoint")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		if !strings.HasSuffix(ent.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if os.IsNotExist(err) {
			continue // unprepared meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Claim struct {
				UID     string `json:"uid"`
				Devices []struct {
					UUID        string `json:"uuid"`
					AdminAccess bool   `json:"adminAccess"`
				} `json:"devices"`
			} `json:"claim"`
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatalf("record %s: %v", ent.Name(), err)
		}
		uuids := []string{}
		for _, d := range rec.Claim.Devices {
			if !d.AdminAccess {
				uuids = append(uuids, d.UUID)
			}
		}
		st.records[rec.Claim.UID] = uuids
	}
	names, err := e.gpuPlugin.CDISpecs()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(e.gpuPlugin.CDIDir, n))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var spec struct {
			Devices []struct {
				ContainerEdits struct {
					DeviceNodes []struct {
						Path string `json:"path"`
					} `json:"deviceNodes"`
				} `json:"containerEdits"`
			} `json:"devices"`
		}
		if err := json.Unmarshal(data, &spec); err != nil {
			t.Fatalf("spec %s: %v", n, err)
		}
		uid := strings.TrimSuffix(strings.TrimPrefix(n, "accel-dra.io-gpu_"), ".json")
		nodes := []string{}
		for _, d := range spec.Devices {
			for _, dn := range d.ContainerEdits.DeviceNodes {
				if gpuNodeRE.MatchString(dn.Path) {
					nodes = append(nodes, dn.Path)
				}
			}
		}
		st.specs[uid] = nodes
	}
	return st
}

// checkExclusive fails if a GPU is held by two workload claims on disk, or is in the containers
// of two running pods as the fake runtime created them. admins are pods allowed to share.
func (e *driverEnv) checkExclusive(t *testing.T, admins map[string]bool) {
	t.Helper()
	st := e.readNodeState(t)
	holder := map[string]string{}
	for uid, uuids := range st.records {
		for _, u := range uuids {
			if other, ok := holder[u]; ok {
				t.Errorf("GPU %s recorded for claims %s and %s", u, other, uid)
			}
			holder[u] = uid
		}
	}
	pods, err := e.client.CoreV1().Pods(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	latest := map[string][]string{} // running pod -> its container's GPU nodes
	for _, rec := range e.gpuNode.CRI.Containers() {
		latest[rec.PodNamespace+"/"+rec.PodName+"/"+rec.PodUID] = filterGPU(devicePaths(rec))
	}
	inUse := map[string]string{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || admins[p.Name] {
			continue
		}
		for _, dn := range latest[p.Namespace+"/"+p.Name+"/"+string(p.UID)] {
			if other, ok := inUse[dn]; ok {
				t.Errorf("%s is in the containers of running pods %s and %s", dn, other, p.Name)
			}
			inUse[dn] = p.Name
		}
	}
}

func filterGPU(paths []string) []string {
	var out []string
	for _, p := range paths {
		if gpuNodeRE.MatchString(p) {
			out = append(out, p)
		}
	}
	return out
}

// checkNoLeaks waits until the records and specs on disk are exactly those of the given claims.
func (e *driverEnv) checkNoLeaks(t *testing.T, want map[string]bool) {
	t.Helper()
	var st nodeState
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, podWait, true, func(context.Context) (bool, error) {
		st = e.readNodeState(t)
		if len(st.records) != len(want) || len(st.specs) != len(want) {
			return false, nil
		}
		for uid := range want {
			if _, ok := st.records[uid]; !ok {
				return false, nil
			}
			if _, ok := st.specs[uid]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("records %v and specs %v on disk, want exactly the claims %v", keysOf(st.records), keysOf(st.specs), keysOf(want))
	}
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// claimUIDs returns the UIDs of the generated claims of the named pods.
func (e *driverEnv) claimUIDs(t *testing.T, pods ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, p := range pods {
		c, _ := e.allocated(t, p)
		out[string(c.UID)] = true
	}
	return out
}

func (e *driverEnv) deletePods(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, podWait, true, func(ctx context.Context) (bool, error) {
			_, err := e.client.CoreV1().Pods(e.ns).Get(ctx, n, metav1.GetOptions{})
			return err != nil, nil
		})
		if err != nil {
			t.Fatalf("pod %s not gone", n)
		}
	}
}

// startPods creates pods, each with its own one-GPU claim, without waiting.
func (e *driverEnv) startPods(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, claimTemplate(e.ns, n, gpuClass, 1, nil, "", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, podWithTemplate(e.ns, n, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *driverEnv) waitRunning(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := framework.WaitForPodRunning(e.ctx, e.client, e.ns, n, podWait); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
		_, err := e.gpuNode.CRI.WaitForContainer(ctx, e.ns, n, "ctr")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// testRollingUpdate does what the DaemonSet's surge update does: a second plugin with a new pod
// UID starts while the first still serves, pods come and go through both, then the old one goes,
// here by kill -9 in the middle of the churn (the crash model: nothing is fsynced).
func (e *driverEnv) testRollingUpdate(t *testing.T) {
	old := e.gpuPlugin
	e.startPods(t, "ru-a", "ru-b", "ru-c")
	e.waitRunning(t, "ru-a", "ru-b", "ru-c")
	e.checkExclusive(t, nil)

	// The new pod of the update: its start-up reconciliation runs while the old one serves.
	surge, err := framework.StartPlugin(e.ctx, e.c, e.gpuNode, framework.PluginOptions{Backend: "mock", Profile: "h100-8x-2numa", PodUID: "new-pod"})
	if err != nil {
		t.Fatal(err)
	}
	e.gpuPlugin = surge
	e.checkNoLeaks(t, e.claimUIDs(t, "ru-a", "ru-b", "ru-c"))

	running := []string{"ru-a", "ru-b", "ru-c"}
	oldPrepared := "?"
	for round := 0; round < 4; round++ {
		// Two pods go, three come (the node has 8 GPUs), at the same time.
		gone := running[:2]
		running = running[2:]
		fresh := []string{fmt.Sprintf("ru-%d-x", round), fmt.Sprintf("ru-%d-y", round), fmt.Sprintf("ru-%d-z", round)}
		for _, n := range gone {
			if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		e.startPods(t, fresh...)
		if round == 2 {
			// The old instance dies while claims are being prepared and unprepared.
			oldPrepared = metricOr(old, "accel_dra_prepare_duration_seconds_count")
			old.Kill()
		}
		for _, n := range gone {
			err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, podWait, true, func(ctx context.Context) (bool, error) {
				_, err := e.client.CoreV1().Pods(e.ns).Get(ctx, n, metav1.GetOptions{})
				return err != nil, nil
			})
			if err != nil {
				t.Fatalf("pod %s not gone", n)
			}
		}
		e.waitRunning(t, fresh...)
		running = append(running, fresh...)
		e.checkExclusive(t, nil)
		e.checkNoLeaks(t, e.claimUIDs(t, running...))
	}
	t.Logf("old plugin prepared %v claims, new one %v", oldPrepared, metricOr(surge, "accel_dra_prepare_duration_seconds_count"))

	e.deletePods(t, running...)
	e.checkNoLeaks(t, map[string]bool{})
}

func metricOr(p *framework.Plugin, name string) string {
	v, err := p.Metric(name)
	if err != nil {
		return "?"
	}
	return fmt.Sprint(v)
}

// testAdminAccess: an admin-access claim and a workload claim on one GPU both run, whichever
// comes first, and the admin claim never keeps a second workload from being refused.
func (e *driverEnv) testAdminAccess(t *testing.T) {
	ns := "monitoring"
	if _, err := e.client.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{"resource.kubernetes.io/admin-access": "true"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, adminFirst := range []bool{false, true} {
		idx := 5
		if adminFirst {
			idx = 6
		}
		sel := fmt.Sprintf(`device.attributes["gpu.accel-dra.io"].index == %d`, idx)
		admin := claimTemplate(ns, fmt.Sprintf("admin-%d", idx), gpuClass, 1, []string{sel}, "", "")
		admin.Spec.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
		work := claimTemplate(ns, fmt.Sprintf("work-%d", idx), gpuClass, 1, []string{sel}, "", "")
		steps := []struct{ tmpl, pod string }{{work.Name, work.Name}, {admin.Name, admin.Name}}
		if adminFirst {
			steps[0], steps[1] = steps[1], steps[0]
		}
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(e.ctx, admin, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(ns).Create(e.ctx, work, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			if _, err := e.client.CoreV1().Pods(ns).Create(e.ctx, podWithTemplate(ns, s.pod, s.tmpl), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := framework.WaitForPodRunning(e.ctx, e.client, ns, s.pod, podWait); err != nil {
				t.Fatalf("adminFirst=%v: %v", adminFirst, err)
			}
			ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
			rec, err := e.gpuNode.CRI.WaitForContainer(ctx, ns, s.pod, "ctr")
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := filterGPU(devicePaths(rec)), fmt.Sprintf("/dev/nvidia%d", idx); len(got) != 1 || got[0] != want {
				t.Errorf("pod %s got GPUs %v, want %s", s.pod, got, want)
			}
		}
		e.checkExclusive(t, map[string]bool{"admin-5": true, "admin-6": true})
	}
}
