package helm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
)

var nvidiaCompat = map[string]any{"drivers": map[string]any{"gpu": map[string]any{"compat": map[string]any{"nvidia": true}}}}

// TestNVIDIACompatValues: drivers.gpu.compat.nvidia renders what manifests written for NVIDIA's
// driver name: its DeviceClasses with its selectors' driver, the extended resource
// nvidia.com/gpu, a plugin registered as gpu.nvidia.com with the compatibility flag, a data
// directory that is not NVIDIA's, and only on the nodes labelled as handed over.
func TestNVIDIACompatValues(t *testing.T) {
	r, err := render(Options{Values: nvidiaCompat})
	if err != nil {
		t.Fatal(err)
	}
	classes := map[string]string{}
	for _, u := range r.OfKind("DeviceClass") {
		c := toTyped[resourceapi.DeviceClass](t, u)
		var exprs []string
		for _, s := range c.Spec.Selectors {
			exprs = append(exprs, s.CEL.Expression)
		}
		ext := ""
		if c.Spec.ExtendedResourceName != nil {
			ext = " extendedResourceName=" + *c.Spec.ExtendedResourceName
		}
		classes[c.Name] = strings.Join(exprs, " && ") + ext
	}
	want := map[string]string{
		"gpu.nvidia.com": `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu" extendedResourceName=nvidia.com/gpu`,
		"mig.nvidia.com": `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "mig"`,
	}
	if diff := cmp.Diff(want, classes); diff != "" {
		t.Errorf("DeviceClasses (-want +got):\n%s", diff)
	}

	u, err := r.PluginDaemonSet("gpu.nvidia.com")
	if err != nil {
		t.Fatal(err)
	}
	args, err := ContainerArgs(u, PluginContainer)
	if err != nil {
		t.Fatal(err)
	}
	o := nodeplugin.NewOptions()
	if err := o.NewFlagSet().Parse(args); err != nil {
		t.Fatalf("the plugin refuses the chart's args %q: %v", args, err)
	}
	o.NodeName = "n"
	if err := o.Complete(); err != nil {
		t.Fatalf("args %q: %v", args, err)
	}
	if !o.NVIDIACompat || o.DriverName != "gpu.nvidia.com" || o.PluginDataDir != "/var/lib/kubelet/plugins/gpu.nvidia.com-accel-dra" {
		t.Errorf("plugin options: compat %v, driver %s, data dir %s (args %q)", o.NVIDIACompat, o.DriverName, o.PluginDataDir, args)
	}
	spec := toTyped[appsv1.DaemonSet](t, u).Spec.Template.Spec
	if got := spec.NodeSelector["accel-dra.io/nvidia-compat"]; got != "true" {
		t.Errorf("node selector %v: want accel-dra.io/nvidia-compat=true", spec.NodeSelector)
	}
	// The hardware labels still apply: the handover label narrows them, it does not replace them.
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || len(spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		t.Errorf("affinity %+v: want the node-affinity labels kept", spec.Affinity)
	}

	pub, err := PublisherArgs(mergeValues(devicePluginOff, mergeValues(nvidiaCompat, map[string]any{"publisher": map[string]any{"enabled": true}})), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := FlagValue(pub, "drivers"); !strings.Contains(v, "gpu.nvidia.com") {
		t.Errorf("publisher --drivers=%s: want gpu.nvidia.com", v)
	}
}

// TestNVIDIACompatOptions: the node label can be turned off, names set by hand win over
// NVIDIA's defaults, a driver name that contradicts the mode is refused, and a render without
// the mode is untouched by one with it.
func TestNVIDIACompatOptions(t *testing.T) {
	gpu := func(m map[string]any) map[string]any {
		return mergeValues(nvidiaCompat, map[string]any{"drivers": map[string]any{"gpu": m}})
	}
	spec := pluginDaemonSet(t, gpu(map[string]any{"compat": map[string]any{"nodeLabel": ""}}), "gpu.nvidia.com").Spec.Template.Spec
	if len(spec.NodeSelector) != 0 {
		t.Errorf("nodeLabel empty: node selector %v, want none", spec.NodeSelector)
	}

	r, err := render(Options{Values: gpu(map[string]any{
		"deviceClass":    map[string]any{"name": "nvidia-gpus", "extendedResourceName": "example.com/gpu"},
		"migDeviceClass": map[string]any{"name": "nvidia-migs"},
	})})
	if err != nil {
		t.Fatal(err)
	}
	class := toTyped[resourceapi.DeviceClass](t, r.Find("DeviceClass", "nvidia-gpus"))
	if class.Spec.ExtendedResourceName == nil || *class.Spec.ExtendedResourceName != "example.com/gpu" {
		t.Errorf("extendedResourceName %v, want the one set", class.Spec.ExtendedResourceName)
	}
	if r.Find("DeviceClass", "nvidia-migs") == nil || r.Find("DeviceClass", "gpu.nvidia.com") != nil {
		t.Errorf("classes named by hand: got %d DeviceClasses", len(r.OfKind("DeviceClass")))
	}

	_, err = render(Options{Values: gpu(map[string]any{"driverName": "gpu.example.com"})})
	if want := "drivers.gpu.compat.nvidia publishes the GPUs as NVIDIA's driver, gpu.nvidia.com; drivers.gpu.driverName=gpu.example.com contradicts it"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("contradicting driverName: %v, want an error containing %q", err, want)
	}

	// Under accel-dra's own names beside NVIDIA's driver (besideNVIDIADriver), the plugin is
	// confined to the labelled nodes as in the mode, on top of the GPU node labels.
	beside := func(compat map[string]any) map[string]any {
		return map[string]any{"drivers": map[string]any{"gpu": map[string]any{"compat": compat}}}
	}
	spec = pluginDaemonSet(t, beside(map[string]any{"besideNVIDIADriver": true}), "gpu.accel-dra.io").Spec.Template.Spec
	if diff := cmp.Diff(map[string]string{"accel-dra.io/nvidia-compat": "true"}, spec.NodeSelector); diff != "" {
		t.Errorf("besideNVIDIADriver: nodeSelector (-want +got):\n%s", diff)
	}
	if spec.Affinity == nil || !cmp.Equal(paused(gpuNodes), spec.Affinity.NodeAffinity) {
		t.Errorf("besideNVIDIADriver: the GPU node labels no longer apply: %+v", spec.Affinity)
	}
	spec = pluginDaemonSet(t, beside(map[string]any{"besideNVIDIADriver": true, "nodeLabel": ""}), "gpu.accel-dra.io").Spec.Template.Spec
	if len(spec.NodeSelector) != 0 {
		t.Errorf("besideNVIDIADriver, nodeLabel empty: node selector %v, want none", spec.NodeSelector)
	}

	r = renderSet(t, valueSets["default"])
	if r.Find("DeviceClass", "gpu.accel-dra.io") == nil || r.Find("DeviceClass", "gpu.nvidia.com") != nil {
		t.Error("a render without the compatibility mode has NVIDIA's class")
	}
	if _, err := render(Options{Values: gpu(map[string]any{"compat": map[string]any{"nvidia": "yes"}})}); err == nil {
		t.Error("a non-boolean compat.nvidia passed the schema")
	}
}
