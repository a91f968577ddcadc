package driver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// fakeSlicer records time-slice calls; fail makes calls for a UUID fail.
type fakeSlicer struct {
	mu    sync.Mutex
	calls []string
	fail  map[string]bool
	// now is each GPU's time-slice as the calls left it.
	now map[string]string
}

func (f *fakeSlicer) SetTimeSlice(_ context.Context, uuid string, iv configapi.TimeSliceInterval) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[uuid] {
		return errors.New("not supported")
	}
	f.calls = append(f.calls, uuid+"="+string(iv))
	if f.now == nil {
		f.now = map[string]string{}
	}
	f.now[uuid] = string(iv)
	return nil
}

// settings are the GPUs' time-slices as the calls left them.
func (f *fakeSlicer) settings() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for u, iv := range f.now {
		out[u] = iv
	}
	return out
}

func (f *fakeSlicer) take() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := strings.Join(f.calls, " ")
	f.calls = nil
	return s
}

func sharingConfig(json string) resourceapi.DeviceAllocationConfiguration {
	return opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":`+json+`}`)
}

var timeSliceLong = sharingConfig(`{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`)

func slicerEnv(t *testing.T) (*env, *fakeSlicer) {
	f := &fakeSlicer{fail: map[string]bool{}}
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, dir: t.TempDir(), inv: inventory(2), kube: fake.NewClientset(), boot: bootA,
		tweak: func(o *Options) { o.TimeSlicer = f; o.ConsumableMemory = true }}
	e.start()
	return e, f
}

func TestTimeSlicing(t *testing.T) {
	e, f := slicerEnv(t)
	u0, u1 := e.inv.Devices[0].UUID, e.inv.Devices[1].UUID

	c := claim("t1", []result{{Device: "gpu-0"}, {Device: "gpu-1"}}, timeSliceLong)
	e.exist(c)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got, want := f.take(), u0+"=Long "+u1+"=Long"; got != want {
		t.Errorf("prepare set %q, want %q", got, want)
	}
	// The kubelet asks again (after its restart): nothing is set twice.
	if r := e.prepare(c); r.Err != nil || f.take() != "" {
		t.Errorf("second prepare: %v, calls %q", r.Err, f.calls)
	}
	if err := e.unprepare("t1"); err != nil {
		t.Fatal(err)
	}
	if got, want := f.take(), u0+"=Default "+u1+"=Default"; got != want {
		t.Errorf("unprepare set %q, want %q", got, want)
	}
}

func TestTimeSlicingSharesRestoreAfterTheLast(t *testing.T) {
	e, f := slicerEnv(t)
	u0 := e.inv.Devices[0].UUID
	a, b := shareClaim("a", "gpu-0", "20Gi"), shareClaim("b", "gpu-0", "20Gi")
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{timeSliceLong}
		if r := e.prepare(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	f.take()
	// Shares with another setting are refused, naming both claims.
	for cfg, want := range map[string]string{
		`{"strategy":"TimeSlicing","timeSlicing":{"interval":"Short"}}`: "sharing TimeSlicing (interval Short)",
		``: "sharing none",
	} {
		c := shareClaim("c", "gpu-0", "1Gi")
		if cfg != "" {
			c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{sharingConfig(cfg)}
		}
		r := e.prepare(c)
		if r.Err == nil || !strings.Contains(r.Err.Error(), "ns/claim-a") || !strings.Contains(r.Err.Error(), "claim ns/claim-c asks for "+want) {
			t.Errorf("conflicting share %q: error %v", cfg, r.Err)
		}
	}
	if got := f.take(); got != "" {
		t.Errorf("refused shares changed the GPU: %q", got)
	}
	if err := e.unprepare("a"); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); got != "" {
		t.Errorf("unpreparing one of two time-sliced shares set %q", got)
	}
	if err := e.unprepare("b"); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); got != u0+"=Default" {
		t.Errorf("unpreparing the last share set %q, want the default", got)
	}
}

// TestTimeSlicingSurvivesCrash: the record keeps what was set, so that a claim deleted while
// the plugin was down gets its GPU's default back at start-up, and a failed restore keeps the
// record until one succeeds.
func TestTimeSlicingSurvivesCrash(t *testing.T) {
	e, f := slicerEnv(t)
	u0 := e.inv.Devices[0].UUID
	if r := e.prepare(claim("t1", []result{{Device: "gpu-0"}}, timeSliceLong)); r.Err != nil {
		t.Fatal(r.Err)
	}
	f.take()
	// The claim is not in the API server: start-up drops it, and puts the default back.
	rep := e.start()
	if got := f.take(); got != u0+"=Default" {
		t.Errorf("start-up after the claim went: set %q, want the default (report %+v)", got, rep)
	}

	c := claim("t2", []result{{Device: "gpu-0"}}, timeSliceLong)
	e.exist(c)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	f.take()
	f.fail[u0] = true
	if err := e.unprepare("t2"); err == nil || !strings.Contains(err.Error(), "default time-slice of GPU "+u0) {
		t.Fatalf("unprepare with a failing nvidia-smi: %v", err)
	}
	if !exists(e.recordPath("t2")) {
		t.Fatal("record removed although the GPU's default could not be put back")
	}
	f.fail[u0] = false
	if err := e.unprepare("t2"); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); got != u0+"=Default" || exists(e.recordPath("t2")) {
		t.Errorf("retried unprepare: set %q, record left %v", got, exists(e.recordPath("t2")))
	}
}

func TestSharingRefused(t *testing.T) {
	e, f := slicerEnv(t)
	u1 := e.inv.Devices[1].UUID
	for name, tc := range map[string]struct {
		claim *resourceapi.ResourceClaim
		want  string
	}{
		"admin access":              {claim("r1", []result{{Device: "gpu-0", Admin: true}}, timeSliceLong), "sharing: device gpu-0 is allocated with admin access"},
		"MPS without daemon binary": {claim("r2", []result{{Device: "gpu-0"}}, sharingConfig(`{"strategy":"MPS"}`)), "sharing.strategy: MPS is not available on node node-a: the plugin has no nvidia-cuda-mps-control (--nvidia-mps-control-path)"},
		"bad interval":              {claim("r3", []result{{Device: "gpu-0"}}, sharingConfig(`{"strategy":"TimeSlicing","timeSlicing":{"interval":"Forever"}}`)), "sharing.timeSlicing.interval: Unsupported value"},
		"nvidia-smi fails": {claim("r4", []result{{Device: "gpu-0"}, {Device: "gpu-1"}}, timeSliceLong),
			"sharing.timeSlicing: setting interval Long on GPU " + u1},
	} {
		t.Run(name, func(t *testing.T) {
			f.fail[u1] = name == "nvidia-smi fails"
			defer func() { f.fail[u1] = false }()
			r := e.prepare(tc.claim)
			if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", r.Err, tc.want)
			}
			if exists(e.recordPath(tc.claim.UID)) || exists(e.specPath(tc.claim.UID)) {
				t.Error("a refused claim left a record or a spec")
			}
			// The GPU it had set first is put back.
			if name == "nvidia-smi fails" {
				if got, want := f.take(), fmt.Sprintf("%s=Long %s=Default", e.inv.Devices[0].UUID, e.inv.Devices[0].UUID); got != want {
					t.Errorf("calls %q, want %q", got, want)
				}
			}
			if r := e.prepare(claim("free-"+string(tc.claim.UID), []result{{Device: "gpu-0"}, {Device: "gpu-1"}})); r.Err != nil {
				t.Errorf("GPUs not free after a refused claim: %v", r.Err)
			}
			if err := e.unprepare(types.UID("free-" + string(tc.claim.UID))); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Without nvidia-smi, time-slicing is refused, naming the flag.
	e.tweak = nil
	e.start()
	if r := e.prepare(claim("r5", []result{{Device: "gpu-0"}}, timeSliceLong)); r.Err == nil || !strings.Contains(r.Err.Error(), "--nvidia-smi-path") {
		t.Errorf("time-slicing without nvidia-smi: %v", r.Err)
	}
}

// TestTimeSlicingComputeMode: a time-sliced GPU is put in the DEFAULT compute mode before its
// interval is set (time-slicing is between the processes of that mode), as NVIDIA's driver does;
// DEFAULT is the driver's own default, so unprepare leaves it.
func TestTimeSlicingComputeMode(t *testing.T) {
	e, f := slicerEnv(t)
	modes := &fakeModes{modes: map[string]device.ComputeMode{}, fail: map[string]bool{}}
	tweak := e.tweak
	e.tweak = func(o *Options) { tweak(o); o.ComputeMode = modes }
	e.start()
	u0 := e.inv.Devices[0].UUID
	c := claim("t1", []result{{Device: "gpu-0"}}, timeSliceLong)
	e.exist(c)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := modes.take(); got != u0+"=DEFAULT" {
		t.Errorf("compute modes set at prepare: %q, want DEFAULT", got)
	}
	if err := e.unprepare("t1"); err != nil {
		t.Fatal(err)
	}
	if got := modes.take(); got != "" {
		t.Errorf("unprepare set compute modes %q", got)
	}
	// A GPU that refuses the mode refuses the claim, before its interval is touched.
	f.take()
	modes.fail[u0] = true
	if r := e.prepare(claim("t2", []result{{Device: "gpu-0"}}, timeSliceLong)); r.Err == nil || !strings.Contains(r.Err.Error(), "sharing.timeSlicing: setting compute mode DEFAULT on GPU "+u0) {
		t.Errorf("prepare with a GPU refusing its compute mode: %v", r.Err)
	}
	if got := f.take(); got != "" {
		t.Errorf("time-slices set for a refused claim: %q", got)
	}
	if exists(e.recordPath("t2")) {
		t.Error("a refused claim left its record")
	}
}

// TestUnprepareOnLostGPU: a GPU whose time-slice cannot be put back keeps its claim's record
// for the kubelet's retry, unless the GPU is lost (device health says so): then nothing can be
// set on it until a reset or a reboot, which put the default back anyway, and the unprepare
// finishes so that the pod can terminate.
func TestUnprepareOnLostGPU(t *testing.T) {
	e, f := slicerEnv(t)
	src := health.SourceFunc(func(ctx context.Context, _ func(health.Event)) error { <-ctx.Done(); return nil })
	if err := e.drv.EnableHealth(HealthOptions{Source: src, StatePath: filepath.Join(e.dir, "health.json"), BootID: e.boot}); err != nil {
		t.Fatal(err)
	}
	u0 := e.inv.Devices[0].UUID
	c := claim("t1", []result{{Device: "gpu-0"}}, timeSliceLong)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	f.fail[u0] = true
	if err := e.unprepare("t1"); err == nil || !exists(e.recordPath("t1")) {
		t.Fatalf("unprepare with a GPU that refuses but answers: %v, record kept %v; want an error and the record kept", err, exists(e.recordPath("t1")))
	}
	for _, ev := range []health.Event{{Type: health.Watching, Device: "gpu-0"}, {Type: health.Fault, Device: "gpu-0", Cause: health.CauseLost, Message: "GPU is lost"}} {
		if _, _, err := e.drv.health.tracker.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.unprepare("t1"); err != nil {
		t.Fatalf("unprepare on a lost GPU: %v", err)
	}
	if exists(e.recordPath("t1")) || exists(e.specPath("t1")) {
		t.Error("unprepare on a lost GPU left its record or spec")
	}
}
