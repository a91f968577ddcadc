package nvidia

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// TestTranslate feeds configurations written as NVIDIA's users write them and checks what
// accel-dra then does with them: the configuration its own decoder resolves the translation
// to, or the error, which must name NVIDIA's field.
func TestTranslate(t *testing.T) {
	ts := func(i configapi.TimeSliceInterval) *configapi.Sharing {
		return &configapi.Sharing{Strategy: configapi.StrategyTimeSlicing, TimeSlicing: &configapi.TimeSlicing{Interval: i}}
	}
	pct := func(v int32) *int32 { return &v }
	for name, tc := range map[string]struct {
		in      string
		want    *configapi.Sharing
		wantErr string
	}{
		"GpuConfig without sharing": {
			in: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`,
		},
		"GpuConfig time-slicing with interval": {
			in:   `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
			want: ts(configapi.TimeSliceLong),
		},
		"GpuConfig time-slicing without settings gets Default": {
			in:   `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`,
			want: ts(configapi.TimeSliceDefault),
		},
		"GpuConfig time-slicing with empty settings gets Default": {
			in:   `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{}}}`,
			want: ts(configapi.TimeSliceDefault),
		},
		"GpuConfig MPS with limits": {
			in: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi"}}}`,
			want: &configapi.Sharing{Strategy: configapi.StrategyMPS, MPS: &configapi.MPS{
				DefaultActiveThreadPercentage: pct(50), DefaultPinnedDeviceMemoryLimit: quantity("10Gi"),
			}},
		},
		"GpuConfig MPS without settings": {
			in:   `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`,
			want: &configapi.Sharing{Strategy: configapi.StrategyMPS},
		},
		"MigDeviceConfig time-slicing sets nothing": {
			in: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing"}}`,
		},
		"MigDeviceConfig MPS": {
			in:   `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":25}}}`,
			want: &configapi.Sharing{Strategy: configapi.StrategyMPS, MPS: &configapi.MPS{DefaultActiveThreadPercentage: pct(25)}},
		},
		"MigDeviceConfig without sharing": {
			in: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig"}`,
		},

		"unknown interval": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"VeryLong"}}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): sharing.timeSlicingConfig.interval: Unsupported value: "VeryLong": supported values: "Default", "Short", "Medium", "Long"`,
		},
		"unknown strategy": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Exclusive"}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): sharing.strategy: Unsupported value: "Exclusive": supported values: "MPS", "TimeSlicing"`,
		},
		"missing strategy": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{}}`,
			wantErr: `MigDeviceConfig (resource.nvidia.com/v1beta1): sharing.strategy: Required value: must be one of TimeSlicing, MPS`,
		},
		"MPS settings with time-slicing": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","mpsConfig":{}}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): sharing.mpsConfig: Forbidden: only with strategy MPS`,
		},
		"time-slicing settings with MPS": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","timeSlicingConfig":{"interval":"Short"}}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): sharing.timeSlicingConfig: Forbidden: only with strategy TimeSlicing`,
		},
		"time-slicing settings on a MIG device": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Short"}}}`,
			wantErr: `MigDeviceConfig (resource.nvidia.com/v1beta1): strict decoding error: unknown field "sharing.timeSlicingConfig"`,
		},
		"thread percentage 0, which NVIDIA's API takes": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":0}}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): sharing.mpsConfig.defaultActiveThreadPercentage: Invalid value: 0: must be between 1 and 100`,
		},
		"thread percentage over 100": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":101}}}`,
			wantErr: `MigDeviceConfig (resource.nvidia.com/v1beta1): sharing.mpsConfig.defaultActiveThreadPercentage: Invalid value: 101: must be between 1 and 100`,
		},
		"zero memory limit": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"0"}}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: Invalid value: "0": must be more than zero`,
		},
		"per-device limits keyed by NVIDIA's UUIDs or positions": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPerDevicePinnedMemoryLimit":{"0":"5Gi"}}}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: Forbidden: not supported in NVIDIA compatibility mode (its keys are UUIDs or positions in the claim): use defaultPinnedDeviceMemoryLimit, or an accel-dra.io/v1alpha1 GpuConfig whose sharing.mps.defaultPerDevicePinnedMemoryLimit names devices (gpu-3)`,
		},
		"several problems": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","timeSlicingConfig":{},"mpsConfig":{"defaultActiveThreadPercentage":-1}}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): [sharing.timeSlicingConfig: Forbidden: only with strategy TimeSlicing, sharing.mpsConfig.defaultActiveThreadPercentage: Invalid value: -1: must be between 1 and 100]`,
		},
		"misspelt field": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"intervall":"Long"}}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): strict decoding error: unknown field "sharing.timeSlicingConfig.intervall"`,
		},
		"accel-dra's field in NVIDIA's object": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","driverCapabilities":["video"]}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): strict decoding error: unknown field "driverCapabilities"`,
		},
		"wrong type": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":"50"}}}`,
			wantErr: `GpuConfig (resource.nvidia.com/v1beta1): json: cannot unmarshal string into Go struct field mpsConfig.sharing.mpsConfig.defaultActiveThreadPercentage of type int`,
		},
		"NVIDIA kind for devices accel-dra does not have": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig"}`,
			wantErr: `kind: Unsupported value: "VfioDeviceConfig": supported values: "GpuConfig", "MigDeviceConfig"`,
		},
		"no kind": {
			in:      `{"apiVersion":"resource.nvidia.com/v1beta1"}`,
			wantErr: `kind: Required value: must be GpuConfig or MigDeviceConfig for resource.nvidia.com/v1beta1`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Translate([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Translate: got error %v\nwant %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			// What counts is what accel-dra's own decoder makes of the translation.
			cfg, err := configapi.Resolve(device.KindGPU, [][]byte{out})
			if err != nil {
				t.Fatalf("accel-dra refuses the translation %s: %v", out, err)
			}
			gpu := cfg.(*configapi.GpuConfig)
			want := configapi.NewGpuConfig()
			want.Sharing = tc.want
			want.Default()
			if diff := cmp.Diff(want.Sharing, gpu.Sharing); diff != "" {
				t.Errorf("sharing (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(configapi.DefaultDriverCapabilities, gpu.DriverCapabilities); diff != "" {
				t.Errorf("driverCapabilities (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTranslatePassesOthersThrough: accel-dra's own objects, and anything that is not NVIDIA's,
// reach accel-dra's decoder byte for byte, so its errors are the ones users read.
func TestTranslatePassesOthersThrough(t *testing.T) {
	for _, in := range []string{
		`{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilities":["video"]}`,
		`{"apiVersion":"resource.nvidia.com/v1","kind":"GpuConfig"}`,
		`["not","an","object"]`,
		`not json`,
		``,
	} {
		out, err := Translate([]byte(in))
		if err != nil || string(out) != in {
			t.Errorf("Translate(%q) = %q, %v; want it unchanged", in, out, err)
		}
	}
}

// TestTranslateThroughResolve: in a class-then-claim list, an NVIDIA entry that wins replaces an
// accel-dra one as a whole, as between accel-dra's own entries.
func TestTranslateThroughResolve(t *testing.T) {
	class := []byte(`{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","driverCapabilities":["graphics"]}`)
	claim, err := Translate([]byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Short"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configapi.Resolve(device.KindGPU, [][]byte{class, claim})
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(cfg.Env(), " ")
	if !strings.Contains(env, "NVIDIA_DRIVER_CAPABILITIES=compute,utility") {
		t.Errorf("env %q: want the default capabilities of the winning (NVIDIA) entry", env)
	}
}

func quantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func TestAppliesTo(t *testing.T) {
	for _, tc := range []struct {
		raw          string
		gpu, migDevs bool
	}{
		{`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`, true, false},
		{`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig"}`, false, true},
		// Read, so that Translate reports it.
		{`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig"}`, true, true},
		{`{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig"}`, true, true},
		{`not json`, true, true},
	} {
		if got := AppliesTo([]byte(tc.raw), false); got != tc.gpu {
			t.Errorf("%s to whole GPUs: %v, want %v", tc.raw, got, tc.gpu)
		}
		if got := AppliesTo([]byte(tc.raw), true); got != tc.migDevs {
			t.Errorf("%s to MIG devices: %v, want %v", tc.raw, got, tc.migDevs)
		}
	}
}
