package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
)

// quantities compares resource.Quantity by value; its unexported fields are a cache.
var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func TestDecodeSharing(t *testing.T) {
	withSharing := func(s *Sharing) *GpuConfig { c := gpuCfg(); c.Sharing = s; return c }
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	pct := func(v int32) *int32 { return &v }
	tests := map[string]struct {
		in      string
		want    Config
		wantErr string
	}{
		"time-slicing defaulted": {in: gpuJSON(`,"sharing":{"strategy":"TimeSlicing"}`),
			want: withSharing(&Sharing{Strategy: StrategyTimeSlicing, TimeSlicing: &TimeSlicing{Interval: TimeSliceDefault}})},
		"time-slicing long": {in: gpuJSON(`,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`),
			want: withSharing(&Sharing{Strategy: StrategyTimeSlicing, TimeSlicing: &TimeSlicing{Interval: TimeSliceLong}})},
		"mps with limits": {in: gpuJSON(`,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi","defaultPerDevicePinnedMemoryLimit":{"gpu-1":"20Gi"}}}`),
			want: withSharing(&Sharing{Strategy: StrategyMPS, MPS: &MPS{DefaultActiveThreadPercentage: pct(50), DefaultPinnedDeviceMemoryLimit: q("10Gi"),
				DefaultPerDevicePinnedMemoryLimit: map[string]resource.Quantity{"gpu-1": *q("20Gi")}}})},
		"mps bare":            {in: gpuJSON(`,"sharing":{"strategy":"MPS"}`), want: withSharing(&Sharing{Strategy: StrategyMPS})},
		"no strategy":         {in: gpuJSON(`,"sharing":{}`), wantErr: `GpuConfig: sharing.strategy: Required value: must be one of TimeSlicing, MPS`},
		"unknown strategy":    {in: gpuJSON(`,"sharing":{"strategy":"MIG"}`), wantErr: `sharing.strategy: Unsupported value: "MIG": supported values: "MPS", "TimeSlicing"`},
		"strategy case":       {in: gpuJSON(`,"sharing":{"strategy":"timeslicing"}`), wantErr: `sharing.strategy: Unsupported value: "timeslicing"`},
		"unknown interval":    {in: gpuJSON(`,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"VeryLong"}}`), wantErr: `sharing.timeSlicing.interval: Unsupported value: "VeryLong": supported values: "Default", "Short", "Medium", "Long"`},
		"mps with slicing":    {in: gpuJSON(`,"sharing":{"strategy":"MPS","timeSlicing":{"interval":"Short"}}`), wantErr: `sharing.timeSlicing: Forbidden: only with strategy TimeSlicing`},
		"slicing with mps":    {in: gpuJSON(`,"sharing":{"strategy":"TimeSlicing","mps":{}}`), wantErr: `sharing.mps: Forbidden: only with strategy MPS`},
		"percentage 0":        {in: gpuJSON(`,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":0}}`), wantErr: `sharing.mps.defaultActiveThreadPercentage: Invalid value: 0: must be between 1 and 100`},
		"percentage 101":      {in: gpuJSON(`,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":101}}`), wantErr: `sharing.mps.defaultActiveThreadPercentage: Invalid value: 101`},
		"zero limit":          {in: gpuJSON(`,"sharing":{"strategy":"MPS","mps":{"defaultPinnedDeviceMemoryLimit":"0"}}`), wantErr: `sharing.mps.defaultPinnedDeviceMemoryLimit: Invalid value: "0": must be more than zero`},
		"bad limit":           {in: gpuJSON(`,"sharing":{"strategy":"MPS","mps":{"defaultPinnedDeviceMemoryLimit":"lots"}}`), wantErr: `GpuConfig: `},
		"bad device name":     {in: gpuJSON(`,"sharing":{"strategy":"MPS","mps":{"defaultPerDevicePinnedMemoryLimit":{"GPU_0":"1Gi"}}}`), wantErr: `sharing.mps.defaultPerDevicePinnedMemoryLimit[GPU_0]: Invalid value: "GPU_0": must be a device name`},
		"negative per-device": {in: gpuJSON(`,"sharing":{"strategy":"MPS","mps":{"defaultPerDevicePinnedMemoryLimit":{"gpu-0":"-1Gi"}}}`), wantErr: `sharing.mps.defaultPerDevicePinnedMemoryLimit[gpu-0]: Invalid value: "-1Gi": must be more than zero`},
		"unknown field":       {in: gpuJSON(`,"sharing":{"strategy":"MPS","mpsConfig":{}}`), wantErr: `unknown field "sharing.mpsConfig"`},
		"sharing on an NPU":   {in: npuJSON(`,"sharing":{"strategy":"TimeSlicing"}`), wantErr: `NpuConfig: strict decoding error: unknown field "sharing"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Decode([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode() error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(): %v", err)
			}
			if diff := cmp.Diff(tc.want, got, quantities); diff != "" {
				t.Errorf("Decode() mismatch (-want +got):\n%s", diff)
			}
			// Encoding and decoding again gives the same config, and a copy shares nothing.
			enc, err := Encode(got)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Decode(enc)
			if err != nil {
				t.Fatalf("re-decoding %s: %v", enc, err)
			}
			if diff := cmp.Diff(got, again, quantities); diff != "" {
				t.Errorf("round trip (-first +second):\n%s", diff)
			}
			cp := got.DeepCopyObject().(*GpuConfig)
			if cp.Sharing == got.(*GpuConfig).Sharing {
				t.Error("DeepCopyObject shares Sharing")
			}
		})
	}
}

func TestTimeSliceSMINumber(t *testing.T) {
	for i, want := range []TimeSliceInterval{TimeSliceDefault, TimeSliceShort, TimeSliceMedium, TimeSliceLong} {
		if got := want.SMINumber(); got != i {
			t.Errorf("%s: %d, want %d", want, got, i)
		}
	}
	if got := TimeSliceInterval("x").SMINumber(); got != -1 {
		t.Errorf("unknown interval: %d, want -1", got)
	}
}
