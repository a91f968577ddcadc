package helm

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// cluster answers the chart's lookups from objects, as the API server would at helm install.
type cluster struct{ client dynamic.Interface }

var lookupResources = map[string]struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	"resource.k8s.io/v1/DeviceClass": {schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}, false},
	"apps/v1/DaemonSet":              {schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, true},
}

func newCluster(objs ...runtime.Object) cluster {
	lists := map[schema.GroupVersionResource]string{}
	for key, r := range lookupResources {
		lists[r.gvr] = key[strings.LastIndex(key, "/")+1:] + "List"
	}
	return cluster{dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, objs...)}
}

func (c cluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	r, ok := lookupResources[apiVersion+"/"+kind]
	if !ok {
		return c.client.Resource(schema.GroupVersionResource{Resource: strings.ToLower(kind) + "s"}), false, nil
	}
	return c.client.Resource(r.gvr), r.namespaced, nil
}

func object(apiVersion, kind, namespace, name string, labels, annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetLabels(labels)
	u.SetAnnotations(annotations)
	return u
}

// nvidiaDaemonSet is NVIDIA's kubelet plugin DaemonSet as its chart (v25.12.0,
// templates/kubeletplugin.yaml) renders it under name: one container per enabled plugin, each
// a bash script that ends starting the plugin.
func nvidiaDaemonSet(namespace, name string, containers ...string) *unstructured.Unstructured {
	u := object("apps/v1", "DaemonSet", namespace, name+"-kubelet-plugin", map[string]string{"app.kubernetes.io/name": name}, nil)
	binary := map[string]string{"gpus": "gpu-kubelet-plugin", "compute-domains": "compute-domain-kubelet-plugin"}
	var list []any
	for _, c := range containers {
		list = append(list, map[string]any{"name": c, "command": []any{"bash", "-c"}, "args": []any{"set -e\n" + binary[c] + " -v $(LOG_VERBOSITY)\n"}})
	}
	if err := unstructured.SetNestedSlice(u.Object, list, "spec", "template", "spec", "containers"); err != nil {
		panic(err)
	}
	return u
}

// TestNVIDIAGuard: where NVIDIA's DRA driver runs (its DeviceClass, or its chart's kubelet
// plugin DaemonSet), installing accel-dra under its own names would publish every GPU twice:
// the chart refuses, naming what it found and the two ways out, unless the compatibility mode
// takes NVIDIA's place or the user states a node-by-node move. A class of this release, an
// NPU-only install, NVIDIA's device plugin (not a DRA driver) and NVIDIA's chart kept for
// ComputeDomains only (no GPU plugin) are no reason; NVIDIA's GPU plugin is found whatever its
// chart's name.
func TestNVIDIAGuard(t *testing.T) {
	nvidiaClass := object("resource.k8s.io/v1", "DeviceClass", "", "gpu.nvidia.com", nil, map[string]string{"meta.helm.sh/release-name": "nvidia-dra-driver-gpu"})
	ownClass := object("resource.k8s.io/v1", "DeviceClass", "", "gpu.nvidia.com", nil, map[string]string{"meta.helm.sh/release-name": DefaultReleaseName})
	nvidiaPlugin := nvidiaDaemonSet("nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu", "compute-domains", "gpus")
	// NVIDIA's chart with nameOverride, or under its new name (kubernetes-sigs/dra-driver-nvidia-gpu).
	renamed := nvidiaDaemonSet("nvidia-gpus", "my-gpus", "gpus")
	// NVIDIA's chart with resources.gpus.enabled=false, kept for ComputeDomains.
	computeDomainsOnly := nvidiaDaemonSet("nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu", "compute-domains")
	devicePlugin := object("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset", map[string]string{"app.kubernetes.io/name": "nvidia-device-plugin"}, nil)
	_ = unstructured.SetNestedSlice(devicePlugin.Object, []any{map[string]any{"name": "nvidia-device-plugin", "command": []any{"nvidia-device-plugin"}}}, "spec", "template", "spec", "containers")
	for _, tc := range []struct {
		name   string
		objs   []runtime.Object
		values map[string]any
		err    string // "" for no refusal
	}{
		{name: "no NVIDIA driver", objs: []runtime.Object{devicePlugin}},
		{name: "NVIDIA's class", objs: []runtime.Object{nvidiaClass}, err: "NVIDIA's DRA driver runs in this cluster (DeviceClass gpu.nvidia.com)"},
		{name: "NVIDIA's kubelet plugin", objs: []runtime.Object{nvidiaPlugin}, err: "(DaemonSet nvidia-dra-driver-gpu/nvidia-dra-driver-gpu-kubelet-plugin)"},
		{name: "both", objs: []runtime.Object{nvidiaClass, nvidiaPlugin}, err: "(DeviceClass gpu.nvidia.com, DaemonSet nvidia-dra-driver-gpu/nvidia-dra-driver-gpu-kubelet-plugin): accel-dra's GPU driver gpu.accel-dra.io would publish the same GPUs a second time"},
		{name: "NVIDIA's kubelet plugin under another name", objs: []runtime.Object{renamed}, err: "(DaemonSet nvidia-gpus/my-gpus-kubelet-plugin)"},
		{name: "NVIDIA's chart for ComputeDomains only", objs: []runtime.Object{computeDomainsOnly}},
		{name: "this release's class", objs: []runtime.Object{ownClass}},
		{name: "compatibility mode", objs: []runtime.Object{nvidiaClass, nvidiaPlugin}, values: nvidiaCompat},
		{name: "node-by-node move stated", objs: []runtime.Object{nvidiaClass, nvidiaPlugin}, values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"compat": map[string]any{"besideNVIDIADriver": true}}}}},
		{name: "NPU only", objs: []runtime.Object{nvidiaClass, nvidiaPlugin}, values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"enabled": false}, "npu": map[string]any{"enabled": true}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(Options{Values: tc.values, Lookup: newCluster(tc.objs...)})
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			case tc.err != "" && !strings.Contains(err.Error(), "drivers.gpu.compat.besideNVIDIADriver=true"):
				t.Errorf("the refusal does not say how to proceed: %v", err)
			}
		})
	}
}
