package nodeplugin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/pkg/serverfeatures"
)

type recordedWarnings []string

func (r *recordedWarnings) Warning(reason, message string) {
	*r = append(*r, reason+": "+message)
}

// sharedGPU is a GPU published for consumable memory (pkg/slices/capacity.go).
func sharedGPU() resourceapi.Device {
	return resourceapi.Device{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true)}
}

func storedSlice(name string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpu.accel-dra.io", NodeName: ptr.To("node-1"),
			Pool:    resourceapi.ResourcePool{Name: "node-1", Generation: 1, ResourceSliceCount: 1},
			Devices: devices,
		},
	}
}

func gateOptions(mode string) *Options {
	o := NewOptions()
	o.DriverName, o.NodeName, o.DroppedFields, o.EventsNamespace = "gpu.accel-dra.io", "node-1", mode, "kube-system"
	return o
}

// TestGateCheckVerify reads back a first publish: a GPU whose allowMultipleAllocations the
// server dropped (DRAConsumableCapacity off) is refused in refuse mode and a warning in warn
// mode; a slice stored whole is neither.
func TestGateCheckVerify(t *testing.T) {
	desired := map[string]resourceslice.Pool{"node-1": {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{sharedGPU()}}}}}
	for name, tc := range map[string]struct {
		mode         string
		stored       resourceapi.Device
		wantRefused  bool
		wantWarnings int
	}{
		"dropped, refuse": {mode: DroppedFieldsRefuse, stored: resourceapi.Device{Name: "gpu-0"}, wantRefused: true},
		"dropped, warn":   {mode: DroppedFieldsWarn, stored: resourceapi.Device{Name: "gpu-0"}, wantWarnings: 1},
		"kept":            {mode: DroppedFieldsRefuse, stored: sharedGPU()},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			kube := fake.NewClientset(storedSlice("s-0", tc.stored))
			var warnings recordedWarnings
			g := newGateCheck(gateOptions(tc.mode), kube, &warnings)
			g.verify(ctx, desired, nil)
			refused := g.refusalNow()
			if (refused != nil) != tc.wantRefused || len(warnings) != tc.wantWarnings {
				t.Fatalf("refused %v, warnings %q; want refused %v, %d warning(s)", refused, warnings, tc.wantRefused, tc.wantWarnings)
			}
			for _, msg := range append(warnings, errString(refused)) {
				if msg != "" && !strings.Contains(msg, "feature gate DRAConsumableCapacity is off") {
					t.Errorf("message %q does not name the gate", msg)
				}
			}
		})
	}
}

func errString(err *serverfeatures.DroppedError) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestGateCheckRefuse records the refusal on the Node in the configured namespace and
// withdraws the driver's slices.
func TestGateCheckRefuse(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	kube := fake.NewClientset(storedSlice("s-0", resourceapi.Device{Name: "gpu-0"}))
	g := newGateCheck(gateOptions(DroppedFieldsRefuse), kube, &recordedWarnings{})
	dropped := &serverfeatures.DroppedError{Drops: []serverfeatures.Drop{{Gate: "DRAConsumableCapacity", Feature: "consumable capacity", Field: "spec.devices[].allowMultipleAllocations", Where: "node-1/gpu-0"}}}
	g.refuse(ctx, dropped, true)

	events, err := kube.EventsV1().Events("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 {
		t.Fatalf("events in kube-system: %d, want 1", len(events.Items))
	}
	ev := events.Items[0]
	if ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonFieldsDropped || ev.Regarding.Kind != "Node" ||
		ev.Regarding.Name != "node-1" || ev.Regarding.Namespace != "" || ev.Note != dropped.Error() {
		t.Errorf("event: %+v", ev)
	}
	left, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("slices left after the refusal: %d", len(left.Items))
	}
}

// TestHealthzRefused: after a refusal /healthz and /readyz say why, even once serving.
func TestHealthzRefused(t *testing.T) {
	s := newStartup()
	s.serving(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }), func() error { return nil })
	s.refuse("kube-apiserver dropped fields: feature gate DRAPartitionableDevices is off")
	for path, h := range map[string]http.HandlerFunc{"/healthz": s.serveHealthz, "/readyz": s.serveReadyz} {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "refused: kube-apiserver dropped fields: feature gate DRAPartitionableDevices is off") {
			t.Errorf("%s = %d %q", path, rec.Code, rec.Body.String())
		}
	}
}

// TestGateCheckReportOrder: the read-back of the whole first publish replaces the slice
// controller's report of one slice, whichever came first, and a later report of one slice
// does not replace it.
func TestGateCheckReportOrder(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	g := newGateCheck(gateOptions(DroppedFieldsRefuse), fake.NewClientset(), &recordedWarnings{})
	partial := &serverfeatures.DroppedError{Drops: []serverfeatures.Drop{{Gate: "DRAPartitionableDevices", Where: "node-1/gpu-0"}}}
	full := &serverfeatures.DroppedError{Drops: []serverfeatures.Drop{{Gate: "DRAPartitionableDevices", Where: "node-1"}, {Gate: "DRAPartitionableDevices", Where: "node-1/gpu-0"}}}
	g.report(ctx, partial, false)
	select {
	case <-g.refused:
	default:
		t.Fatal("a report did not signal the refusal")
	}
	g.report(ctx, full, true)
	g.report(ctx, partial, false)
	if got := g.refusalNow(); got != full {
		t.Errorf("refusal %v, want the complete one %v", got, full)
	}
}

// TestGateCheckProbeTaints: the dry-run probe finds a server that drops device taints (a
// reactor drops them as v1.37.1 does with DRADeviceTaints off) and one that keeps them, and
// persists nothing.
func TestGateCheckProbeTaints(t *testing.T) {
	for name, tc := range map[string]struct {
		dropTaints bool
		wantGate   string
	}{
		"gate off": {dropTaints: true, wantGate: "DRADeviceTaints"},
		"gate on":  {},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			kube := fake.NewClientset()
			var dryRun []string
			kube.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
				create := action.(k8stesting.CreateActionImpl)
				dryRun = create.CreateOptions.DryRun
				s := create.GetObject().(*resourceapi.ResourceSlice).DeepCopy()
				if tc.dropTaints {
					for i := range s.Spec.Devices {
						s.Spec.Devices[i].Taints = nil
					}
				}
				return true, s, nil
			})
			g := newGateCheck(gateOptions(DroppedFieldsRefuse), kube, &recordedWarnings{})
			drops := g.probeTaints(ctx)
			if !slices.Equal(dryRun, []string{metav1.DryRunAll}) {
				t.Errorf("probe created with dryRun %v, want [All]", dryRun)
			}
			var gates []string
			for _, d := range drops {
				gates = append(gates, d.Gate)
			}
			if tc.wantGate == "" && gates != nil || tc.wantGate != "" && !slices.Equal(gates, []string{tc.wantGate}) {
				t.Errorf("refusal gates %v, want %q", gates, tc.wantGate)
			}
		})
	}
}

// TestGatedPluginHandleError: a dropped taint reported by the slice controller on a later
// publish (a device failed) is a refusal too.
func TestGatedPluginHandleError(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	g := newGateCheck(gateOptions(DroppedFieldsRefuse), fake.NewClientset(), &recordedWarnings{})
	inner := &handledErrors{}
	p := gatedPlugin{DRAPlugin: inner, check: g}
	desired := storedSlice("s-0", resourceapi.Device{Name: "gpu-2", Taints: []resourceapi.DeviceTaint{{Key: "gpu.accel-dra.io/xid", Effect: resourceapi.DeviceTaintEffectNoSchedule}}})
	actual := storedSlice("s-0", resourceapi.Device{Name: "gpu-2"})
	err := &resourceslice.DroppedFieldsError{PoolName: "node-1", DesiredSlice: desired, ActualSlice: actual}
	p.HandleError(ctx, err, "publishing")
	if len(inner.errs) != 1 {
		t.Errorf("the driver's HandleError got %d errors, want the one", len(inner.errs))
	}
	if r := g.refusalNow(); r == nil || !slices.Equal(r.Gates(), []string{"DRADeviceTaints"}) {
		t.Errorf("refusal %v, want one naming DRADeviceTaints", r)
	}
}

// handledErrors is a DRAPlugin of which only HandleError is called.
type handledErrors struct {
	kubeletplugin.DRAPlugin
	errs []error
}

func (h *handledErrors) HandleError(_ context.Context, err error, _ string) {
	h.errs = append(h.errs, err)
}

// TestGateCheckVerifyWithProbe: what the taint probe found and what the first publish shows
// make one refusal naming every gate.
func TestGateCheckVerifyWithProbe(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	desired := map[string]resourceslice.Pool{"node-1": {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{sharedGPU()}}}}}
	probed := []serverfeatures.Drop{{Gate: "DRADeviceTaints", Feature: "device taints", Field: "spec.devices[].taints", Where: "node-1/taint-probe"}}
	g := newGateCheck(gateOptions(DroppedFieldsRefuse), fake.NewClientset(storedSlice("s-0", resourceapi.Device{Name: "gpu-0"})), &recordedWarnings{})
	g.verify(ctx, desired, probed)
	if r := g.refusalNow(); r == nil || !slices.Equal(r.Gates(), []string{"DRAConsumableCapacity", "DRADeviceTaints"}) {
		t.Errorf("refusal %v, want one naming DRAConsumableCapacity and DRADeviceTaints", r)
	}
}

// TestGateCheckDryRun: the first publish is tried with dry runs, slice by slice, before
// anything is published; a server that drops allowMultipleAllocations (a reactor drops it as
// v1.37.1 does with DRAConsumableCapacity off) is found, and nothing is stored.
func TestGateCheckDryRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	kube := fake.NewClientset()
	var dryRuns int
	kube.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		create := action.(k8stesting.CreateActionImpl)
		if !slices.Equal(create.CreateOptions.DryRun, []string{metav1.DryRunAll}) {
			return false, nil, nil
		}
		dryRuns++
		s := create.GetObject().(*resourceapi.ResourceSlice).DeepCopy()
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].AllowMultipleAllocations = nil
		}
		return true, s, nil
	})
	desired := map[string]resourceslice.Pool{"node-1": {Slices: []resourceslice.Slice{
		{Devices: []resourceapi.Device{sharedGPU()}},
		{Devices: []resourceapi.Device{{Name: "gpu-1"}}},
	}}}
	g := newGateCheck(gateOptions(DroppedFieldsRefuse), kube, &recordedWarnings{})
	drops := g.dryRun(ctx, desired)
	if dryRuns != 2 || len(drops) != 1 || drops[0].Gate != "DRAConsumableCapacity" || drops[0].Where != "node-1/gpu-0" {
		t.Errorf("%d dry runs, drops %+v; want 2 and DRAConsumableCapacity at node-1/gpu-0", dryRuns, drops)
	}
	if list, _ := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("dry runs stored %d slices", len(list.Items))
	}
}

// TestGateCheckRefuseKeepsOthersSlices: a refusal before publishing (withdraw false) records
// the event and leaves the node's slices, another instance's in a rolling update, alone.
func TestGateCheckRefuseKeepsOthersSlices(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	kube := fake.NewClientset(storedSlice("s-0", resourceapi.Device{Name: "gpu-0"}))
	g := newGateCheck(gateOptions(DroppedFieldsRefuse), kube, &recordedWarnings{})
	g.refuse(ctx, &serverfeatures.DroppedError{Drops: []serverfeatures.Drop{{Gate: "DRADeviceTaints"}}}, false)
	if list, _ := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); len(list.Items) != 1 {
		t.Errorf("%d slices after a refusal before publishing, want the 1 there", len(list.Items))
	}
	if events, _ := kube.EventsV1().Events("kube-system").List(ctx, metav1.ListOptions{}); len(events.Items) != 1 {
		t.Errorf("%d events, want 1", len(events.Items))
	}
}
