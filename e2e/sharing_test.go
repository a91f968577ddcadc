//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/fakecri"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/driver"
)

// TestDeviceSharing covers who may hold a GPU on a node when more than one party is involved: two
// plugin instances during a rolling update (with whole GPUs, consumable-memory shares and
// dynamic-MIG partitions), and admin-access claims next to workloads.
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
	// The same surge on nodes of their own, whose plugins run with other flags; their pods are
	// pinned to them.
	t.Run("RollingUpdateConsumableMemory", e.testRollingUpdateShares)
	t.Run("RollingUpdateDynamicMIG", e.testRollingUpdateMIG)
}

// nodeState is what is on the node's disk for the GPU driver, checked for the invariants that
// matter: no GPU in two workload claims, every prepared claim with exactly one spec.
type nodeState struct {
	records map[string][]string         // claim UID -> non-admin device UUIDs
	devices map[string][]recordedDevice // claim UID -> its devices as recorded
	specs   map[string][]string         // claim UID -> GPU device nodes
}

// recordedDevice is the part of a checkpoint record's device the invariants look at.
type recordedDevice struct {
	Device           string                       `json:"device"`
	UUID             string                       `json:"uuid"`
	AdminAccess      bool                         `json:"adminAccess"`
	ShareID          string                       `json:"shareID"`
	ConsumedCapacity map[string]resource.Quantity `json:"consumedCapacity"`
	MIG              *struct {
		ParentUUID string `json:"parentUUID"`
		Start      int    `json:"start"`
		Size       int    `json:"size"`
		GI         *int   `json:"gi"`
	} `json:"mig"`
}

var gpuNodeRE = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

func (e *driverEnv) readNodeState(t *testing.T) nodeState {
	t.Helper()
	st := nodeState{records: map[string][]string{}, devices: map[string][]recordedDevice{}, specs: map[string][]string{}}
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
				UID     string           `json:"uid"`
				Devices []recordedDevice `json:"devices"`
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
		st.devices[rec.Claim.UID] = rec.Claim.Devices
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

// surge is one rolling-update scenario: how the plugin runs, what each pod's claim asks for, and
// what must hold on the node whenever the pods have settled.
type surge struct {
	plugin framework.PluginOptions // PodUID is set per instance
	// claim is the claim template of the i-th pod of the scenario.
	claim func(ns, name string, i int) *resourceapi.ResourceClaimTemplate
	// check asserts the scenario's invariants on disk and in the fake runtime.
	check func(e *driverEnv, t *testing.T)
	// crash makes the instances kill themselves (SIGKILL) in the middle of a dynamic-MIG
	// prepare, right after NVML created the compute instance (nvmlmock.CrashFileName): the
	// new one, and the old one while the new one is down, instead of kill -9 from outside.
	crash bool
}

// testRollingUpdate does what the DaemonSet's surge update does, with whole GPUs.
func (e *driverEnv) testRollingUpdate(t *testing.T) {
	e.rollingUpdate(t, "ru", surge{
		plugin: framework.PluginOptions{Backend: "mock", Profile: "h100-8x-2numa"},
		claim: func(ns, name string, _ int) *resourceapi.ResourceClaimTemplate {
			return claimTemplate(ns, name, gpuClass, 1, nil, "", "")
		},
		check: func(e *driverEnv, t *testing.T) { e.checkExclusive(t, nil) },
	})
}

// testRollingUpdateShares runs the surge with consumable memory: every pod's claim is a share
// of one of three GPUs, so that several shares sit on each GPU while both instances serve.
func (e *driverEnv) testRollingUpdateShares(t *testing.T) {
	o := framework.PluginOptions{Backend: "mock", Profile: "h100-8x-2numa", ExtraArgs: []string{"--consumable-memory"}}
	se := e.sibling(t, "share-node", o, 8)
	sizes := []string{"30Gi", "10Gi", "20Gi"}
	se.rollingUpdate(t, "cm", surge{
		plugin: o,
		claim: func(ns, name string, i int) *resourceapi.ResourceClaimTemplate {
			tmpl := claimTemplate(ns, name, gpuClass, 1, []string{`device.attributes["gpu.accel-dra.io"].index <= 2`}, "", "")
			tmpl.Spec.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{
				Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(sizes[i%len(sizes)])},
			}
			return tmpl
		},
		check: (*driverEnv).checkShares,
	})
}

// testRollingUpdateMIG runs the surge with dynamic MIG: every pod's claim is a 1g or 2g
// partition of one of three GPUs, created on prepare and destroyed on unprepare, and each
// instance is killed by the mock between creating a compute instance and recording it.
func (e *driverEnv) testRollingUpdateMIG(t *testing.T) {
	// Eight H100s in MIG mode: 26 devices each (the whole GPU and 25 partitions).
	o := framework.PluginOptions{Backend: "mock", Profile: "h100-8x-mig", ExtraArgs: []string{"--dynamic-mig"}}
	me := e.sibling(t, "mig-node", o, 8*26)
	profiles := []string{"1g.10gb", "2g.20gb", "1g.10gb"}
	me.rollingUpdate(t, "mig", surge{
		plugin: o,
		claim: func(ns, name string, i int) *resourceapi.ResourceClaimTemplate {
			return claimTemplate(ns, name, gpuClass, 1, []string{
				`device.attributes["gpu.accel-dra.io"].type == "mig"`,
				fmt.Sprintf(`device.attributes["gpu.accel-dra.io"].profile == %q`, profiles[i%len(profiles)]),
				`device.attributes["gpu.accel-dra.io"].index <= 2`,
			}, "", "")
		},
		check: (*driverEnv).checkMIG,
		crash: true,
	})
	// Every pod is gone: so must be every MIG instance, including the one of the killed attempt.
	me.waitMIG(t, func(st migState) error {
		if len(st.instances) != 0 {
			return fmt.Errorf("MIG instances %v left after every pod ended", keysOf(st.instances))
		}
		return nil
	})
}

// sibling adds a node to the cluster with its own plugin (as the old pod of a rolling update),
// for a scenario that needs other plugin flags than gpu-node's, and waits for its devices.
func (e *driverEnv) sibling(t *testing.T, node string, o framework.PluginOptions, devices int) *driverEnv {
	t.Helper()
	// A prepare that failed is retried at the kubelet's next resync of the pod, a minute by
	// default; the crash scenario waits for that, so it is shortened.
	n, err := e.c.AddNode(e.ctx, cluster.NodeOptions{Name: node, KubeletFlags: []string{"--sync-frequency=5s"}})
	if err != nil {
		t.Fatal(err)
	}
	old := o
	old.PodUID = "old-pod"
	p, err := framework.StartPlugin(e.ctx, e.c, n, old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.WaitForSlices(e.ctx, e.client, gpuClass, node, devices); err != nil {
		t.Fatal(err)
	}
	return &driverEnv{t: t, ctx: e.ctx, c: e.c, client: e.client, ns: e.ns, gpuNode: n, gpuPlugin: p}
}

// rollingUpdate: a second plugin with a new pod UID starts while the first serves and while pods
// come and go, pods keep coming and going through both, and the old one goes, here by kill -9
// in the middle of the churn (the crash model: nothing is fsynced). e.gpuPlugin is the old one.
// The node must hold s's invariants and exactly the running pods' claims after every round, and
// nothing once every pod is gone.
func (e *driverEnv) rollingUpdate(t *testing.T, prefix string, s surge) {
	old := e.gpuPlugin
	began := time.Now()
	serial := 0
	start := func(names ...string) {
		for _, n := range names {
			if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, s.claim(e.ns, n, serial), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			serial++
			if _, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, e.pod(n), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	running := []string{prefix + "-a", prefix + "-b", prefix + "-c"}
	start(running...)
	e.waitRunning(t, running...)
	s.check(e, t)

	var surgePlugin *framework.Plugin
	oldPrepared := "?"
	for round := 0; round < 4; round++ {
		// Two pods go, three come, at the same time.
		gone := running[:2]
		running = running[2:]
		fresh := []string{fmt.Sprintf("%s-%d-x", prefix, round), fmt.Sprintf("%s-%d-y", prefix, round), fmt.Sprintf("%s-%d-z", prefix, round)}
		if round == 1 && s.crash {
			if err := os.WriteFile(filepath.Join(e.mockDir(), nvmlmock.CrashFileName), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range gone {
			if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		start(fresh...)
		// Two pods that go as soon as they come: the kubelet's prepare of their claims is in
		// flight when it cancels it and sends the unprepare, which goes to the newest instance
		// while the prepare may still run on the other one (the race a surge opens). Nothing of
		// them may stay: checkNoLeaks below knows only the running pods' claims.
		flash := []string{fmt.Sprintf("%s-%d-f1", prefix, round), fmt.Sprintf("%s-%d-f2", prefix, round)}
		start(flash...)
		for i, n := range flash {
			time.Sleep(time.Duration(i*150) * time.Millisecond)
			if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		gone = append(gone[:len(gone):len(gone)], flash...)
		switch {
		case round == 0:
			// The new pod of the update starts while the old one prepares and unprepares: its
			// start-up reconciliation runs against the old one's work in flight.
			o := s.plugin
			o.PodUID = "new-pod"
			var err error
			if surgePlugin, err = framework.StartPlugin(e.ctx, e.c, e.gpuNode, o); err != nil {
				t.Fatal(err)
			}
			e.gpuPlugin = surgePlugin
		case round == 1 && s.crash:
			// The instance the kubelet asks, the new one, dies with a MIG instance made and
			// not yet recorded. While it is down the kubelet retries through the old one,
			// which dies the same way; then the new one is restarted, as the kubelet restarts
			// its container, and must clean up after both.
			crashFile := filepath.Join(e.mockDir(), nvmlmock.CrashFileName)
			select {
			case <-surgePlugin.Process().Done():
				if err := os.WriteFile(crashFile, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				select {
				case <-old.Process().Done():
				case <-time.After(podWait):
					t.Fatal("the kubelet did not retry the failed prepare through the old instance while the new one was down")
				}
			case <-old.Process().Done():
				t.Log("the kubelet asked the old instance; only it was killed in the middle of a prepare")
			case <-time.After(podWait):
				t.Fatal("no plugin instance was killed by the mock while preparing")
			}
			if surgePlugin.Process().Exited() {
				if err := surgePlugin.Restart(e.ctx); err != nil {
					t.Fatal(err)
				}
			}
			oldPrepared = "? (killed)"
		case round == 2 && !s.crash:
			// The old instance dies while claims are being prepared and unprepared.
			oldPrepared = metricOr(old, "accel_dra_prepare_duration_seconds_count")
			old.Kill()
		}
		for _, n := range gone {
			if err := e.waitGone(n); err != nil {
				t.Fatal(err)
			}
		}
		e.waitRunning(t, fresh...)
		running = append(running, fresh...)
		e.checkNoLeaks(t, e.claimUIDs(t, running...))
		s.check(e, t)
		t.Logf("round %d settled after %s", round, time.Since(began).Round(100*time.Millisecond))
	}
	t.Logf("old plugin prepared %v claims, new one %v", oldPrepared, metricOr(surgePlugin, "accel_dra_prepare_duration_seconds_count"))

	e.deletePods(t, running...)
	e.checkNoLeaks(t, map[string]bool{})
	s.check(e, t)
}

// pod is a pod whose claim comes from the template of its name, on this env's node.
func (e *driverEnv) pod(name string) *corev1.Pod {
	p := podWithTemplate(e.ns, name, name)
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: e.gpuNode.Name}
	return p
}

func (e *driverEnv) waitGone(name string) error {
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, podWait, true, func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s not gone: %w", name, err)
	}
	return nil
}

func (e *driverEnv) mockDir() string {
	return filepath.Join(e.gpuNode.PluginDataDir(gpuClass), "mock")
}

// checkShares fails unless the records on disk share GPUs as consumable memory allows: the
// shares held on a GPU sum to at most its memory, no share is held twice, a GPU held for
// exclusive use has no share; and unless the running pods' containers were told shares that
// fit their GPUs.
func (e *driverEnv) checkShares(t *testing.T) {
	t.Helper()
	memory := e.gpuMemory(t)
	st := e.readNodeState(t)
	used := map[string]int64{}
	shareHolder := map[string]string{}
	exclusive := map[string]string{}
	shared := map[string]string{}
	for uid, devs := range st.devices {
		for _, d := range devs {
			switch {
			case d.AdminAccess:
				continue
			case d.ShareID == "":
				if other, ok := exclusive[d.UUID]; ok {
					t.Errorf("GPU %s recorded for exclusive use by claims %s and %s", d.UUID, other, uid)
				}
				exclusive[d.UUID] = uid
				continue
			}
			shared[d.UUID] = uid
			key := d.UUID + "/" + d.ShareID
			if other, ok := shareHolder[key]; ok {
				t.Errorf("share %s of GPU %s recorded for claims %s and %s", d.ShareID, d.UUID, other, uid)
			}
			shareHolder[key] = uid
			q, ok := d.ConsumedCapacity["memory"]
			if !ok {
				t.Errorf("claim %s: share %s of GPU %s recorded without consumed memory", uid, d.ShareID, d.UUID)
			}
			used[d.UUID] += q.Value()
		}
	}
	for u, uid := range exclusive {
		if other, ok := shared[u]; ok {
			t.Errorf("GPU %s recorded for exclusive use by claim %s and as a share by claim %s", u, uid, other)
		}
	}
	for u, n := range used {
		if n > memory[u] {
			t.Errorf("shares of GPU %s in the records sum to %d bytes, more than its %d", u, n, memory[u])
		}
	}
	if len(st.devices) > 0 && len(shareHolder) == 0 {
		t.Error("claims recorded, none of them a share: the scenario tests nothing")
	}

	told := map[string]int64{}
	for _, rec := range e.runningContainers(t) {
		for _, kv := range rec.Env {
			v, ok := strings.CutPrefix(kv, driver.EnvMemoryLimits+"=")
			if !ok {
				continue
			}
			for _, part := range strings.Split(v, ",") {
				u, b, _ := strings.Cut(part, "=")
				n, err := strconv.ParseInt(b, 10, 64)
				if err != nil {
					t.Fatalf("pod %s: %s", rec.PodName, kv)
				}
				told[u] += n
			}
		}
	}
	for u, n := range told {
		if n > memory[u] {
			t.Errorf("running containers were told shares of GPU %s summing to %d bytes, more than its %d", u, n, memory[u])
		}
	}
}

// gpuMemory is each GPU's memory capacity as the node publishes it, by UUID.
func (e *driverEnv) gpuMemory(t *testing.T) map[string]int64 {
	t.Helper()
	list, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + e.gpuNode.Name + ",spec.driver=" + gpuClass})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if u, ok := d.Attributes["uuid"]; ok && u.StringValue != nil {
				m := d.Capacity["memory"].Value
				out[*u.StringValue] = m.Value()
			}
		}
	}
	return out
}

// runningContainers are the latest containers the fake runtime made for pods that are running
// and not being deleted.
func (e *driverEnv) runningContainers(t *testing.T) []fakecri.ContainerRecord {
	t.Helper()
	pods, err := e.client.CoreV1().Pods(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + e.gpuNode.Name})
	if err != nil {
		t.Fatal(err)
	}
	latest := map[string]fakecri.ContainerRecord{}
	for _, rec := range e.gpuNode.CRI.Containers() {
		latest[rec.PodNamespace+"/"+rec.PodName+"/"+rec.PodUID] = rec
	}
	var out []fakecri.ContainerRecord
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		if rec, ok := latest[p.Namespace+"/"+p.Name+"/"+string(p.UID)]; ok {
			out = append(out, rec)
		}
	}
	return out
}

// migState is the MIG instances that exist on the mock's GPUs (its state file), by the UUID of
// the MIG device, and the placements the records hold.
type migState struct {
	instances map[string]string // MIG device UUID -> "minor/gi<id>@<start>"; "" UUID for a GI without CI
	orphanGIs []string          // GPU instances without a compute instance
}

// readMIG reads the mock's MIG instances.
func (e *driverEnv) readMIG(t *testing.T) migState {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.mockDir(), nvmlmock.StateFileName))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		GPUs map[string]struct {
			GIs []struct {
				ID    int `json:"id"`
				Start int `json:"start"`
				CIs   []struct {
					UUID string `json:"uuid"`
				} `json:"cis"`
			} `json:"gis"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("mock MIG state: %v", err)
	}
	st := migState{instances: map[string]string{}}
	for minor, g := range raw.GPUs {
		for _, gi := range g.GIs {
			id := fmt.Sprintf("%s/gi%d@%d", minor, gi.ID, gi.Start)
			if len(gi.CIs) == 0 {
				st.orphanGIs = append(st.orphanGIs, id)
			}
			for _, ci := range gi.CIs {
				st.instances[ci.UUID] = id
			}
		}
	}
	return st
}

// checkMIG fails unless the MIG instances on the mock's GPUs are exactly those the records
// hold (each where its record says), no two records hold overlapping placements of a GPU, and
// no two running pods got the same MIG instance.
func (e *driverEnv) checkMIG(t *testing.T) {
	t.Helper()
	e.waitMIG(t, func(mock migState) error {
		st := e.readNodeState(t)
		var errs []string
		recorded := map[string]string{}
		type span struct {
			claim      string
			start, end int
		}
		byGPU := map[string][]span{}
		for uid, devs := range st.devices {
			for _, d := range devs {
				if d.MIG == nil {
					continue
				}
				for _, o := range byGPU[d.MIG.ParentUUID] {
					if d.MIG.Start < o.end && o.start < d.MIG.Start+d.MIG.Size {
						errs = append(errs, fmt.Sprintf("claims %s and %s hold overlapping placements of GPU %s", o.claim, uid, d.MIG.ParentUUID))
					}
				}
				byGPU[d.MIG.ParentUUID] = append(byGPU[d.MIG.ParentUUID], span{uid, d.MIG.Start, d.MIG.Start + d.MIG.Size})
				if d.MIG.GI == nil || d.UUID == "" {
					errs = append(errs, fmt.Sprintf("claim %s: MIG device %s recorded without its instance", uid, d.Device))
					continue
				}
				if _, dup := recorded[d.UUID]; dup {
					errs = append(errs, fmt.Sprintf("MIG device %s recorded twice", d.UUID))
				}
				recorded[d.UUID] = fmt.Sprintf("gi%d@%d", *d.MIG.GI, d.MIG.Start)
			}
		}
		for u, where := range recorded {
			got, ok := mock.instances[u]
			if !ok {
				errs = append(errs, fmt.Sprintf("recorded MIG device %s does not exist", u))
			} else if !strings.HasSuffix(got, "/"+where) {
				errs = append(errs, fmt.Sprintf("MIG device %s is %s, recorded as %s", u, got, where))
			}
		}
		for u, where := range mock.instances {
			if _, ok := recorded[u]; !ok {
				errs = append(errs, fmt.Sprintf("MIG device %s (%s) exists and no record holds it", u, where))
			}
		}
		for _, gi := range mock.orphanGIs {
			errs = append(errs, fmt.Sprintf("GPU instance %s exists without a compute instance", gi))
		}
		if len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
		return nil
	})
	caps := map[string]string{}
	for _, rec := range e.runningContainers(t) {
		for _, p := range devicePaths(rec) {
			if !strings.HasPrefix(p, "/dev/nvidia-caps/") {
				continue
			}
			if other, ok := caps[p]; ok {
				t.Errorf("%s is in the containers of running pods %s and %s", p, other, rec.PodName)
			}
			caps[p] = rec.PodName
		}
	}
}

// waitMIG polls the mock's MIG state until ok accepts it; the node settles right after the
// pods did, but an unprepare may still be finishing.
func (e *driverEnv) waitMIG(t *testing.T, ok func(migState) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = ok(e.readMIG(t))
		return last == nil, nil
	})
	if err != nil {
		t.Fatal(last)
	}
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
