package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	stdslices "slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/sharing/mpspod"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// fakeModes is a device.ComputeModeSetter that keeps each GPU's mode; fail makes calls for a
// UUID fail.
type fakeModes struct {
	mu    sync.Mutex
	modes map[string]device.ComputeMode
	calls []string
	fail  map[string]bool
}

func (f *fakeModes) SetComputeMode(_ context.Context, uuid string, mode device.ComputeMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[uuid] {
		return errors.New("insufficient permissions")
	}
	f.modes[uuid] = mode
	f.calls = append(f.calls, uuid+"="+string(mode))
	return nil
}

func (f *fakeModes) take() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := strings.Join(f.calls, " ")
	f.calls = nil
	return s
}

func mpsEnv(t *testing.T) (*env, *sharing.MPS, *fakeModes) {
	standin.NeedMount(t)
	bin := standin.Build(t, standin.MockTools, "nvidia-cuda-mps-control")
	m := &sharing.MPS{Root: filepath.Join(t.TempDir(), "mps"), Daemons: sharing.Processes{Control: sharing.MPSControl{Path: bin}}}
	f := &fakeModes{modes: map[string]device.ComputeMode{}, fail: map[string]bool{}}
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, dir: t.TempDir(), inv: inventory(2), kube: fake.NewClientset(), boot: bootA,
		tweak: func(o *Options) { o.MPS = m; o.ConsumableMemory = true; o.ComputeMode = f }}
	e.start()
	t.Cleanup(func() {
		entries, _ := os.ReadDir(m.Root)
		for _, en := range entries {
			_ = m.Stop(e.ctx, en.Name())
		}
	})
	return e, m, f
}

// mpsRunning is m.Running, failing t on an error.
func mpsRunning(t *testing.T, m *sharing.MPS, key string) bool {
	t.Helper()
	ok, err := m.Running(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// mpsPID is the PID of the last stand-in daemon that started for key, 0 for none.
func mpsPID(t *testing.T, m *sharing.MPS, key string) int {
	t.Helper()
	_, log := m.Dirs(key)
	if pids := standin.MPSDaemonPIDs(t, log); len(pids) > 0 {
		return pids[len(pids)-1]
	}
	return 0
}

// killMPS kills the daemon key (a crash) and waits until it no longer runs.
func killMPS(t *testing.T, m *sharing.MPS, key string) {
	t.Helper()
	if err := syscall.Kill(mpsPID(t, m, key), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for mpsRunning(t, m, key) {
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMPS(t *testing.T) {
	e, m, f := mpsEnv(t)
	c := claim("m1", []result{{Device: "gpu-0"}, {Device: "gpu-1"}},
		sharingConfig(`{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":25,"defaultPinnedDeviceMemoryLimit":"8Gi","defaultPerDevicePinnedMemoryLimit":{"gpu-1":"1.5Gi"}}}`))
	e.exist(c)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	pid := mpsPID(t, m, "m1")
	if !mpsRunning(t, m, "m1") {
		t.Fatal("no MPS daemon after prepare")
	}
	pipe, logDir := m.Dirs("m1")
	spec, err := os.ReadFile(e.specPath("m1"))
	if err != nil {
		t.Fatal(err)
	}
	// The containers see the directories where any user reaches them (docs/sharing.md).
	for _, want := range []string{"CUDA_MPS_PIPE_DIRECTORY=" + sharing.PipeDir, "CUDA_MPS_LOG_DIRECTORY=" + sharing.LogDir,
		`"hostPath":"` + pipe + `","containerPath":"` + sharing.PipeDir + `"`, `"hostPath":"` + logDir + `","containerPath":"` + sharing.LogDir + `"`,
		`"hostPath":"` + m.ShmDir("m1") + `","containerPath":"/dev/shm"`} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("CDI spec lacks %s:\n%s", want, spec)
		}
	}
	if mounted, err := sharing.IsMountPoint(m.ShmDir("m1")); !mounted {
		t.Errorf("no tmpfs at the claim's shm directory: %v", err)
	}
	u0, u1 := e.inv.Devices[0].UUID, e.inv.Devices[1].UUID
	if got, want := f.take(), u0+"=EXCLUSIVE_PROCESS "+u1+"=EXCLUSIVE_PROCESS"; got != want {
		t.Errorf("compute modes set at prepare: %q, want %q", got, want)
	}
	wantLog := []string{"CUDA_VISIBLE_DEVICES=" + u0 + "," + u1, "command set_default_active_thread_percentage 25",
		"command set_default_device_pinned_mem_limit " + u0 + " 8192M", "command set_default_device_pinned_mem_limit " + u1 + " 1536M"}
	checkLog := func(when string) {
		t.Helper()
		log, err := os.ReadFile(filepath.Join(logDir, "control.log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wantLog {
			if !strings.Contains(string(log), w) {
				t.Errorf("%s: daemon log lacks %q:\n%s", when, w, log)
			}
		}
	}
	checkLog("prepare")

	// A plugin restart adopts the running daemon.
	e.start()
	if again, ok := mpsPID(t, m, "m1"), mpsRunning(t, m, "m1"); !ok || again != pid {
		t.Fatalf("after a plugin restart: daemon %d running %v, want %d adopted", again, ok, pid)
	}
	// A daemon that died (with the plugin's container, or by itself) is started again, with
	// its limits.
	killMPS(t, m, "m1")
	if err := os.Remove(filepath.Join(logDir, "control.log")); err != nil {
		t.Fatal(err)
	}
	e.start()
	again, ok := mpsPID(t, m, "m1"), mpsRunning(t, m, "m1")
	if !ok || again == pid || again == 0 {
		t.Fatalf("after the daemon died: running %v pid %d (was %d), want a new daemon", ok, again, pid)
	}
	checkLog("restart")

	// The kubelet's prepare of a prepared claim (after its own restart) also brings a dead
	// daemon back.
	killMPS(t, m, "m1")
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	if third, ok := mpsPID(t, m, "m1"), mpsRunning(t, m, "m1"); !ok || third == again {
		t.Fatalf("after prepare of a prepared claim whose daemon died: running %v pid %d", ok, third)
	}

	if err := e.unprepare("m1"); err != nil {
		t.Fatal(err)
	}
	if mpsRunning(t, m, "m1") {
		t.Error("MPS daemon still running after unprepare")
	}
	if _, err := os.Stat(filepath.Join(m.Root, "m1")); !os.IsNotExist(err) {
		t.Errorf("MPS directory left after unprepare: %v", err)
	}
	if f.modes[u0] != device.ComputeModeDefault || f.modes[u1] != device.ComputeModeDefault {
		t.Errorf("compute modes after unprepare: %v, want DEFAULT", f.modes)
	}
}

// TestMPSComputeModeSurvivesCrash: the record of an MPS claim says its GPUs are to get DEFAULT
// back, so that a claim deleted while the plugin was down gets it at start-up, and a failed
// restore keeps the record until one succeeds.
func TestMPSComputeModeSurvivesCrash(t *testing.T) {
	e, m, f := mpsEnv(t)
	u0 := e.inv.Devices[0].UUID
	mps := sharingConfig(`{"strategy":"MPS"}`)
	if r := e.prepare(claim("m1", []result{{Device: "gpu-0"}}, mps)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if f.modes[u0] != device.ComputeModeExclusiveProcess {
		t.Fatalf("compute mode after prepare: %v", f.modes)
	}
	// The claim is not in the API server: start-up drops it, stops its daemon, and puts the
	// default back.
	e.start()
	if f.modes[u0] != device.ComputeModeDefault {
		t.Errorf("start-up after the claim went: compute modes %v, want DEFAULT", f.modes)
	}
	if _, err := os.Stat(filepath.Join(m.Root, "m1")); !os.IsNotExist(err) {
		t.Errorf("MPS directory left after start-up dropped the claim: %v", err)
	}

	c := claim("m2", []result{{Device: "gpu-0"}}, mps)
	e.exist(c)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	f.fail[u0] = true
	if err := e.unprepare("m2"); err == nil || !strings.Contains(err.Error(), "setting compute mode DEFAULT on GPU "+u0) {
		t.Fatalf("unprepare with a GPU that refuses: %v", err)
	}
	if !exists(e.recordPath("m2")) {
		t.Fatal("record removed although the GPU's default compute mode could not be put back")
	}
	f.fail[u0] = false
	if err := e.unprepare("m2"); err != nil {
		t.Fatal(err)
	}
	if f.modes[u0] != device.ComputeModeDefault || exists(e.recordPath("m2")) {
		t.Errorf("retried unprepare: modes %v, record left %v", f.modes, exists(e.recordPath("m2")))
	}
}

// TestMPSPrepareFails: an MPS claim whose /dev/shm cannot be mounted, or whose GPU refuses its
// compute mode, is refused with the reason, and leaves no record, spec, directory, daemon or
// compute mode behind; the GPUs can be prepared again.
func TestMPSPrepareFails(t *testing.T) {
	e, m, f := mpsEnv(t)
	u0, u1 := e.inv.Devices[0].UUID, e.inv.Devices[1].UUID
	for name, tc := range map[string]struct {
		shmSize string
		fail    string
		want    string
		calls   string
	}{
		"shm mount": {shmSize: "lots", want: "sharing.mps: mounting a tmpfs at " + m.ShmDir("f1"),
			calls: u0 + "=EXCLUSIVE_PROCESS " + u1 + "=EXCLUSIVE_PROCESS " + u0 + "=DEFAULT " + u1 + "=DEFAULT"},
		"compute mode": {fail: u1, want: "sharing.mps: setting compute mode EXCLUSIVE_PROCESS on GPU " + u1,
			calls: u0 + "=EXCLUSIVE_PROCESS " + u0 + "=DEFAULT"},
	} {
		t.Run(name, func(t *testing.T) {
			m.ShmSize = tc.shmSize
			f.fail[tc.fail] = true
			defer func() { m.ShmSize = ""; f.fail = map[string]bool{} }()
			f.take()
			r := e.prepare(claim("f1", []result{{Device: "gpu-0"}, {Device: "gpu-1"}}, sharingConfig(`{"strategy":"MPS"}`)))
			if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", r.Err, tc.want)
			}
			if got := f.take(); got != tc.calls {
				t.Errorf("compute modes set %q, want %q", got, tc.calls)
			}
			if exists(e.recordPath("f1")) || exists(e.specPath("f1")) || exists(filepath.Join(m.Root, "f1")) {
				t.Error("a refused claim left a record, a spec or its MPS directory")
			}
			if r := e.prepare(claim("free", []result{{Device: "gpu-0"}, {Device: "gpu-1"}})); r.Err != nil {
				t.Errorf("GPUs not free after a refused claim: %v", r.Err)
			}
			if err := e.unprepare("free"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMPSRefused(t *testing.T) {
	e, m, _ := mpsEnv(t)
	twoGPUs := mpsShare("s4", "gpu-0", "10Gi", `{"strategy":"MPS"}`)
	second := mpsShare("x", "gpu-1", "10Gi", `{"strategy":"MPS"}`).Status.Allocation.Devices.Results[0]
	second.Request = "r1"
	twoGPUs.Status.Allocation.Devices.Results = append(twoGPUs.Status.Allocation.Devices.Results, second)
	mixed := claim("s5", []result{{Device: "gpu-0"}, {Device: "gpu-1"}}, sharingConfig(`{"strategy":"MPS"}`))
	id := types.UID("share-s5")
	mixed.Status.Allocation.Devices.Results[0].ShareID = &id
	for name, tc := range map[string]struct {
		r    func() error
		want string
	}{
		"device not in claim": {func() error {
			return e.prepare(claim("m2", []result{{Device: "gpu-0"}}, sharingConfig(`{"strategy":"MPS","mps":{"defaultPerDevicePinnedMemoryLimit":{"gpu-1":"1Gi"}}}`))).Err
		}, "sharing.mps.defaultPerDevicePinnedMemoryLimit[gpu-1]: device gpu-1 is not one of the claim's devices"},
		"limit above the share": {func() error {
			return e.prepare(mpsShare("s2", "gpu-0", "10Gi", `{"strategy":"MPS","mps":{"defaultPinnedDeviceMemoryLimit":"12Gi"}}`)).Err
		}, "sharing.mps.defaultPinnedDeviceMemoryLimit: 12Gi is more than the claim's share of device gpu-0 (10Gi of memory)"},
		"device limit above the share": {func() error {
			return e.prepare(mpsShare("s3", "gpu-0", "10Gi", `{"strategy":"MPS","mps":{"defaultPerDevicePinnedMemoryLimit":{"gpu-0":"11Gi"}}}`)).Err
		}, "sharing.mps.defaultPerDevicePinnedMemoryLimit[gpu-0]: 11Gi is more than the claim's share of device gpu-0 (10Gi of memory)"},
		"shares of two GPUs": {func() error { return e.prepare(twoGPUs).Err },
			"MPS on consumable-memory shares serves one GPU per claim (a container reaches one MPS daemon, and each GPU's daemon serves all of its shares), but the claim has shares of devices gpu-0 and gpu-1"},
		"share and whole device": {func() error { return e.prepare(mixed).Err },
			"MPS on consumable-memory shares needs every device of the claim to be a share, but device gpu-1 is allocated whole"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.r(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	entries, _ := os.ReadDir(m.Root)
	if len(entries) != 0 {
		t.Errorf("refused claims left MPS directories: %v", entries)
	}
}

// mpsShare is a share of device dev, consuming memory, with the MPS config cfg.
func mpsShare(uid, dev, memory, cfg string) *resourceapi.ResourceClaim {
	c := shareClaim(uid, dev, memory)
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, sharingConfig(cfg))
	return c
}

// TestMPSShares: MPS claims on consumable-memory shares of one GPU are served by one daemon, the
// GPU's, started by the first share and stopped by the last, whichever instance of the plugin
// (a rolling update) prepares or unprepares them. The daemon gets no limits of its own; each
// claim's containers get its limits as MPS client variables (its share, or less if its config
// asks for less), and the daemon's directories and /dev/shm.
func TestMPSShares(t *testing.T) {
	e, m, f := mpsEnv(t)
	u0 := e.inv.Devices[0].UUID
	s1 := mpsShare("s1", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	s2 := mpsShare("s2", "gpu-0", "20Gi", `{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":30,"defaultPinnedDeviceMemoryLimit":"12Gi"}}`)
	s3 := mpsShare("s3", "gpu-0", "40Gi", `{"strategy":"MPS","mps":{"defaultPerDevicePinnedMemoryLimit":{"gpu-0":"1.5Gi"}}}`)
	e.exist(s1, s2, s3)
	f.take()
	if r := e.prepare(s1); r.Err != nil {
		t.Fatal(r.Err)
	}
	pid := mpsPID(t, m, u0)
	if !mpsRunning(t, m, u0) {
		t.Fatal("no MPS daemon for the GPU after its first share was prepared")
	}
	if got := f.take(); got != u0+"=EXCLUSIVE_PROCESS" {
		t.Errorf("compute modes set by the first share: %q", got)
	}
	// The new pod of a rolling update prepares the other two, and adopts the GPU's daemon.
	b, _ := e.second(e.inv)
	for _, c := range []*resourceapi.ResourceClaim{s2, s3} {
		if err := prepareOn(e.ctx, b, c); err != nil {
			t.Fatal(err)
		}
	}
	if again, ok := mpsPID(t, m, u0), mpsRunning(t, m, u0); !ok || again != pid {
		t.Fatalf("after three shares: daemon %d (running %v), want the first share's %d", again, ok, pid)
	}
	pipe, logDir := m.Dirs(u0)
	log, err := os.ReadFile(filepath.Join(logDir, "control.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "daemon started"); n != 1 || strings.Contains(string(log), "command set_") || !strings.Contains(string(log), "CUDA_VISIBLE_DEVICES="+u0+"\n") {
		t.Errorf("the GPU's daemon was started %d times, or given commands, or not on the GPU alone:\n%s", n, log)
	}
	for c, want := range map[string][]string{
		"s1": {EnvMPSPinnedMemoryLimit + "=0=20480M"},
		"s2": {EnvMPSPinnedMemoryLimit + "=0=12288M", EnvMPSActiveThreadPercentage + "=30"},
		"s3": {EnvMPSPinnedMemoryLimit + "=0=1536M"},
	} {
		spec, err := os.ReadFile(e.specPath(types.UID(c)))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, "CUDA_MPS_PIPE_DIRECTORY="+sharing.PipeDir, `"hostPath":"`+pipe+`","containerPath":"`+sharing.PipeDir+`"`, `"hostPath":"`+m.ShmDir(u0)+`","containerPath":"/dev/shm"`)
		for _, w := range want {
			if !strings.Contains(string(spec), w) {
				t.Errorf("spec of %s lacks %s:\n%s", c, w, spec)
			}
		}
		if c == "s1" && strings.Contains(string(spec), EnvMPSActiveThreadPercentage) {
			t.Errorf("spec of %s has a thread limit it did not ask for:\n%s", c, spec)
		}
	}

	// The first two shares go, one through each instance; the daemon stays for the third, and
	// so do the GPU's compute mode and /dev/shm.
	f.take()
	if err := e.unprepare("s1"); err != nil {
		t.Fatal(err)
	}
	if err := unprepareOn(e.ctx, b, "s2"); err != nil {
		t.Fatal(err)
	}
	if again, ok := mpsPID(t, m, u0), mpsRunning(t, m, u0); !ok || again != pid {
		t.Fatalf("after two of three shares went: daemon %d (running %v), want %d", again, ok, pid)
	}
	if mounted, _ := sharing.IsMountPoint(m.ShmDir(u0)); !mounted {
		t.Errorf("after two of three shares went: /dev/shm not mounted")
	}
	if got := f.take(); got != "" {
		t.Errorf("compute modes set when two of three shares went: %q, want none", got)
	}
	// A restart keeps it.
	e.start()
	if again, ok := mpsPID(t, m, u0), mpsRunning(t, m, u0); !ok || again != pid {
		t.Fatalf("after a restart: daemon %d (running %v), want %d adopted", again, ok, pid)
	}
	f.take()
	// The last share stops it, through the instance that did not start it.
	if err := unprepareOn(e.ctx, b, "s3"); err != nil {
		t.Fatal(err)
	}
	if mpsRunning(t, m, u0) || exists(filepath.Join(m.Root, u0)) {
		t.Errorf("the GPU's daemon or directory is left after its last share went")
	}
	if got := f.take(); got != u0+"=DEFAULT" {
		t.Errorf("compute modes set when the last share went: %q", got)
	}
}

// TestMPSSweep: a daemon directory that no record counts on (left from before a reboot, whose
// records need nothing released, or whose record was moved aside) is stopped and removed at
// start-up; those of prepared claims are kept.
func TestMPSSweep(t *testing.T) {
	e, m, _ := mpsEnv(t)
	c := mpsShare("s1", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	e.exist(c)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	u0, u1 := e.inv.Devices[0].UUID, e.inv.Devices[1].UUID
	// A daemon of the other GPU and one of a claim, with no record.
	for _, key := range []string{u1, "gone-claim"} {
		if _, err := m.Ensure(e.ctx, key, []string{u1}, sharing.MPSLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	rep := e.start()
	if got, want := strings.Join(rep.MPSStopped, " "), u1+" gone-claim"; got != want {
		t.Errorf("daemons stopped at start-up: %q, want %q", got, want)
	}
	for _, key := range []string{u1, "gone-claim"} {
		if mpsRunning(t, m, key) || exists(filepath.Join(m.Root, key)) {
			t.Errorf("daemon %s that no record counts on is left", key)
		}
	}
	if !mpsRunning(t, m, u0) {
		t.Error("the daemon of a prepared share was stopped at start-up")
	}
}

// podKubelet stands in for the node's kubelet for MPS daemon pods on the fake API server: it
// marks every daemon pod ready once it exists, as the kubelet does when the pod's startup probe
// (the runner's) succeeds. It runs until t ends.
func podKubelet(t *testing.T, kube *fake.Clientset) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods, _ := kube.CoreV1().Pods(mpsNamespace).List(ctx, metav1.ListOptions{})
			for i := range pods.Items {
				pod := &pods.Items[i]
				if len(pod.Status.Conditions) > 0 {
					continue
				}
				pod.Status.Phase = corev1.PodRunning
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
				_, _ = kube.CoreV1().Pods(mpsNamespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
}

const mpsNamespace = "accel-dra"

// daemonPods are the MPS daemon pods on the fake API server, by key.
func daemonPods(t *testing.T, kube *fake.Clientset) []string {
	t.Helper()
	pods, err := kube.CoreV1().Pods(mpsNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, p := range pods.Items {
		keys = append(keys, p.Annotations[mpspod.KeyAnnotation]+"@"+p.Spec.NodeName)
	}
	sort.Strings(keys)
	return keys
}

// TestMPSSharesInPods: with a pod per daemon, the GPU's daemon is one pod, created by the first
// share and deleted by the last, whichever instance of the plugin prepares or unprepares them;
// a restart and the other instance adopt it by its name without creating another; the sweep at
// start-up deletes this node's daemon pods that no record counts on, and leaves other nodes'.
func TestMPSSharesInPods(t *testing.T) {
	standin.NeedMount(t)
	f := &fakeModes{modes: map[string]device.ComputeMode{}, fail: map[string]bool{}}
	_, ctx := ktesting.NewTestContext(t)
	// The node, the daemon pods' owner.
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "uid-" + nodeName}})
	creates := 0
	kube.PrependReactor("create", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		creates++
		return false, nil, nil
	})
	podKubelet(t, kube)
	m := &sharing.MPS{Root: filepath.Join(t.TempDir(), "mps"), Daemons: mpspod.Pods{Client: kube, Namespace: mpsNamespace, NodeName: nodeName,
		DriverName: driverName, Image: "plugin:v1", HostDriverRoot: "/", ReadyTimeout: 5 * time.Second, StopTimeout: 5 * time.Second}}
	e := &env{t: t, ctx: ctx, dir: t.TempDir(), inv: inventory(2), kube: kube, boot: bootA,
		tweak: func(o *Options) { o.MPS = m; o.ConsumableMemory = true; o.ComputeMode = f }}
	e.start()
	t.Cleanup(func() {
		keys, _ := m.Keys(context.Background())
		for _, k := range keys {
			_ = m.Stop(context.Background(), k)
		}
	})
	u0, u1 := e.inv.Devices[0].UUID, e.inv.Devices[1].UUID
	s1, s2 := mpsShare("s1", "gpu-0", "20Gi", `{"strategy":"MPS"}`), mpsShare("s2", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	e.exist(s1, s2)
	if r := e.prepare(s1); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := daemonPods(t, kube); !stdslices.Equal(got, []string{u0 + "@" + nodeName}) || creates != 1 {
		t.Fatalf("daemon pods after the first share: %v (%d created)", got, creates)
	}
	if mounted, _ := sharing.IsMountPoint(m.ShmDir(u0)); !mounted {
		t.Error("the GPU's /dev/shm tmpfs is not mounted before its pod runs")
	}
	// The new pod of a rolling update prepares the second share and adopts the pod.
	b, _ := e.second(e.inv)
	if err := prepareOn(e.ctx, b, s2); err != nil {
		t.Fatal(err)
	}
	e.start()
	if creates != 1 {
		t.Errorf("%d daemon pods created; the second share and the restart did not adopt the first", creates)
	}
	// A daemon pod no record counts on (its claim went while the plugin was down), and another
	// node's.
	orphan := mpspod.Pods{Client: kube, Namespace: mpsNamespace, NodeName: nodeName, DriverName: driverName}.Pod(sharing.DaemonSpec{Key: u1, Dir: filepath.Join(m.Root, u1)})
	elsewhere := mpspod.Pods{Client: kube, Namespace: mpsNamespace, NodeName: "node-b", DriverName: driverName}.Pod(sharing.DaemonSpec{Key: "gone-claim", Dir: "/x"})
	for _, p := range []*corev1.Pod{orphan, elsewhere} {
		if _, err := kube.CoreV1().Pods(mpsNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if rep := e.start(); !stdslices.Equal(rep.MPSStopped, []string{u1}) {
		t.Errorf("daemons stopped at start-up: %v, want %s", rep.MPSStopped, u1)
	}
	if got := daemonPods(t, kube); !stdslices.Equal(got, []string{u0 + "@" + nodeName, "gone-claim@node-b"}) {
		t.Errorf("daemon pods after the start-up sweep: %v", got)
	}
	// The first share goes through the new instance; the pod stays for the second.
	if err := unprepareOn(e.ctx, b, "s1"); err != nil {
		t.Fatal(err)
	}
	if got := daemonPods(t, kube); len(got) != 2 {
		t.Errorf("daemon pods after one of two shares went: %v", got)
	}
	if err := e.unprepare("s2"); err != nil {
		t.Fatal(err)
	}
	if got := daemonPods(t, kube); !stdslices.Equal(got, []string{"gone-claim@node-b"}) || exists(filepath.Join(m.Root, u0)) {
		t.Errorf("after the last share went: daemon pods %v, directory left %v", got, exists(filepath.Join(m.Root, u0)))
	}
	if f.modes[u0] != device.ComputeModeDefault {
		t.Errorf("compute mode of %s after its last MPS share: %s", u0, f.modes[u0])
	}
}

// slowDaemons delays the readiness of the daemons it starts until release is closed, as a
// daemon pod that waits for its image or its node's CNI does (mpspod waits up to
// mpspod.DefaultReadyTimeout for it); starting is sent to once a start began.
type slowDaemons struct {
	sharing.Daemons
	starting chan string
	release  chan struct{}
}

// slowStart makes m's daemons slowDaemons.
func slowStart(m *sharing.MPS) slowDaemons {
	slow := slowDaemons{Daemons: m.Daemons, starting: make(chan string, 1), release: make(chan struct{})}
	m.Daemons = slow
	return slow
}

func (d slowDaemons) Start(ctx context.Context, s sharing.DaemonSpec) error {
	d.starting <- s.Key
	select {
	case <-d.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return d.Daemons.Start(ctx, s)
}

// TestMPSStartOutsideLock: an MPS claim's daemon is started and awaited without the node lock,
// so that another claim (here a whole GPU, no sharing) is prepared while the daemon starts, in
// far less time than the daemon's wait; the MPS claim completes once its daemon is ready.
func TestMPSStartOutsideLock(t *testing.T) {
	e, m, _ := mpsEnv(t)
	slow := slowStart(m)
	mc := claim("m1", []result{{Device: "gpu-0"}}, sharingConfig(`{"strategy":"MPS"}`))
	plain := claim("p1", []result{{Device: "gpu-1"}})
	e.exist(mc, plain)
	done := make(chan kubeletplugin.PrepareResult, 1)
	go func() {
		res, err := e.drv.PrepareResourceClaims(e.ctx, []*resourceapi.ResourceClaim{mc})
		if err != nil {
			t.Errorf("PrepareResourceClaims: %v", err)
		}
		done <- res[mc.UID]
	}()
	select {
	case <-slow.starting:
	case <-time.After(30 * time.Second):
		t.Fatal("the MPS claim's daemon was never started")
	}
	// The bound is the kubelet's patience with one call, well under the daemon's wait; it is
	// no timing assertion: the daemon is held until this prepare has answered.
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	res, err := e.drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{plain})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if r := res[plain.UID]; r.Err != nil {
		t.Errorf("a plain claim prepared while an MPS daemon starts: %v", r.Err)
	}
	close(slow.release)
	if r := <-done; r.Err != nil {
		t.Fatalf("MPS claim: %v", r.Err)
	}
	if !mpsRunning(t, m, "m1") || !exists(e.specPath("m1")) {
		t.Error("MPS claim prepared without its daemon running or its spec")
	}
}

// TestMPSUnpreparedWhileStarting: the other instance of a rolling update unprepares an MPS
// claim while its daemon starts without the lock (the kubelet gave up on the prepare); the
// prepare's second hold finds its record gone and refuses to publish, stops the daemon it
// started and puts back the compute mode, so that nothing is left for a claim the kubelet
// forgot, and the GPU is free.
func TestMPSUnpreparedWhileStarting(t *testing.T) {
	e, m, f := mpsEnv(t)
	slow := slowStart(m)
	b, _ := e.second(e.inv)
	u0 := e.inv.Devices[0].UUID
	mc := claim("m1", []result{{Device: "gpu-0"}}, sharingConfig(`{"strategy":"MPS"}`))
	e.exist(mc)
	done := make(chan error, 1)
	go func() { done <- prepareOn(e.ctx, e.drv, mc) }()
	<-slow.starting
	if err := unprepareOn(e.ctx, b, mc.UID); err != nil {
		t.Fatalf("unprepare on the other instance while the daemon starts: %v", err)
	}
	close(slow.release)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "unprepared") {
		t.Fatalf("prepare whose claim was unprepared while its daemon started: %v, want refused", err)
	}
	if mpsRunning(t, m, "m1") || exists(filepath.Join(m.Root, "m1")) {
		t.Error("MPS daemon or its directory left by a prepare whose claim was unprepared")
	}
	if exists(e.recordPath("m1")) || exists(e.specPath("m1")) {
		t.Error("record or spec left by a prepare whose claim was unprepared")
	}
	if f.modes[u0] != device.ComputeModeDefault {
		t.Errorf("compute mode after the prepare was undone: %v, want DEFAULT", f.modes)
	}
	// The GPU is free: another claim gets it.
	m.Daemons = slow.Daemons
	if r := e.prepare(claim("m2", []result{{Device: "gpu-0"}}, sharingConfig(`{"strategy":"MPS"}`))); r.Err != nil {
		t.Fatalf("GPU not free after the undone prepare: %v", r.Err)
	}
}

// TestMPSShareWaitsForStartingDaemon: while the first MPS share of a GPU starts the GPU's daemon
// without the lock, a second share of that GPU waits for it (the GPU has one daemon and one
// starter) instead of failing into the kubelet's back-off, and is prepared in the same call once
// the daemon is ready, by that daemon; a share whose call ends while it waits is refused with the
// reason and leaves no record.
func TestMPSShareWaitsForStartingDaemon(t *testing.T) {
	e, m, _ := mpsEnv(t)
	slow := slowStart(m)
	u0 := e.inv.Devices[0].UUID
	s1 := mpsShare("s1", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	s2 := mpsShare("s2", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	s3 := mpsShare("s3", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	e.exist(s1, s2, s3)
	waiting := awaitingDaemon(e.drv)
	done1 := make(chan error, 1)
	go func() { done1 <- prepareOn(e.ctx, e.drv, s1) }()
	<-slow.starting

	// The kubelet gives up on s3's call while it waits.
	ctx3, cancel3 := context.WithCancel(e.ctx)
	done3 := make(chan error, 1)
	go func() { done3 <- prepareOn(ctx3, e.drv, s3) }()
	select {
	case <-waiting:
	case err := <-done3:
		t.Fatalf("share of a GPU whose daemon another share is starting answered without waiting for it: %v", err)
	}
	cancel3()
	if err := <-done3; err == nil || !strings.Contains(err.Error(), "whose preparation is starting the GPU's MPS control daemon; gave up waiting for it") || !errors.Is(err, context.Canceled) {
		t.Fatalf("share whose call ended while the GPU's daemon started: %v, want refused with the reason", err)
	}
	if exists(e.recordPath("s3")) {
		t.Error("the refused share left a record")
	}
	select {
	case <-waiting: // s3 looked again before it saw the cancellation
	default:
	}

	done2 := make(chan error, 1)
	go func() { done2 <- prepareOn(e.ctx, e.drv, s2) }()
	select {
	case <-waiting:
	case err := <-done2:
		t.Fatalf("second share answered while the GPU's daemon was still starting: %v", err)
	}
	close(slow.release)
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	if err := <-done2; err != nil {
		t.Fatalf("second share, once the daemon it waited for was ready: %v", err)
	}
	if !exists(e.recordPath("s2")) || !exists(e.specPath("s2")) {
		t.Error("second share prepared without its record or spec")
	}
	if n := len(slow.starting); n != 0 {
		t.Errorf("%d more daemon starts for the GPU's second share, want the first share's daemon", n)
	}
	if !mpsRunning(t, m, u0) {
		t.Error("no GPU daemon after both shares")
	}
}

// TestMPSShareWaitsForOtherInstance: during a rolling update the first share's daemon is started
// by one instance and the second share goes to the other, which hears nothing of the first's
// progress: it looks again until the first share is prepared, then shares its daemon.
func TestMPSShareWaitsForOtherInstance(t *testing.T) {
	e, m, _ := mpsEnv(t)
	slow := slowStart(m)
	b, _ := e.second(e.inv)
	u0 := e.inv.Devices[0].UUID
	s1 := mpsShare("s1", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	s2 := mpsShare("s2", "gpu-0", "20Gi", `{"strategy":"MPS"}`)
	e.exist(s1, s2)
	waiting := awaitingDaemon(b)
	done1 := make(chan error, 1)
	go func() { done1 <- prepareOn(e.ctx, e.drv, s1) }()
	<-slow.starting
	done2 := make(chan error, 1)
	go func() { done2 <- prepareOn(e.ctx, b, s2) }()
	select {
	case <-waiting:
	case err := <-done2:
		t.Fatalf("share on the other instance answered while the GPU's daemon was still starting: %v", err)
	}
	close(slow.release)
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	if err := <-done2; err != nil {
		t.Fatalf("share on the other instance, once the daemon was ready: %v", err)
	}
	if n := len(slow.starting); n != 0 || !mpsRunning(t, m, u0) {
		t.Errorf("%d more daemon starts (want 0), GPU daemon running %v (want true)", n, mpsRunning(t, m, u0))
	}
}

// awaitingDaemon signals each time a prepare of d starts waiting for a GPU's MPS daemon that
// another claim's preparation starts (at most one signal pending).
func awaitingDaemon(d *Driver) chan struct{} {
	waiting := make(chan struct{}, 1)
	d.prep.hook = func(_ context.Context, point string) {
		if point == "prepare:awaiting-daemon" {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
	}
	return waiting
}

// TestMPSCrashWhileStarting: the plugin goes (its instance ends) while an MPS claim's daemon
// starts without the lock; the next instance's start-up finds the claim half-prepared by a dead
// instance and rolls it back, compute mode and daemon directory included, and the claim is
// prepared again from scratch.
func TestMPSCrashWhileStarting(t *testing.T) {
	e, m, f := mpsEnv(t)
	slow := slowStart(m)
	u0 := e.inv.Devices[0].UUID
	mc := claim("m1", []result{{Device: "gpu-0"}}, sharingConfig(`{"strategy":"MPS"}`))
	e.exist(mc)
	old := e.drv
	done := make(chan error, 1)
	go func() { done <- prepareOn(e.ctx, old, mc) }()
	<-slow.starting
	if f.modes[u0] != device.ComputeModeExclusiveProcess || !exists(e.recordPath("m1")) {
		t.Fatalf("while the daemon starts: modes %v, record %v", f.modes, exists(e.recordPath("m1")))
	}
	m.Daemons = slow.Daemons
	rep := e.start()
	if !stdslices.Equal(rep.RolledBack, []string{"m1"}) || exists(e.recordPath("m1")) || exists(filepath.Join(m.Root, "m1")) {
		t.Errorf("start-up after a crash while a daemon started: %+v, record left %v", rep, exists(e.recordPath("m1")))
	}
	f.mu.Lock()
	mode := f.modes[u0]
	f.mu.Unlock()
	if mode != device.ComputeModeDefault {
		t.Errorf("compute mode after the rollback: %v, want DEFAULT", mode)
	}
	close(slow.release)
	<-done
	if r := e.prepare(mc); r.Err != nil {
		t.Fatalf("prepare after the rollback: %v", r.Err)
	}
	if !mpsRunning(t, m, "m1") {
		t.Error("no daemon after the claim was prepared again")
	}
}
