package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/metrics"
)

const (
	driverName = "gpu.accel-dra.io"
	nodeName   = "node-a"
	bootA      = "11111111-1111-1111-1111-111111111111"
)

func inventory(n int) *device.Inventory {
	inv := &device.Inventory{Kind: device.KindGPU, ControlNodes: []device.Node{{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}}}
	for i := 0; i < n; i++ {
		numa := int64(i / 4)
		inv.Devices = append(inv.Devices, device.Device{
			Name: device.NameFor(device.KindGPU, i), Kind: device.KindGPU, Index: i,
			UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i), ProductName: "NVIDIA H100 80GB HBM3",
			DriverVersion: "570.124.06", CUDAComputeCapability: "9.0", PCIBusID: fmt.Sprintf("0000:%02x:00.0", 0x10+i),
			NUMANode: &numa, MemoryBytes: 80 << 30,
			Nodes: []device.Node{{Path: fmt.Sprintf("/dev/nvidia%d", i), Type: "c", Major: 195, Minor: int64(i)}},
		})
	}
	return inv
}

type env struct {
	t       testing.TB
	ctx     context.Context
	dir     string
	inv     *device.Inventory
	drv     *Driver
	kube    *fake.Clientset
	events  *eventLog
	metrics *metrics.Plugin
	boot    string
	driver  string // default driverName
	// tweak, if set, changes the driver's options on every start.
	tweak func(*Options)
}

type eventLog struct{ msgs []string }

func (e *eventLog) Warning(reason, msg string) { e.msgs = append(e.msgs, reason+": "+msg) }

func newEnv(t *testing.T, inv *device.Inventory) *env {
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, dir: t.TempDir(), inv: inv, kube: fake.NewClientset(), boot: bootA}
	e.start()
	return e
}

// start (re)creates the driver over the same directories, as a plugin restart does.
func (e *env) start() *ReconcileReport {
	e.t.Helper()
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		e.t.Fatal(err)
	}
	e.events = &eventLog{}
	if e.driver == "" {
		e.driver = driverName
	}
	e.metrics = metrics.NewPlugin(e.driver)
	if e.drv != nil {
		// The previous process is gone; its instance lock goes with it.
		e.drv.Close()
	}
	opts := Options{
		DriverName: e.driver, NodeName: nodeName, Inventory: e.inv,
		CDI: cdi.New(e.cdiDir(), e.inv.Kind), State: store, Metrics: e.metrics, Kube: e.kube, Events: e.events,
	}
	if e.tweak != nil {
		e.tweak(&opts)
	}
	e.drv, err = New(e.ctx, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	rep, err := e.drv.Reconcile(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

func (e *env) cdiDir() string { return filepath.Join(e.dir, "cdi") }

func (e *env) specPath(uid types.UID) string {
	return cdi.New(e.cdiDir(), device.KindGPU).Path(string(uid))
}

func (e *env) recordPath(uid types.UID) string {
	return filepath.Join(e.dir, "checkpoint", string(uid)+".json")
}

type result struct {
	Request, Pool, Device, Driver string
	Admin                         bool
}

func claim(uid string, results []result, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for _, r := range results {
		if r.Driver == "" {
			r.Driver = driverName
		}
		if r.Pool == "" {
			r.Pool = nodeName
		}
		if r.Request == "" {
			r.Request = "gpu"
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device,
		})
		if r.Admin {
			results := c.Status.Allocation.Devices.Results
			results[len(results)-1].AdminAccess = ptr.To(true)
		}
	}
	c.Status.Allocation.Devices.Config = configs
	return c
}

func opaque(source resourceapi.AllocationConfigSource, json string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{
		Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driverName, Parameters: runtime.RawExtension{Raw: []byte(json)},
		}},
	}
}

func (e *env) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	e.t.Helper()
	res, err := e.drv.PrepareResourceClaims(e.ctx, []*resourceapi.ResourceClaim{c})
	if err != nil {
		e.t.Fatalf("PrepareResourceClaims: %v", err)
	}
	r, ok := res[c.UID]
	if !ok || len(res) != 1 {
		e.t.Fatalf("result has no entry for claim %s: %v", c.UID, res)
	}
	return r
}

func (e *env) unprepare(uid types.UID) error {
	e.t.Helper()
	res, err := e.drv.UnprepareResourceClaims(e.ctx, []kubeletplugin.NamespacedObject{{UID: uid, NamespacedName: types.NamespacedName{Namespace: "ns", Name: "claim-" + string(uid)}}})
	if err != nil {
		e.t.Fatalf("UnprepareResourceClaims: %v", err)
	}
	if _, ok := res[uid]; !ok {
		e.t.Fatalf("no entry for claim %s", uid)
	}
	return res[uid]
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestPrepareWritesSpecAndCheckpoint(t *testing.T) {
	e := newEnv(t, inventory(4))
	r := e.prepare(claim("uid-1", []result{{Device: "gpu-1"}, {Device: "gpu-2"}, {Device: "npu-0", Driver: "npu.accel-dra.io"}}))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if len(r.Devices) != 2 || r.Devices[0].DeviceName != "gpu-1" || r.Devices[1].DeviceName != "gpu-2" {
		t.Fatalf("devices %+v", r.Devices)
	}
	if got, want := r.Devices[0].CDIDeviceIDs, []string{"accel-dra.io/gpu=uid-1-gpu-1"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("CDI IDs %v, want %v", got, want)
	}
	if r.Devices[0].PoolName != nodeName || r.Devices[0].Requests[0] != "gpu" {
		t.Fatalf("device %+v", r.Devices[0])
	}
	spec, err := os.ReadFile(e.specPath("uid-1"))
	if err != nil {
		t.Fatalf("CDI spec not written: %v", err)
	}
	for _, want := range []string{"/dev/nvidia1", "/dev/nvidia2", "/dev/nvidiactl", "NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("CDI spec lacks %q:\n%s", want, spec)
		}
	}
	if strings.Contains(string(spec), "/dev/nvidia3") {
		t.Errorf("CDI spec has a device the claim did not get")
	}
	rec, err := os.ReadFile(e.recordPath("uid-1"))
	if err != nil || !strings.Contains(string(rec), `"PrepareCompleted"`) {
		t.Fatalf("checkpoint record %s, %v", rec, err)
	}
}

func TestPrepareIsIdempotent(t *testing.T) {
	e := newEnv(t, inventory(2))
	c := claim("uid-1", []result{{Device: "gpu-0"}})
	first := e.prepare(c)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	before, _ := os.Stat(e.recordPath("uid-1"))
	specBefore, _ := os.Stat(e.specPath("uid-1"))
	second := e.prepare(c)
	if second.Err != nil {
		t.Fatal(second.Err)
	}
	if fmt.Sprint(first.Devices) != fmt.Sprint(second.Devices) {
		t.Fatalf("second prepare returned %v, first %v", second.Devices, first.Devices)
	}
	after, _ := os.Stat(e.recordPath("uid-1"))
	specAfter, _ := os.Stat(e.specPath("uid-1"))
	if !os.SameFile(before, after) || !os.SameFile(specBefore, specAfter) || !before.ModTime().Equal(after.ModTime()) {
		t.Fatal("second prepare rewrote the checkpoint record or the CDI spec")
	}
}

func TestPrepareRejects(t *testing.T) {
	inv := inventory(3)
	inv.Devices[2].ProductName = strings.Repeat("x", 65) // fails validation: left out of the slices
	for _, tc := range []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		wantErr []string
	}{
		{"unknown device", claim("u1", []result{{Device: "gpu-9"}}), []string{"ns/claim-u1", "gpu-9", "not on node node-a"}},
		{"other pool", claim("u2", []result{{Device: "gpu-0", Pool: "node-b"}}), []string{"ns/claim-u2", "gpu-0", `pool "node-b"`}},
		{"device held by another claim", claim("u3", []result{{Device: "gpu-1"}}), []string{"ns/claim-u3", "gpu-1", "already prepared for claim ns/claim-held"}},
		{"unpublished device", claim("u4", []result{{Device: "gpu-2"}}), []string{"gpu-2", "not published"}},
		{"unknown config field", claim("u5", []result{{Device: "gpu-0"}}, opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilitie":["compute"]}`)), []string{"ns/claim-u5", "driverCapabilitie"}},
		{"bad config value", claim("u6", []result{{Device: "gpu-0"}}, opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilities":["gpus"]}`)), []string{"driverCapabilities[0]", "gpus"}},
		{"npu config for gpu", claim("u7", []result{{Device: "gpu-0"}}, opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"accel-dra.io/v1alpha1","kind":"NpuConfig"}`)), []string{"NpuConfig"}},
		{"not allocated", &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-u8", UID: "u8"}}, []string{"ns/claim-u8", "not allocated"}},
		{"conflicting request configs", claim("u9", []result{{Device: "gpu-0", Request: "a"}},
			opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilities":["video"]}`, "b")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, inv)
			if r := e.prepare(claim("held", []result{{Device: "gpu-1"}})); r.Err != nil {
				t.Fatal(r.Err)
			}
			r := e.prepare(tc.claim)
			if tc.wantErr == nil {
				// A config for a request the claim has no devices of is not a conflict.
				if r.Err != nil {
					t.Fatalf("unexpected error %v", r.Err)
				}
				return
			}
			if r.Err == nil {
				t.Fatalf("prepare succeeded, want error with %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(r.Err.Error(), w) {
					t.Errorf("error %q does not contain %q", r.Err, w)
				}
			}
			// Nothing is left behind and no device stays reserved.
			if exists(e.specPath(tc.claim.UID)) || exists(e.recordPath(tc.claim.UID)) {
				t.Fatal("failed prepare left a CDI spec or checkpoint record")
			}
			if got := e.drv.PreparedClaims(); len(got) != 1 || got[0] != "held" {
				t.Fatalf("prepared claims after failure: %v", got)
			}
			if r := e.prepare(claim("after", []result{{Device: "gpu-0"}})); r.Err != nil {
				t.Fatalf("gpu-0 stayed reserved after a failed prepare: %v", r.Err)
			}
		})
	}
}

func TestConflictingConfigsAcrossRequests(t *testing.T) {
	e := newEnv(t, inventory(2))
	c := claim("u1", []result{{Device: "gpu-0", Request: "a"}, {Device: "gpu-1", Request: "b"}},
		opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilities":["video"]}`, "b"))
	r := e.prepare(c)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "requests a and b resolve to different configurations") {
		t.Fatalf("error %v", r.Err)
	}
}

func TestConfigPrecedence(t *testing.T) {
	e := newEnv(t, inventory(1))
	// The claim's config is listed first here but must still win over the class's.
	c := claim("u1", []result{{Device: "gpu-0"}},
		opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilities":["compute","video"]}`),
		opaque(resourceapi.AllocationConfigSourceClass, `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilities":["all"]}`))
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	spec, _ := os.ReadFile(e.specPath("u1"))
	if !strings.Contains(string(spec), "NVIDIA_DRIVER_CAPABILITIES=compute,video") {
		t.Fatalf("claim config did not win over class config:\n%s", spec)
	}
}

func TestUnprepare(t *testing.T) {
	e := newEnv(t, inventory(2))
	if r := e.prepare(claim("u1", []result{{Device: "gpu-0"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	if exists(e.specPath("u1")) || exists(e.recordPath("u1")) {
		t.Fatal("unprepare left the CDI spec or checkpoint record")
	}
	if err := e.unprepare("u1"); err != nil {
		t.Fatalf("second unprepare: %v", err)
	}
	if err := e.unprepare("never-seen"); err != nil {
		t.Fatalf("unprepare of unknown claim: %v", err)
	}
	if r := e.prepare(claim("u2", []result{{Device: "gpu-0"}})); r.Err != nil {
		t.Fatalf("device not released by unprepare: %v", r.Err)
	}
}

func TestRestartKeepsPreparedClaims(t *testing.T) {
	e := newEnv(t, inventory(2))
	c := claim("u1", []result{{Device: "gpu-0"}})
	if _, err := e.kube.ResourceV1().ResourceClaims("ns").Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := e.prepare(c)
	rep := e.start()
	if len(rep.Restored) != 1 || len(rep.SpecsCreated) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if r := e.prepare(claim("u2", []result{{Device: "gpu-0"}})); r.Err == nil {
		t.Fatal("after restart a second claim got a device that is still prepared")
	}
	if again := e.prepare(c); fmt.Sprint(again.Devices) != fmt.Sprint(first.Devices) || again.Err != nil {
		t.Fatalf("after restart: %+v, before: %+v", again, first)
	}

	// The CDI dir is tmpfs: a wiped dir is re-created at start-up.
	if err := os.RemoveAll(e.cdiDir()); err != nil {
		t.Fatal(err)
	}
	rep = e.start()
	if len(rep.SpecsCreated) != 1 || !exists(e.specPath("u1")) {
		t.Fatalf("CDI spec not re-created: %+v", rep)
	}
}

func TestReconcile(t *testing.T) {
	e := newEnv(t, inventory(4))
	// u-live exists in the API; u-gone does not; u-replaced exists under another UID.
	for _, c := range []*resourceapi.ResourceClaim{claim("u-live", nil), {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-u-replaced", UID: "other"}}} {
		if _, err := e.kube.ResourceV1().ResourceClaims("ns").Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, uid := range []string{"u-live", "u-gone", "u-replaced"} {
		if r := e.prepare(claim(uid, []result{{Device: device.NameFor(device.KindGPU, i)}})); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// A prepare that died between its PrepareStarted record and its CDI spec.
	store, _ := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	half := checkpoint.Claim{UID: "u-half", Namespace: "ns", Name: "claim-u-half", State: checkpoint.StatePrepareStarted,
		Devices: []checkpoint.PreparedDevice{{Request: "gpu", Pool: nodeName, Device: "gpu-3", CDIDeviceIDs: []string{"accel-dra.io/gpu=u-half-gpu-3"}}}}
	if err := store.Put(half); err != nil {
		t.Fatal(err)
	}
	// A spec nobody recorded, and a record that is garbage.
	orphan := cdi.New(e.cdiDir(), device.KindGPU)
	spec, err := orphan.Build(cdi.Claim{UID: "u-orphan", Requests: []cdi.Request{{Name: "gpu", Devices: e.inv.Devices[3:4]}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := orphan.Write("u-orphan", spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.recordPath("u-corrupt"), []byte(`{"apiVersion":"checkpoint.accel-dra.io/v1","kind":"PreparedClaim","checks`), 0o600); err != nil {
		t.Fatal(err)
	}

	rep := e.start()
	check := func(what string, got []string, want ...string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("restored", rep.Restored, "u-live")
	check("dropped", rep.Dropped, "u-gone", "u-replaced")
	check("rolled back", rep.RolledBack, "u-half")
	check("orphans", rep.Orphans, "u-orphan")
	if len(rep.Corrupt) != 1 || !strings.Contains(rep.Corrupt[0], "u-corrupt") {
		t.Errorf("corrupt = %v", rep.Corrupt)
	}
	if len(e.events.msgs) != 1 || !strings.Contains(e.events.msgs[0], "CorruptCheckpoint") {
		t.Errorf("events %v", e.events.msgs)
	}
	for _, uid := range []types.UID{"u-gone", "u-replaced", "u-half", "u-orphan"} {
		if exists(e.specPath(uid)) || exists(e.recordPath(uid)) {
			t.Errorf("claim %s left a spec or record behind", uid)
		}
	}
	if got := e.drv.PreparedClaims(); len(got) != 1 || got[0] != "u-live" {
		t.Fatalf("prepared after reconcile: %v", got)
	}
	// Devices of dropped claims are free again.
	for _, dev := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		if r := e.prepare(claim("new-"+dev, []result{{Device: dev}})); r.Err != nil {
			t.Errorf("%s not free after reconcile: %v", dev, r.Err)
		}
	}
}

func TestRebootIsCleanSlate(t *testing.T) {
	e := newEnv(t, inventory(2))
	if r := e.prepare(claim("u1", []result{{Device: "gpu-0"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	e.boot = "22222222-2222-2222-2222-222222222222"
	rep := e.start()
	if len(rep.Stale) != 1 || len(e.drv.PreparedClaims()) != 0 || exists(e.recordPath("u1")) || exists(e.specPath("u1")) {
		t.Fatalf("after reboot: report %+v, prepared %v", rep, e.drv.PreparedClaims())
	}
}

func TestRejectedDeviceIsReported(t *testing.T) {
	inv := inventory(2)
	inv.Devices[1].ProductName = strings.Repeat("x", 65)
	e := newEnv(t, inv)
	pool := e.drv.Resources().Pools[nodeName]
	if len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 1 || pool.Slices[0].Devices[0].Name != "gpu-0" {
		t.Fatalf("pool %+v", pool)
	}
	if len(e.events.msgs) != 1 || !strings.Contains(e.events.msgs[0], "gpu-1") || !strings.Contains(e.events.msgs[0], "InvalidDevice") {
		t.Fatalf("events %v", e.events.msgs)
	}
	if got := testutil.ToFloat64(e.metrics.RejectedDevices.WithLabelValues("invalid")); got != 1 {
		t.Fatalf("rejected_devices{reason=invalid} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.metrics.PublishedDevices); got != 1 {
		t.Fatalf("published_devices = %v, want 1", got)
	}
	// accel_dra_device_info has the published device only, with its identity.
	if n := testutil.CollectAndCount(e.metrics.DeviceInfo); n != 1 {
		t.Errorf("device_info has %d series, want the one published device", n)
	}
	if got := testutil.ToFloat64(e.metrics.DeviceInfo.WithLabelValues(metrics.DeviceInfoOf(nodeName, inv.Devices[0])...)); got != 1 {
		t.Errorf("device_info of gpu-0 = %v, want 1", got)
	}
}

// TestPublishErrorsAreCounted: the slice controller's errors reach HandleError, which counts
// them by kind, so that an alert sees a node whose slices cannot be written.
func TestPublishErrorsAreCounted(t *testing.T) {
	e := newEnv(t, inventory(1))
	e.drv.HandleError(t.Context(), errors.New("resourceslices is forbidden"), "publishing")
	e.drv.HandleError(t.Context(), fmt.Errorf("wrapped: %w", &resourceslice.DroppedFieldsError{PoolName: nodeName}), "publishing")
	for kind, want := range map[string]float64{metrics.PublishError: 1, metrics.PublishDroppedFields: 1} {
		if got := testutil.ToFloat64(e.metrics.PublishErrors.WithLabelValues(kind)); got != want {
			t.Errorf("resourceslice_publish_errors_total{kind=%s} = %v, want %v", kind, got, want)
		}
	}
}
