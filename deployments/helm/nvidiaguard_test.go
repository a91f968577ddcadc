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

// TestNVIDIAGuard: where NVIDIA's DRA driver runs (its DeviceClass, or its chart's kubelet
// plugin DaemonSet), installing accel-dra under its own names would publish every GPU twice:
// the chart refuses, naming what it found and the two ways out, unless the compatibility mode
// takes NVIDIA's place or the user states a node-by-node move. A class of this release, an
// NPU-only install and NVIDIA's device plugin (not a DRA driver) are no reason.
func TestNVIDIAGuard(t *testing.T) {
	nvidiaClass := object("resource.k8s.io/v1", "DeviceClass", "", "gpu.nvidia.com", nil, map[string]string{"meta.helm.sh/release-name": "nvidia-dra-driver-gpu"})
	ownClass := object("resource.k8s.io/v1", "DeviceClass", "", "gpu.nvidia.com", nil, map[string]string{"meta.helm.sh/release-name": DefaultReleaseName})
	nvidiaPlugin := object("apps/v1", "DaemonSet", "nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-kubelet-plugin", map[string]string{"app.kubernetes.io/name": "nvidia-dra-driver-gpu"}, nil)
	devicePlugin := object("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset", map[string]string{"app.kubernetes.io/name": "nvidia-device-plugin"}, nil)
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
