package driver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
	// profile is the mock profile; empty: mig-mixed.
	profile string
}

func newMIGEnv(t *testing.T) *migEnv { return startMIGEnv(t, "", false) }

// startMIGEnv starts a plugin over a mock of profile (empty: mig-mixed), static or dynamic MIG.
func startMIGEnv(t *testing.T, profile string, static bool) *migEnv {
	e := &migEnv{env: &env{t: t, dir: t.TempDir(), boot: bootA}, static: static, profile: profile}
	e.env.ctx = t.Context()
	e.restart()
	return e
}

// restart starts a new plugin process over the same checkpoint, CDI and mock directories.
func (e *migEnv) restart() *ReconcileReport {
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
		CDI: cdi.New(e.cdiDir(), e.inv.Kind), State: store, Metrics: e.metrics, Events: e.events, MIG: partitioner(part),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	rep, err := e.drv.Reconcile(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// partitioner keeps a nil backend a nil interface.
func partitioner(b *nvmlbackend.Backend) device.Partitioner {
	if b == nil {
		return nil
	}
	return b
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
	for _, step := range []string{"intent", "gi-created", "gi-recorded", "ci-created", "ci-recorded"} {
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
			if s == "ci-recorded" {
				panic("kill")
			}
		}
		defer func() { migCrash = func(string) {} }()
		e.prepare(c)
	}()
	// The dead instance's registration goes with it; a second instance (same checkpoint, same
	// MIG state) prepares the claim without a Reconcile.
	e.drv.Close()
	old := e.record("c")
	if old.Devices[0].MIG.CI == nil {
		t.Fatalf("record %+v", old)
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
	if now := e.record("c"); now.Devices[0].UUID == old.Devices[0].UUID {
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
