package nodegroup

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/pkg/template"
)

func node(name string, labels map[string]string, taints []corev1.Taint, alloc, capacity corev1.ResourceList) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Allocatable: alloc, Capacity: capacity},
	}
}

func resources(cpu, mem, disk, pods string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem, corev1.ResourceEphemeralStorage: disk, corev1.ResourcePods: pods} {
		if v != "" {
			out[name] = resource.MustParse(v)
		}
	}
	return out
}

func TestCapacity(t *testing.T) {
	groupLabels := map[string]string{
		"kubernetes.io/arch":               "amd64",
		"node.kubernetes.io/instance-type": "p5.48xlarge",
		"node.cluster.x-k8s.io/pool":       "gpu",
	}
	withLabels := func(extra map[string]string) map[string]string {
		l := maps.Clone(groupLabels)
		maps.Copy(l, extra)
		return l
	}
	gpuTaint := corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	dedicated := corev1.Taint{Key: "dedicated", Effect: corev1.TaintEffectNoExecute}
	transient := []corev1.Taint{
		{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule},
		{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule},
	}

	for name, tc := range map[string]struct {
		nodes []*corev1.Node
		want  map[string]string
	}{
		"no nodes": {want: map[string]string{}},
		"one node: allocatable, carried labels and taints only": {
			nodes: []*corev1.Node{node("n1",
				withLabels(map[string]string{
					"kubernetes.io/hostname":                "n1",
					"node-role.kubernetes.io/worker":        "",
					"cluster.x-k8s.io/cluster-name":         "c1",
					"topology.cluster.x-k8s.io/owned":       "",
					"machine.cluster.x-k8s.io/some-machine": "x",
				}),
				append([]corev1.Taint{gpuTaint, dedicated}, transient...),
				resources("191500m", "2000Gi", "900Gi", "110"), resources("192", "2048Gi", "1Ti", "110"))},
			want: map[string]string{
				CPUKey: "191500m", MemoryKey: "2000Gi", EphemeralDiskKey: "900Gi", MaxPodsKey: "110",
				LabelsKey: "kubernetes.io/arch=amd64,node.cluster.x-k8s.io/pool=gpu,node.kubernetes.io/instance-type=p5.48xlarge",
				TaintsKey: "dedicated:NoExecute,nvidia.com/gpu=present:NoSchedule",
			},
		},
		"capacity when allocatable lacks a resource": {
			nodes: []*corev1.Node{node("n1", nil, nil, resources("8", "", "", ""), resources("16", "32Gi", "", "250"))},
			want:  map[string]string{CPUKey: "8", MemoryKey: "32Gi", MaxPodsKey: "250"},
		},
		"several nodes: smallest values, common labels and taints": {
			nodes: []*corev1.Node{
				node("n1", withLabels(map[string]string{"kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "a"}),
					[]corev1.Taint{gpuTaint, dedicated}, resources("8", "64Gi", "100Gi", "110"), nil),
				node("n2", withLabels(map[string]string{"kubernetes.io/hostname": "n2", "topology.kubernetes.io/zone": "b"}),
					[]corev1.Taint{gpuTaint}, resources("7900m", "65Gi", "90Gi", "64"), nil),
				node("n3", withLabels(map[string]string{"kubernetes.io/hostname": "n3", "topology.kubernetes.io/zone": "a"}),
					[]corev1.Taint{gpuTaint, transient[0]}, resources("8", "63Gi", "100Gi", "110"), nil),
			},
			want: map[string]string{
				CPUKey: "7900m", MemoryKey: "63Gi", EphemeralDiskKey: "90Gi", MaxPodsKey: "64",
				LabelsKey: "kubernetes.io/arch=amd64,node.cluster.x-k8s.io/pool=gpu,node.kubernetes.io/instance-type=p5.48xlarge",
				TaintsKey: "nvidia.com/gpu=present:NoSchedule",
			},
		},
		"labels that differ in value are dropped": {
			nodes: []*corev1.Node{
				node("n1", map[string]string{"a": "1", "b": "x"}, nil, nil, nil),
				node("n2", map[string]string{"a": "1", "b": "y"}, nil, nil, nil),
			},
			want: map[string]string{LabelsKey: "a=1"},
		},
		"no allocatable at all (node just registered)": {
			nodes: []*corev1.Node{node("n1", nil, nil, nil, nil)},
			want:  map[string]string{},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Capacity(tc.nodes)); diff != "" {
				t.Errorf("Capacity (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTemplateNodeRoundTrip(t *testing.T) {
	n := node("n1", map[string]string{"kubernetes.io/hostname": "n1", "zone": "a", "gpu": "h100"},
		[]corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}, {Key: "dedicated", Effect: corev1.TaintEffectNoExecute}},
		resources("8", "64Gi", "100Gi", "110"), nil)
	ann := Capacity([]*corev1.Node{n})
	got, err := TemplateNode("template-node", ann)
	if err != nil {
		t.Fatal(err)
	}
	// No kubernetes.io/arch on the nodes: the template node gets the autoscaler's defaults.
	wantLabels := map[string]string{"kubernetes.io/hostname": "template-node", "zone": "a", "gpu": "h100", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}
	if diff := cmp.Diff(wantLabels, got.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantTaints := []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoExecute}, {Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	if diff := cmp.Diff(wantTaints, got.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	for name, want := range resources("8", "64Gi", "100Gi", "110") {
		if q := got.Status.Allocatable[name]; q.Cmp(want) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, q.String(), want.String())
		}
	}

	for _, bad := range []map[string]string{
		{LabelsKey: "novalue"},
		{TaintsKey: "k=v"},
		{TaintsKey: "k=v:Sometimes"},
		{CPUKey: "lots"},
	} {
		if _, err := TemplateNode("n", bad); err == nil {
			t.Errorf("TemplateNode(%v): no error", bad)
		}
	}
}

func TestDRAAndBuiltinSlices(t *testing.T) {
	typed := func(typ string, names ...string) []resourceapi.Device {
		var out []resourceapi.Device
		for _, n := range names {
			out = append(out, resourceapi.Device{Name: n, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: new(typ)}}})
		}
		return out
	}
	tmpl := &template.Template{APIVersion: template.APIVersion, Kind: template.Kind, Drivers: []template.Driver{
		{Name: "gpu.accel-dra.io", Devices: typed("gpu", "gpu-0", "gpu-1", "gpu-2")},
		{Name: "npu.accel-dra.io", Devices: typed("npu", "npu-0")},
	}}
	ann := DRA(tmpl, "gpu.accel-dra.io")
	if diff := cmp.Diff(map[string]string{DRADriverKey: "gpu.accel-dra.io", GPUCountKey: "3", DRAPoolKey: "gpu.accel-dra.io"}, ann); diff != "" {
		t.Errorf("DRA (-want +got):\n%s", diff)
	}
	// A driver with two pools of whole devices on the node: gpu-count counts both, no single
	// pool to name. Partitions and devices without a type are not whole devices.
	twoPools := &template.Template{APIVersion: template.APIVersion, Kind: template.Kind, Drivers: []template.Driver{
		{Name: "gpu.accel-dra.io", Devices: append(typed("gpu", "gpu-0"), resourceapi.Device{Name: "untyped"})},
		{Name: "gpu.accel-dra.io", PoolSuffix: "/b", Devices: append(typed("gpu", "gpu-1"), typed("mig", "gpu-1-mig-1g")...)},
		{Name: "gpu.accel-dra.io", PoolSuffix: "/mig", Devices: typed("mig", "gpu-0-mig-1g", "gpu-0-mig-2g")},
	}}
	if diff := cmp.Diff(map[string]string{DRADriverKey: "gpu.accel-dra.io", GPUCountKey: "2"}, DRA(twoPools, "gpu.accel-dra.io")); diff != "" {
		t.Errorf("DRA with two pools (-want +got):\n%s", diff)
	}
	// The one pool with whole devices is named, with its suffix.
	suffixed := &template.Template{APIVersion: template.APIVersion, Kind: template.Kind, Drivers: []template.Driver{
		{Name: "gpu.accel-dra.io", PoolSuffix: "/whole", Devices: typed("gpu", "gpu-0")},
		{Name: "gpu.accel-dra.io", PoolSuffix: "/mig", Devices: typed("mig", "gpu-0-mig-1g")},
	}}
	if diff := cmp.Diff(map[string]string{DRADriverKey: "gpu.accel-dra.io", GPUCountKey: "1", DRAPoolKey: "gpu.accel-dra.io/whole"}, DRA(suffixed, "gpu.accel-dra.io")); diff != "" {
		t.Errorf("DRA with a suffixed pool (-want +got):\n%s", diff)
	}
	onlyMIG := &template.Template{APIVersion: template.APIVersion, Kind: template.Kind, Drivers: []template.Driver{
		{Name: "gpu.accel-dra.io", PoolSuffix: "/mig", Devices: typed("mig", "gpu-0-mig-1g")},
	}}
	if got := DRA(onlyMIG, "gpu.accel-dra.io"); len(got) != 0 {
		t.Errorf("DRA of a node with partitions only = %v, want none", got)
	}

	slices, err := BuiltinSlices(ann, "tn")
	if err != nil {
		t.Fatal(err)
	}
	if len(slices) != 1 || len(slices[0].Spec.Devices) != 3 {
		t.Fatalf("BuiltinSlices = %+v, want one slice with 3 devices", slices)
	}
	s := slices[0]
	if s.Spec.Driver != "gpu.accel-dra.io" || *s.Spec.NodeName != "tn" || s.Spec.Pool.Name != "tn" || s.Spec.Pool.ResourceSliceCount != 1 {
		t.Errorf("BuiltinSlices spec = %+v", s.Spec)
	}
	for i, d := range s.Spec.Devices {
		want := resourceapi.Device{Name: "gpu-" + string(rune('0'+i)), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: new("gpu")}}}
		if diff := cmp.Diff(want, d); diff != "" {
			t.Errorf("device %d (-want +got):\n%s", i, diff)
		}
	}
	if got, err := BuiltinSlices(map[string]string{DRADriverKey: "x"}, "tn"); err != nil || got != nil {
		t.Errorf("BuiltinSlices without gpu-count = %v, %v; want nil, nil", got, err)
	}
	if _, err := BuiltinSlices(map[string]string{DRADriverKey: "x", GPUCountKey: "eight"}, "tn"); err == nil {
		t.Error("BuiltinSlices with a bad count: no error")
	}
}

func TestManagedKeys(t *testing.T) {
	for _, k := range append(append([]string{}, TemplateKeys...), ShapeKeys...) {
		if !IsManagedKey(k) {
			t.Errorf("%s is not managed", k)
		}
	}
	for _, k := range []string{CopyFromAnnotation, "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size", CapacityPrefix + "gpu-type"} {
		if IsManagedKey(k) {
			t.Errorf("%s must not be managed by the publisher", k)
		}
	}
}
