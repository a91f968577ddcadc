package helm

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
)

// TestSharingValues: the chart's sharing values reach the plugin as its flags.
func TestSharingValues(t *testing.T) {
	for _, on := range []bool{true, false} {
		args, err := pluginArgs(map[string]any{"plugin": map[string]any{"sharing": map[string]any{"consumableMemory": on}}}, "gpu.accel-dra.io", nil)
		if err != nil {
			t.Fatal(err)
		}
		o := nodeplugin.NewOptions()
		if err := o.NewFlagSet().Parse(args); err != nil {
			t.Fatal(err)
		}
		if o.ConsumableMemory != on {
			t.Errorf("sharing.consumableMemory %v: plugin option %v (args %q)", on, o.ConsumableMemory, args)
		}
	}
	args, err := pluginArgs(map[string]any{"plugin": map[string]any{"sharing": map[string]any{"nvidiaSMIPath": "/opt/nvidia/bin/nvidia-smi", "nvidiaMPSControlPath": "/opt/nvidia/bin/nvidia-cuda-mps-control"}}}, "gpu.accel-dra.io", nil)
	if err != nil {
		t.Fatal(err)
	}
	o := nodeplugin.NewOptions()
	if err := o.NewFlagSet().Parse(args); err != nil {
		t.Fatal(err)
	}
	if o.NVIDIASMIPath != "/opt/nvidia/bin/nvidia-smi" || o.NVIDIAMPSControlPath != "/opt/nvidia/bin/nvidia-cuda-mps-control" {
		t.Errorf("sharing paths: plugin options %q %q (args %q)", o.NVIDIASMIPath, o.NVIDIAMPSControlPath, args)
	}
	if _, err := pluginArgs(map[string]any{"plugin": map[string]any{"sharing": map[string]any{"consumableMemory": "yes"}}}, "gpu.accel-dra.io", nil); err == nil {
		t.Error("a non-boolean sharing.consumableMemory passed the schema")
	}
	if _, err := pluginArgs(map[string]any{"plugin": map[string]any{"sharing": map[string]any{"mpsDaemons": "thread"}}}, "gpu.accel-dra.io", nil); err == nil {
		t.Error("sharing.mpsDaemons thread passed the schema")
	}
}

// TestMPSDaemonValues: by default the GPU plugin runs MPS control daemons as pods of the release
// namespace with its own image and priority, and as processes when asked; the NPU plugin has
// no MPS.
func TestMPSDaemonValues(t *testing.T) {
	image := map[string]any{"repository": "registry.example/accel-dra-kubelet-plugin", "tag": "v9"}
	for name, tc := range map[string]struct {
		values                    map[string]any
		mode, ns, image, priority string
	}{
		"default": {map[string]any{"plugin": map[string]any{"image": image}}, "pod", DefaultNamespace, "registry.example/accel-dra-kubelet-plugin:v9", "system-node-critical"},
		"process": {map[string]any{"plugin": map[string]any{"sharing": map[string]any{"mpsDaemons": "process"}}}, "process", "", "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			args, err := pluginArgs(tc.values, "gpu.accel-dra.io", nil)
			if err != nil {
				t.Fatal(err)
			}
			o := nodeplugin.NewOptions()
			o.MPSDaemonNamespace = ""
			if err := o.NewFlagSet().Parse(args); err != nil {
				t.Fatal(err)
			}
			if o.MPSDaemons != tc.mode || o.MPSDaemonNamespace != tc.ns || o.MPSDaemonImage != tc.image || o.MPSDaemonPriorityClassName != tc.priority {
				t.Errorf("plugin options %q %q %q %q, want %q %q %q %q (args %q)", o.MPSDaemons, o.MPSDaemonNamespace, o.MPSDaemonImage, o.MPSDaemonPriorityClassName,
					tc.mode, tc.ns, tc.image, tc.priority, args)
			}
		})
	}
	args, err := pluginArgs(map[string]any{"drivers": map[string]any{"npu": map[string]any{"enabled": true}}}, "npu.accel-dra.io", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--mps-") {
			t.Errorf("NPU plugin args have %s", a)
		}
	}
}

// TestSharingMountPropagation: the GPU plugin's kubelet plugins directory propagates mounts to
// the host (each MPS claim's /dev/shm tmpfs, docs/sharing.md) when the plugin is privileged, as
// the API server allows only then; the NPU plugin, which mounts nothing, never has it.
func TestSharingMountPropagation(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   map[string]string
	}{
		"default": {nil, map[string]string{"gpu.accel-dra.io": "Bidirectional", "npu.accel-dra.io": ""}},
		"unprivileged": {map[string]any{"plugin": map[string]any{"securityContext": map[string]any{"privileged": false}}},
			map[string]string{"gpu.accel-dra.io": "", "npu.accel-dra.io": ""}},
	} {
		t.Run(name, func(t *testing.T) {
			values := map[string]any{"drivers": map[string]any{"npu": map[string]any{"enabled": true}}}
			maps.Copy(values, tc.values)
			r, err := render(Options{Values: values})
			if err != nil {
				t.Fatal(err)
			}
			for driver, want := range tc.want {
				ds, err := r.PluginDaemonSet(driver)
				if err != nil {
					t.Fatal(err)
				}
				containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
				mounts, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "volumeMounts")
				got := "(no kubelet-plugins mount)"
				for _, m := range mounts {
					if m := m.(map[string]any); m["name"] == "kubelet-plugins" {
						got, _ = m["mountPropagation"].(string)
					}
				}
				if got != want {
					t.Errorf("%s: kubelet-plugins mountPropagation %q, want %q", driver, got, want)
				}
			}
		})
	}
}
