package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		gpuJSON(``),
		gpuJSON(`,"driverCapabilities":["compute","utility","video"]`),
		gpuJSON(`,"driverCapabilities":["compute","compute"]`),
		npuJSON(`,"runtimeOptions":["NODRV","VIRTUAL"]`),
		npuJSON(`,"runtimeOptions":null`),
		`{"apiVersion":"accel-dra.io/v1alpha1","kind":"WatchEvent"}`,
		`{"kind":"GpuConfig"}`,
		`null`, `[]`, ``, `{`,
		gpuJSON(`,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`),
		gpuJSON(`,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi","defaultPerDevicePinnedMemoryLimit":{"gpu-1":"20Gi"}}}`),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Decode(data)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Decode accepted an invalid config: %v\ninput: %q", err, data)
		}
		enc, err := Encode(cfg)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		again, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if diff := cmp.Diff(cfg, again, quantities); diff != "" {
			t.Errorf("round trip changed the config (-first +second):\n%s\ninput: %q", diff, data)
		}
		_ = cfg.Env()
	})
}
