package driver

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/accel-dra/accel-dra/pkg/compat/nvidia"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// compatEnv is a driver with the NVIDIA compatibility mode's options, as nodeplugin sets them.
func compatEnv(t *testing.T, gpus int) (*env, *fakeSlicer) {
	f := &fakeSlicer{fail: map[string]bool{}}
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, dir: t.TempDir(), inv: inventory(gpus), kube: fake.NewClientset(), boot: bootA,
		tweak: func(o *Options) {
			o.TimeSlicer = f
			o.ConfigTranslator = nvidia.Translate
			o.ConfigApplies = nvidia.AppliesTo
			o.TaintKeys = nvidia.TaintKeys
		}}
	e.start()
	return e, f
}

// TestNVIDIAConfigPrepares: a claim whose config is NVIDIA's GpuConfig gets the time-slice it
// asks for, and a bad one is refused naming its position and NVIDIA's field, leaving the GPUs
// alone.
func TestNVIDIAConfigPrepares(t *testing.T) {
	e, f := compatEnv(t, 2)
	u0 := e.inv.Devices[0].UUID
	class := opaque(resourceapi.AllocationConfigSourceClass, `{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig"}`)
	nv := opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Medium"}}}`)
	c := claim("n1", []result{{Device: "gpu-0"}}, nv, class)
	e.exist(c)
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got, want := f.take(), u0+"=Medium"; got != want {
		t.Errorf("prepare set %q, want %q", got, want)
	}

	bad := opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Forever"}}}`)
	c = claim("n2", []result{{Device: "gpu-1"}}, bad, class)
	e.exist(c)
	r := e.prepare(c)
	want := `claim ns/claim-n2: request gpu: invalid configuration for driver gpu.accel-dra.io: config[1]: GpuConfig (resource.nvidia.com/v1beta1): sharing.timeSlicingConfig.interval: Unsupported value: "Forever"`
	if r.Err == nil || !strings.HasPrefix(r.Err.Error(), want) {
		t.Errorf("bad NVIDIA config: error %v\nwant it to start with %s", r.Err, want)
	}
	if got := f.take(); got != "" {
		t.Errorf("refused claim changed the GPU: %q", got)
	}
}

// TestNVIDIATaintKeys: in the compatibility mode a lost GPU and a device whose health is unknown
// carry NVIDIA's keys, which tolerations written for NVIDIA's driver name; an XID keeps the key
// both drivers use.
func TestNVIDIATaintKeys(t *testing.T) {
	e, _ := compatEnv(t, 3)
	clk := clocktesting.NewFakeClock(start)
	effects, err := health.ParseEffects(map[string]string{"unknown": "NoSchedule"})
	if err != nil {
		t.Fatal(err)
	}
	src := enableHealth(t, e, clk, effects)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	go e.drv.RunHealth(ctx, func(context.Context) error { return nil })
	// gpu-2 is never watched: its health is unknown.
	src <- health.Event{Type: health.Watching, Device: "gpu-0"}
	src <- health.Event{Type: health.Watching, Device: "gpu-1"}
	xid, _ := health.NewClassifier(nil).Classify("gpu-0", 48)
	src <- xid
	src <- health.Event{Type: health.Fault, Device: "gpu-1", Cause: health.CauseLost, Message: "GPU is lost"}
	want := map[string]string{"gpu-0": "gpu.accel-dra.io/xid=48", "gpu-1": "gpu.accel-dra.io/gpu-lost=", "gpu-2": "gpu.accel-dra.io/unmonitored="}
	var got map[string]string
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got = map[string]string{}
		for dev := range want {
			var keys []string
			for _, tt := range taintsOf(e, dev) {
				keys = append(keys, tt.Key+"="+tt.Value)
			}
			got[dev] = strings.Join(keys, " ")
		}
		return maps.Equal(got, want), nil
	}); err != nil {
		t.Fatalf("taints %v, want %v", got, want)
	}
}

// TestNVIDIAConfigDeviceTypes: as in NVIDIA's driver, a GpuConfig that names no requests
// configures only whole GPUs and a MigDeviceConfig only MIG devices, while one that names its
// request applies to it whatever it is. The driver has no MPS here, so an MPS config that
// applies fails the claim: that is how the test sees it applied.
func TestNVIDIAConfigDeviceTypes(t *testing.T) {
	e, f := compatEnv(t, 2)
	e.inv.Devices[1].MIG = &device.MIG{Parent: "gpu-9", ParentUUID: "GPU-parent", Profile: device.MIGProfile{Name: "1g.10gb"}}
	e.start()
	u1 := e.inv.Devices[1].UUID
	const (
		gpuTS  = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`
		migMPS = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`
	)
	n := 0
	for name, tc := range map[string]struct {
		dev     string
		config  resourceapi.DeviceAllocationConfiguration
		wantErr string
		calls   string
	}{
		"GpuConfig for every request, on a MIG device: not applied": {
			dev: "gpu-1", config: opaque(resourceapi.AllocationConfigSourceClaim, gpuTS),
		},
		"MigDeviceConfig for every request, on a whole GPU: not applied": {
			dev: "gpu-0", config: opaque(resourceapi.AllocationConfigSourceClaim, migMPS),
		},
		"MigDeviceConfig for every request, on a MIG device: applied": {
			dev: "gpu-1", config: opaque(resourceapi.AllocationConfigSourceClaim, migMPS), wantErr: "MPS",
		},
		"MigDeviceConfig naming the request of a whole GPU: applied": {
			dev: "gpu-0", config: opaque(resourceapi.AllocationConfigSourceClaim, migMPS, "gpu"), wantErr: "MPS",
		},
		"GpuConfig naming the request of a MIG device: applied": {
			dev: "gpu-1", config: opaque(resourceapi.AllocationConfigSourceClass, gpuTS, "gpu"), calls: u1 + "=Long",
		},
	} {
		t.Run(name, func(t *testing.T) {
			n++
			uid := fmt.Sprintf("types-%d", n)
			c := claim(uid, []result{{Device: tc.dev}}, tc.config)
			e.exist(c)
			r := e.prepare(c)
			switch {
			case tc.wantErr == "" && r.Err != nil:
				t.Fatalf("prepare: %v", r.Err)
			case tc.wantErr != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), tc.wantErr)):
				t.Fatalf("prepare: %v, want an error about %s (the config applied)", r.Err, tc.wantErr)
			}
			if got := f.take(); got != tc.calls {
				t.Errorf("time-slices set: %q, want %q", got, tc.calls)
			}
			if r.Err == nil {
				if err := e.unprepare(types.UID(uid)); err != nil {
					t.Fatal(err)
				}
				f.take()
			}
		})
	}
}
