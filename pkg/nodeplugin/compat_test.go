package nodeplugin

import (
	"testing"
)

func TestNVIDIACompatFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		args          []string
		wantDriver    string
		wantDataDir   string
		wantErr       string
		wantTranslate bool
	}{
		"off": {
			args:       []string{"--backend=mock"},
			wantDriver: "gpu.accel-dra.io", wantDataDir: "/var/lib/kubelet/plugins/gpu.accel-dra.io",
		},
		"on": {
			args:       []string{"--backend=mock", "--nvidia-compat"},
			wantDriver: "gpu.nvidia.com", wantDataDir: "/var/lib/kubelet/plugins/gpu.nvidia.com-accel-dra", wantTranslate: true,
		},
		"on with NVIDIA's name spelt out and a data dir": {
			args:       []string{"--backend=nvml", "--nvidia-compat", "--driver-name=gpu.nvidia.com", "--plugin-data-dir=/x"},
			wantDriver: "gpu.nvidia.com", wantDataDir: "/x", wantTranslate: true,
		},
		"another driver name": {
			args:    []string{"--nvidia-compat", "--driver-name=gpu.accel-dra.io"},
			wantErr: "--nvidia-compat publishes the GPUs as gpu.nvidia.com; --driver-name=gpu.accel-dra.io contradicts it",
		},
		"NPU backend": {
			args:    []string{"--nvidia-compat", "--backend=npu-mock"},
			wantErr: "--nvidia-compat is for GPU backends, not --backend=npu-mock",
		},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			o.NodeName = "n"
			if err := o.NewFlagSet().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Complete()
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Complete: %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.DriverName != tc.wantDriver || o.PluginDataDir != tc.wantDataDir {
				t.Errorf("driver %s, data dir %s; want %s, %s", o.DriverName, o.PluginDataDir, tc.wantDriver, tc.wantDataDir)
			}
			if got := o.configTranslator() != nil; got != tc.wantTranslate {
				t.Errorf("config translator set: %v, want %v", got, tc.wantTranslate)
			}
			if got := o.attributes() != nil; got != tc.wantTranslate {
				t.Errorf("attributes set: %v, want %v", got, tc.wantTranslate)
			}
			if got := len(o.taintKeys()) > 0; got != tc.wantTranslate {
				t.Errorf("taint keys set: %v, want %v", got, tc.wantTranslate)
			}
		})
	}
}
