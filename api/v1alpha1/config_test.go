package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/device"
)

const gv = `"apiVersion":"accel-dra.io/v1alpha1"`

func gpuJSON(rest string) string { return `{` + gv + `,"kind":"GpuConfig"` + rest + `}` }
func npuJSON(rest string) string { return `{` + gv + `,"kind":"NpuConfig"` + rest + `}` }

func gpuCfg(caps ...string) *GpuConfig {
	c := NewGpuConfig()
	if caps != nil {
		c.DriverCapabilities = caps
	}
	return c
}

func npuCfg(opts ...string) *NpuConfig {
	c := NewNpuConfig()
	c.RuntimeOptions = opts
	return c
}

func TestDecode(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Config
		wantErr string // substring; empty: success
	}{
		"gpu defaulted":          {in: gpuJSON(``), want: gpuCfg("compute", "utility")},
		"gpu empty list":         {in: gpuJSON(`,"driverCapabilities":[]`), want: gpuCfg("compute", "utility")},
		"gpu null list":          {in: gpuJSON(`,"driverCapabilities":null`), want: gpuCfg("compute", "utility")},
		"gpu explicit":           {in: gpuJSON(`,"driverCapabilities":["compute","utility","video"]`), want: gpuCfg("compute", "utility", "video")},
		"gpu all":                {in: gpuJSON(`,"driverCapabilities":["all"]`), want: gpuCfg("all")},
		"gpu every value":        {in: gpuJSON(`,"driverCapabilities":["compute","utility","graphics","video","display","compat32","all"]`), want: gpuCfg("compute", "utility", "graphics", "video", "display", "compat32", "all")},
		"gpu with white space":   {in: "\n  " + gpuJSON(``) + "\n", want: gpuCfg("compute", "utility")},
		"npu defaulted":          {in: npuJSON(``), want: npuCfg()},
		"npu empty list":         {in: npuJSON(`,"runtimeOptions":[]`), want: npuCfg()},
		"npu options":            {in: npuJSON(`,"runtimeOptions":["NODRV","VIRTUAL"]`), want: npuCfg("NODRV", "VIRTUAL")},
		"unsupported capability": {in: gpuJSON(`,"driverCapabilities":["compute","gpus"]`), wantErr: `GpuConfig: driverCapabilities[1]: Unsupported value: "gpus": supported values: "all", "compat32", "compute", "display", "graphics", "utility", "video"`},
		"capability wrong case":  {in: gpuJSON(`,"driverCapabilities":["Compute"]`), wantErr: `driverCapabilities[0]: Unsupported value: "Compute"`},
		"duplicate capability":   {in: gpuJSON(`,"driverCapabilities":["compute","video","compute"]`), wantErr: `GpuConfig: driverCapabilities[2]: Duplicate value: "compute"`},
		"two errors": {in: gpuJSON(`,"driverCapabilities":["x","x"]`),
			wantErr: `driverCapabilities[0]: Unsupported value: "x": supported values: "all", "compat32", "compute", "display", "graphics", "utility", "video", driverCapabilities[1]: Unsupported value: "x"`},
		"unsupported runtime option": {in: npuJSON(`,"runtimeOptions":["nodrv"]`), wantErr: `NpuConfig: runtimeOptions[0]: Unsupported value: "nodrv": supported values: "NODRV", "VIRTUAL"`},
		"duplicate runtime option":   {in: npuJSON(`,"runtimeOptions":["NODRV","NODRV"]`), wantErr: `runtimeOptions[1]: Duplicate value: "NODRV"`},
		"unknown field":              {in: gpuJSON(`,"driverCapabilites":["compute"]`), wantErr: `GpuConfig: strict decoding error: unknown field "driverCapabilites"`},
		"field of the other kind":    {in: npuJSON(`,"driverCapabilities":["compute"]`), wantErr: `NpuConfig: strict decoding error: unknown field "driverCapabilities"`},
		"field name wrong case":      {in: gpuJSON(`,"DriverCapabilities":["compute"]`), wantErr: `unknown field "DriverCapabilities"`},
		"metadata":                   {in: gpuJSON(`,"metadata":{"name":"x"}`), wantErr: `unknown field "metadata"`},
		"duplicate field":            {in: gpuJSON(`,"driverCapabilities":["compute"],"driverCapabilities":["video"]`), wantErr: `duplicate field "driverCapabilities"`},
		"wrong type, string for list": {in: gpuJSON(`,"driverCapabilities":"compute,utility"`),
			wantErr: `GpuConfig: json: cannot unmarshal string into Go struct field GpuConfig.driverCapabilities of type []string`},
		"wrong type in list":   {in: npuJSON(`,"runtimeOptions":[1]`), wantErr: `NpuConfig.runtimeOptions of type string`},
		"unknown kind":         {in: `{` + gv + `,"kind":"TpuConfig"}`, wantErr: `kind: Unsupported value: "TpuConfig": supported values: "GpuConfig", "NpuConfig"`},
		"missing kind":         {in: `{` + gv + `}`, wantErr: `kind: Required value: must be GpuConfig or NpuConfig`},
		"missing apiVersion":   {in: `{"kind":"GpuConfig"}`, wantErr: `apiVersion: Required value: must be accel-dra.io/v1alpha1`},
		"unknown apiVersion":   {in: `{"apiVersion":"accel-dra.io/v1","kind":"GpuConfig"}`, wantErr: `apiVersion: Unsupported value: "accel-dra.io/v1": supported values: "accel-dra.io/v1alpha1"`},
		"other group":          {in: `{"apiVersion":"gpu.resource.nvidia.com/v1beta1","kind":"GpuConfig"}`, wantErr: `apiVersion: Unsupported value: "gpu.resource.nvidia.com/v1beta1"`},
		"core apiVersion":      {in: `{"apiVersion":"v1","kind":"GpuConfig"}`, wantErr: `apiVersion: Unsupported value: "v1"`},
		"kind from metav1":     {in: `{` + gv + `,"kind":"WatchEvent"}`, wantErr: `kind: Unsupported value: "WatchEvent"`},
		"empty":                {in: ``, wantErr: `empty configuration`},
		"null":                 {in: `null`, wantErr: `kind: Required value`},
		"array":                {in: `[]`, wantErr: `must be a JSON object, not an array`},
		"number":               {in: `42`, wantErr: `must be a JSON object, not 42`},
		"truncated":            {in: gpuJSON(``)[:30], wantErr: `not valid JSON: unexpected end of JSON input`},
		"trailing data":        {in: gpuJSON(``) + `{}`, wantErr: `not valid JSON: invalid character '{' after top-level value`},
		"yaml is not accepted": {in: "apiVersion: accel-dra.io/v1alpha1\nkind: GpuConfig\n", wantErr: `not valid JSON`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Decode([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("Decode() = %#v, want error containing %q", got, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode() error:\n  %v\nwant it to contain:\n  %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(): %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decode() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnv(t *testing.T) {
	tests := map[string]struct {
		cfg  Config
		want []string
	}{
		"gpu default":       {cfg: NewGpuConfig(), want: []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"}},
		"gpu not defaulted": {cfg: &GpuConfig{}, want: []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"}},
		"gpu user order":    {cfg: gpuCfg("video", "compute"), want: []string{"NVIDIA_DRIVER_CAPABILITIES=video,compute"}},
		"npu default":       {cfg: NewNpuConfig(), want: nil},
		"npu options":       {cfg: npuCfg("VIRTUAL", "NODRV"), want: []string{"ASCEND_RUNTIME_OPTIONS=VIRTUAL,NODRV"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.cfg.Env()); diff != "" {
				t.Errorf("Env() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	video := gpuJSON(`,"driverCapabilities":["compute","utility","video"]`)
	graphics := gpuJSON(`,"driverCapabilities":["graphics"]`)
	tests := map[string]struct {
		kind    device.Kind
		configs []string
		want    Config
		wantErr string
	}{
		"gpu, none":             {kind: device.KindGPU, want: gpuCfg("compute", "utility")},
		"npu, none":             {kind: device.KindNPU, want: npuCfg()},
		"one":                   {kind: device.KindGPU, configs: []string{video}, want: gpuCfg("compute", "utility", "video")},
		"class then claim":      {kind: device.KindGPU, configs: []string{graphics, video}, want: gpuCfg("compute", "utility", "video")},
		"claim wins as a whole": {kind: device.KindGPU, configs: []string{video, gpuJSON(``)}, want: gpuCfg("compute", "utility")},
		"npu":                   {kind: device.KindNPU, configs: []string{npuJSON(`,"runtimeOptions":["VIRTUAL"]`)}, want: npuCfg("VIRTUAL")},
		"gpu config for npu driver": {kind: device.KindNPU, configs: []string{npuJSON(``), video},
			wantErr: `config[1]: GpuConfig configures gpu devices, this driver prepares npu devices`},
		"npu config for gpu driver": {kind: device.KindGPU, configs: []string{npuJSON(``)},
			wantErr: `config[0]: NpuConfig configures npu devices, this driver prepares gpu devices`},
		"overridden config still validated": {kind: device.KindGPU, configs: []string{gpuJSON(`,"driverCapabilities":["gpus"]`), video},
			wantErr: `config[0]: GpuConfig: driverCapabilities[0]: Unsupported value: "gpus"`},
		"decode error": {kind: device.KindGPU, configs: []string{video, `{}`}, wantErr: `config[1]: kind: Required value`},
		"unknown kind": {kind: "tpu", wantErr: `no device configuration for device kind "tpu"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var raw [][]byte
			for _, c := range tc.configs {
				raw = append(raw, []byte(c))
			}
			got, err := Resolve(tc.kind, raw)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve() error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(): %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Resolve() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for name, cfg := range map[string]Config{
		"gpu":                  &GpuConfig{DriverCapabilities: []string{"graphics", "display"}},
		"npu":                  npuCfg("NODRV"),
		"npu without TypeMeta": &NpuConfig{},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := Encode(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(data)
			if err != nil {
				t.Fatalf("Decode(%s): %v", data, err)
			}
			want := cfg.DeepCopyObject().(Config)
			want.Default()
			want.GetObjectKind().SetGroupVersionKind(SchemeGroupVersion.WithKind(kindOf(want)))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func kindOf(c Config) string {
	if c.DeviceKind() == device.KindGPU {
		return GpuConfigKind
	}
	return NpuConfigKind
}

func TestDeepCopy(t *testing.T) {
	g := gpuCfg("compute")
	gc := g.DeepCopyObject().(*GpuConfig)
	gc.DriverCapabilities[0] = "video"
	if g.DriverCapabilities[0] != "compute" {
		t.Error("GpuConfig.DeepCopyObject shares the slice")
	}
	n := npuCfg("NODRV")
	nc := n.DeepCopyObject().(*NpuConfig)
	nc.RuntimeOptions[0] = "VIRTUAL"
	if n.RuntimeOptions[0] != "NODRV" {
		t.Error("NpuConfig.DeepCopyObject shares the slice")
	}
}
