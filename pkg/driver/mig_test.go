package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/metrics"
	"github.com/accel-dra/accel-dra/pkg/mig"
)

// migEnv is an env whose node is the mig-mixed mock in dynamic-MIG mode, with the mock's MIG
// state in the env's directory so that it outlives a simulated plugin restart.
type migEnv struct {
	*env
	server *nvmlmock.Server
	// static runs the plugin without dynamic MIG.
	static bool
	// lost are the indices of GPUs that have fallen off the bus at the next restart: every NVML
	// query that needs the GPU answers GPU_IS_LOST, as on a real node.
	lost []int
	// wrap, if set, stands between the driver and the mock's partitioner.
	wrap func(device.Partitioner) device.Partitioner
	// profile is the mock profile; empty: mig-mixed.
	profile string
	// deviceFileGID is the driver's NVreg_DeviceFileGID at the next restart.
	deviceFileGID uint32
}

func newMIGEnv(t *testing.T) *migEnv { return startMIGEnv(t, "", false) }

// startMIGEnv starts a plugin over a mock of profile (empty: mig-mixed), static or dynamic MIG.
func startMIGEnv(t *testing.T, profile string, static bool) *migEnv {
	e := &migEnv{env: &env{t: t, dir: t.TempDir(), boot: bootA}, static: static, profile: profile}
	e.env.ctx = t.Context()
	e.restart()
	return e
}

// restartErr is restart for a test of start-up failures: a failed Reconcile fails the test
// and returns nil.
func (e *migEnv) restartErr() *ReconcileReport {
	e.t.Helper()
	rep, err := e.start2()
	if err != nil {
		e.t.Errorf("plugin start-up failed (it would exit and crash-loop): %v", err)
		return nil
	}
	return rep
}

// restart starts a new plugin process over the same checkpoint, CDI and mock directories.
func (e *migEnv) restart() *ReconcileReport {
	e.t.Helper()
	rep, err := e.start2()
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

func (e *migEnv) start2() (*ReconcileReport, error) {
	e.t.Helper()
	profile := e.profile
	if profile == "" {
		profile = "mig-mixed"
	}
	s, err := nvmlmock.NewServer(profile, nodeName)
	if err != nil {
		e.t.Fatal(err)
	}
	s.UseStateDir(filepath.Join(e.dir, "mock"))
	s.SetDeviceFileGID(e.deviceFileGID)
	for _, i := range e.lost {
		lose(s.Devices[i])
	}
	e.server = s
	be := s.Backend()
	inv, err := be.Enumerate(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.inv = inv
	var part *nvmlbackend.Backend
	if !e.static {
		if e.inv, err = mig.Dynamic(inv); err != nil {
			e.t.Fatal(err)
		}
		part = be
	}
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.drv != nil {
		e.drv.Close()
	}
	e.driver = driverName
	e.events = &eventLog{}
	e.metrics = metrics.NewPlugin(driverName)
	e.drv, err = New(e.ctx, Options{
		DriverName: driverName, NodeName: nodeName, Inventory: e.inv,
		CDI: cdi.New(e.cdiDir(), e.inv.Kind), State: store, Metrics: e.metrics, Events: e.events, MIG: e.partitioner(part),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.drv.Reconcile(e.ctx)
}

// partitioner keeps a nil backend a nil interface.
func partitioner(b *nvmlbackend.Backend) device.Partitioner {
	if b == nil {
		return nil
	}
	return b
}

func (e *migEnv) partitioner(b *nvmlbackend.Backend) device.Partitioner {
	p := partitioner(b)
	if p != nil && e.wrap != nil {
		return e.wrap(p)
	}
	return p
}

// lose makes d a GPU that has fallen off the bus: its handle and minor number still answer,
// every query that needs the GPU fails with GPU_IS_LOST.
func lose(d *mock.Device) {
	lost := nvml.ERROR_GPU_IS_LOST
	d.GetUUIDFunc = func() (string, nvml.Return) { return "", lost }
	d.GetNameFunc = func() (string, nvml.Return) { return "", lost }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, lost }
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, lost }
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return 0, lost }
	d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return 0, 0, lost }
}

// inUse is a partitioner whose GPU instances on one GPU cannot be destroyed: a process still
// runs on them (NVML_ERROR_IN_USE).
type inUse struct {
	device.Partitioner
	gpu string
}

func (p inUse) DestroyMIG(ctx context.Context, parent string, gi int) error {
	if parent == p.gpu {
		return fmt.Errorf("gpu %s: destroying GPU instance %d: %w", parent, gi, nvml.ERROR_IN_USE)
	}
	return p.Partitioner.DestroyMIG(ctx, parent, gi)
}

// TestDynamicMIGLostGPU: a GPU that falls off the bus takes only its own claims down. Start-up
// works (the sweep skips the GPU it cannot list), a claim on a healthy GPU keeps its spec, the
// kubelet can unprepare the claim on the lost GPU (its pod must be able to terminate), and the
// healthy GPUs go on being partitioned.
func TestDynamicMIGLostGPU(t *testing.T) {
	e := newMIGEnv(t)
	a := claim("a", []result{{Device: "gpu-1-mig-1g5gb-0"}})
	b := claim("b", []result{{Device: "gpu-2-mig-1g10gb-0"}})
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		if r := e.prepare(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	e.lost = []int{2}
	rep := e.restartErr()
	if rep == nil {
		return
	}
	if !slices.Contains(rep.Restored, "a") || !exists(e.specPath("a")) {
		t.Errorf("claim on a healthy GPU not kept with its spec: %+v", rep)
	}
	if err := e.unprepare("b"); err != nil {
		t.Errorf("unprepare of the claim on the lost GPU: %v", err)
	}
	if exists(e.recordPath("b")) || exists(e.specPath("b")) {
		t.Error("unprepare on the lost GPU left its record or spec")
	}
	if r := e.prepare(claim("c", []result{{Device: "gpu-1-mig-1g5gb-2"}})); r.Err != nil {
		t.Errorf("prepare on a healthy GPU next to a lost one: %v", r.Err)
	}
	for _, uid := range []types.UID{"a", "c"} {
		if err := e.unprepare(uid); err != nil {
			t.Error(err)
		}
	}
	// The lost GPU's instance is left for its reset; the healthy GPUs' are gone.
	if got := e.instances(); len(got) != 1 || !strings.HasPrefix(got[0], "gpu2/") {
		t.Errorf("instances %v, want only the lost GPU's", got)
	}
	// The GPU comes back (a reset keeps nothing on real hardware; the mock keeps the
	// instance): the next start destroys the instance no claim holds.
	e.lost = nil
	e.restartErr()
	if got := e.instances(); len(got) != 0 {
		t.Errorf("instances %v after the GPU came back, want none", got)
	}
}

// TestDynamicMIGInUseInstance: an instance no claim holds that cannot be destroyed (a process
// of the operator's still runs on it) is skipped, not fatal: the plugin starts and destroys the
// others.
func TestDynamicMIGInUseInstance(t *testing.T) {
	// The first start is without dynamic MIG, so the operator's instances on gpu-0 stay.
	e := &migEnv{env: &env{t: t, ctx: t.Context(), dir: t.TempDir(), boot: bootA}, static: true}
	e.restart()
	before := e.instances()
	if len(before) == 0 {
		t.Fatal("the mock's profile has no instances on gpu-0")
	}
	e.static = false
	gpu0 := ""
	for _, p := range e.inv.MIGParents {
		if p.GPU.Name == "gpu-0" {
			gpu0 = p.GPU.UUID
		}
	}
	e.wrap = func(p device.Partitioner) device.Partitioner { return inUse{Partitioner: p, gpu: gpu0} }
	rep := e.restartErr()
	if rep == nil {
		return
	}
	if len(rep.MIGDestroyed) != 0 {
		t.Errorf("destroyed %v on a GPU whose instances are in use", rep.MIGDestroyed)
	}
	if got := e.instances(); !cmp.Equal(got, before) {
		t.Errorf("instances %v, want the in-use ones %v", got, before)
	}
	if r := e.prepare(claim("a", []result{{Device: "gpu-1-mig-1g5gb-0"}})); r.Err != nil {
		t.Errorf("prepare on another GPU: %v", r.Err)
	}
}

func (e *migEnv) instances() []string {
	e.t.Helper()
	got, err := e.server.Instances()
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *migEnv) record(uid types.UID) checkpoint.Claim {
	e.t.Helper()
	data, err := os.ReadFile(e.recordPath(uid))
	if err != nil {
		e.t.Fatal(err)
	}
	var rec struct{ Claim checkpoint.Claim }
	if err := json.Unmarshal(data, &rec); err != nil {
		e.t.Fatal(err)
	}
	return rec.Claim
}

// gpu-1 is an A100 in MIG mode without MIG devices; gpu-0's operator-made MIG devices are
// destroyed when the plugin starts in dynamic mode, since no claim holds them.
func TestDynamicMIGPrepareUnprepare(t *testing.T) {
	e := newMIGEnv(t)
	if got := e.instances(); len(got) != 0 {
		t.Fatalf("after start, instances %v remain; dynamic MIG destroys those no claim holds", got)
	}

	a := claim("a", []result{{Device: "gpu-1-mig-1g5gb-0"}})
	if r := e.prepare(a); r.Err != nil {
		t.Fatal(r.Err)
	}
	rec := e.record("a")
	pd := rec.Devices[0]
	if pd.MIG == nil || pd.MIG.GI == nil || pd.MIG.CI == nil || !strings.HasPrefix(pd.UUID, "MIG-") || rec.State != checkpoint.StatePrepareCompleted {
		t.Fatalf("record %+v", rec)
	}
	if len(pd.Nodes) != 3 || pd.Nodes[0].Path != "/dev/nvidia1" || !strings.HasPrefix(pd.Nodes[1].Path, "/dev/nvidia-caps/nvidia-cap") {
		t.Errorf("nodes %+v, want /dev/nvidia1 and the GI and CI caps nodes", pd.Nodes)
	}
	spec, err := os.ReadFile(e.specPath("a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range pd.Nodes {
		if !strings.Contains(string(spec), n.Path) {
			t.Errorf("CDI spec lacks %s", n.Path)
		}
	}
	if got := e.instances(); len(got) != 1 || !strings.HasPrefix(got[0], "gpu1/") {
		t.Fatalf("instances %v, want one on gpu1", got)
	}

	b := claim("b", []result{{Device: "gpu-1-mig-3g20gb-4"}})
	if r := e.prepare(b); r.Err != nil {
		t.Fatal(r.Err)
	}
	// The scheduler's counters keep these from being allocated; the driver refuses them too,
	// and creates nothing for them.
	for _, bad := range []struct{ uid, dev string }{{"c", "gpu-1"}, {"d", "gpu-1-mig-2g10gb-0"}, {"e", "gpu-1-mig-7g40gb-0"}} {
		if r := e.prepare(claim(bad.uid, []result{{Device: bad.dev}})); r.Err == nil {
			t.Errorf("%s was prepared next to 1g.5gb@0 and 3g.20gb@4", bad.dev)
		}
		if exists(e.recordPath(types.UID(bad.uid))) {
			t.Errorf("refused claim %s left a record", bad.uid)
		}
	}
	if got := e.instances(); len(got) != 2 {
		t.Fatalf("instances %v, want the two prepared ones", got)
	}

	// Restart: both claims are kept with their instances and specs.
	rep := e.restart()
	if len(rep.Restored) != 2 || len(rep.MIGDestroyed) != 0 || len(rep.Refused) != 0 {
		t.Fatalf("restart report %+v", rep)
	}
	if r := e.prepare(a); r.Err != nil {
		t.Fatalf("prepare again after restart: %v", r.Err)
	}

	if err := e.unprepare("a"); err != nil {
		t.Fatal(err)
	}
	if err := e.unprepare("b"); err != nil {
		t.Fatal(err)
	}
	if got := e.instances(); len(got) != 0 {
		t.Fatalf("after unprepare, instances %v remain", got)
	}
	if r := e.prepare(claim("c", []result{{Device: "gpu-1"}})); r.Err != nil {
		t.Fatalf("full GPU after its partitions are gone: %v", r.Err)
	}
	if r := e.prepare(claim("f", []result{{Device: "gpu-1-mig-1g5gb-6"}})); r.Err == nil {
		t.Error("a partition was prepared on a GPU whose whole is prepared")
	}
	// Another GPU is independent.
	if r := e.prepare(claim("g", []result{{Device: "gpu-2-mig-1g10gb-me-3"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
}

// TestDynamicMIGCrash kills the plugin (a panic that skips every rollback, then a restart over
// the same checkpoint and the same MIG state) at each step of a MIG preparation. The restart
// must leave no MIG instance that no claim holds, must not touch the instance of a claim
// prepared before the crash, and the claim must prepare when the kubelet asks again.
func TestDynamicMIGCrash(t *testing.T) {
	for _, step := range []string{"intent", "gi-created", "ci-created"} {
		t.Run(step, func(t *testing.T) {
			e := newMIGEnv(t)
			held := claim("held", []result{{Device: "gpu-1-mig-3g20gb-4"}})
			if r := e.prepare(held); r.Err != nil {
				t.Fatal(r.Err)
			}
			before := e.instances()

			c := claim("c", []result{{Device: "gpu-1-mig-2g10gb-0"}})
			crashed := func() (crashed bool) {
				defer func() { crashed = recover() != nil }()
				migCrash = func(s string) {
					if s == step {
						panic("kill -9 at " + s)
					}
				}
				defer func() { migCrash = func(string) {} }()
				e.prepare(c)
				return false
			}()
			if !crashed {
				t.Fatalf("no crash at %s", step)
			}
			rep := e.restart()
			if got := e.instances(); !cmp.Equal(got, before) {
				t.Errorf("after restart instances %v, want only the held claim's %v (report %+v)", got, before, rep)
			}
			if !slices.Contains(rep.RolledBack, "c") {
				t.Errorf("half-prepared claim not rolled back: %+v", rep)
			}
			if !slices.Contains(rep.Restored, "held") {
				t.Errorf("prepared claim not kept: %+v", rep)
			}
			if r := e.prepare(c); r.Err != nil {
				t.Fatalf("prepare after the crash: %v", r.Err)
			}
			if got := e.instances(); len(got) != 2 {
				t.Errorf("instances %v, want the two claims'", got)
			}
			if err := e.unprepare("c"); err != nil {
				t.Fatal(err)
			}
			if got := e.instances(); !cmp.Equal(got, before) {
				t.Errorf("after unprepare instances %v, want %v", got, before)
			}
		})
	}
}

// A half-prepared claim whose owner died is taken over by the kubelet's retry without a restart
// in between (the other instance of a rolling update): its recorded instance is destroyed first,
// so that the retry can create it again.
func TestDynamicMIGRetryAfterAbandon(t *testing.T) {
	e := newMIGEnv(t)
	c := claim("c", []result{{Device: "gpu-2-mig-1g10gb-0"}})
	func() {
		defer func() { _ = recover() }()
		migCrash = func(s string) {
			if s == "ci-created" {
				panic("kill")
			}
		}
		defer func() { migCrash = func(string) {} }()
		e.prepare(c)
	}()
	// The dead instance's registration goes with it; a second instance (same checkpoint, same
	// MIG state) prepares the claim without a Reconcile.
	e.drv.Close()
	// The record holds the placement (the intent) while the instance was made without it.
	if old := e.record("c"); old.State != checkpoint.StatePrepareStarted || old.Devices[0].MIG.GI != nil {
		t.Fatalf("record %+v", old)
	}
	abandoned, err := e.server.Backend().ListMIG(e.ctx)
	if err != nil || len(abandoned) != 1 || abandoned[0].UUID == "" {
		t.Fatalf("MIG instances after the crash: %+v, %v", abandoned, err)
	}
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := New(e.ctx, Options{DriverName: driverName, NodeName: nodeName, Inventory: e.inv,
		CDI: cdi.New(e.cdiDir(), e.inv.Kind), State: store, Metrics: metrics.NewPlugin(driverName), MIG: e.server.Backend()})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	e.drv = d2
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := e.instances(); len(got) != 1 {
		t.Fatalf("instances %v, want one", got)
	}
	if now := e.record("c"); now.Devices[0].UUID == abandoned[0].UUID {
		t.Errorf("the retry kept the abandoned MIG device %s instead of making its own", now.Devices[0].UUID)
	}
}

// Static MIG devices are prepared as they are; turning dynamic MIG on with one of them prepared
// destroys the operator's other MIG instances but never the one a claim holds, and refuses the
// claim's device (it is no longer published as it was) rather than losing it.
func TestStaticMIGThenDynamic(t *testing.T) {
	e := startMIGEnv(t, "", true)
	if r := e.prepare(claim("s", []result{{Device: "gpu-0-mig-3g20gb-4"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	rec := e.record("s")
	if pd := rec.Devices[0]; pd.MIG != nil || !strings.HasPrefix(pd.UUID, "MIG-") || len(pd.Nodes) != 3 {
		t.Fatalf("static MIG record %+v", pd)
	}
	if r := e.prepare(claim("w", []result{{Device: "gpu-1"}})); r.Err == nil {
		t.Error("a GPU in MIG mode was prepared as a whole GPU in static mode")
	}
	if got := e.instances(); len(got) != 4 {
		t.Fatalf("static mode changed MIG instances: %v", got)
	}
	e.static = false
	rep := e.restart()
	got := e.instances()
	if len(got) != 1 || !strings.HasPrefix(got[0], "gpu0/") || !strings.Contains(got[0], "@4") {
		t.Errorf("after switching to dynamic, instances %v, want only the claim's 3g.20gb@4 (report %+v)", got, rep)
	}
	if len(rep.MIGDestroyed) != 3 {
		t.Errorf("destroyed %v, want the three no claim holds", rep.MIGDestroyed)
	}
}

// BenchmarkPrepareDynamicMIG is the plugin's share of preparing a dynamic-MIG claim on the
// mock: recording the intent, creating the GPU and compute instances (each recorded), the CDI
// spec and PrepareCompleted; then the unprepare that destroys them. The mock keeps its MIG state
// in a file, as the plugin's mock backend does on a node. prepare-p50-ms is the median prepare.
func BenchmarkPrepareDynamicMIG(b *testing.B) {
	e := &migEnv{env: &env{t: b, dir: b.TempDir(), boot: bootA}}
	e.env.ctx = klog.NewContext(context.Background(), logr.Discard())
	e.restart()
	b.Cleanup(e.drv.Close)
	c := claim("probe", []result{{Device: "gpu-1-mig-1g5gb-3"}})
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := e.drv.PrepareResourceClaims(e.ctx, []*resourceapi.ResourceClaim{c})
		durations = append(durations, time.Since(start))
		if err != nil || res[c.UID].Err != nil {
			b.Fatalf("prepare: %v %v", err, res[c.UID].Err)
		}
		ures, err := e.drv.UnprepareResourceClaims(e.ctx, []kubeletplugin.NamespacedObject{{UID: c.UID}})
		if err != nil || ures[c.UID] != nil {
			b.Fatalf("unprepare: %v %v", err, ures[c.UID])
		}
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Microseconds())/1000, "prepare-p50-ms")
}

// TestUnprepareDuringMIGCreation: while one instance creates a claim's MIG instance (without
// the node lock), the kubelet cancels the prepare and, in one variant, the other instance
// unprepares the claim. Whatever step the creation is at, nothing may be left: no record, no
// spec, no MIG instance.
func TestUnprepareDuringMIGCreation(t *testing.T) {
	for _, step := range []string{"intent", "gi-created", "ci-created", "completed"} {
		for _, unprepare := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/unprepare=%v", step, unprepare), func(t *testing.T) {
				e := newMIGEnv(t)
				store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
				if err != nil {
					t.Fatal(err)
				}
				b, err := New(e.ctx, Options{DriverName: driverName, NodeName: nodeName, Inventory: e.inv,
					CDI: cdi.New(e.cdiDir(), e.inv.Kind), State: store, Metrics: metrics.NewPlugin(driverName), MIG: e.server.Backend()})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				c := claim("c", []result{{Device: "gpu-1-mig-1g5gb-0"}})
				ctx, cancel := context.WithCancel(e.ctx)
				defer cancel()
				var once sync.Once
				unprepared := make(chan error, 1)
				migCrash = func(s string) {
					if s != step {
						return
					}
					once.Do(func() {
						cancel()
						if !unprepare {
							return
						}
						if step == "completed" {
							// Inside the second hold: the unprepare waits for it.
							go func() { unprepared <- unprepareOn(e.ctx, b, "c") }()
							return
						}
						unprepared <- unprepareOn(e.ctx, b, "c")
					})
				}
				defer func() { migCrash = func(string) {} }()
				err = prepareOn(ctx, e.drv, c)
				t.Logf("prepare: %v", err)
				if unprepare {
					if err := <-unprepared; err != nil {
						t.Errorf("unprepare on the other instance: %v", err)
					}
				}
				if step == "completed" {
					// Past the check: the claim was published in the hold, and the kubelet's
					// unprepare removes it.
					if !unprepare {
						if err := unprepareOn(e.ctx, b, "c"); err != nil {
							t.Fatal(err)
						}
					}
				} else if err == nil {
					t.Error("a prepare cancelled while creating its MIG instance succeeded")
				}
				if exists(e.recordPath("c")) || exists(e.specPath("c")) {
					t.Errorf("record %v, spec %v left", exists(e.recordPath("c")), exists(e.specPath("c")))
				}
				if got := e.instances(); len(got) != 0 {
					t.Errorf("MIG instances %v left", got)
				}
				if r := e.prepare(claim("next", []result{{Device: "gpu-1-mig-1g5gb-0"}})); r.Err != nil {
					t.Errorf("placement not free afterwards: %v", r.Err)
				}
			})
		}
	}
}
