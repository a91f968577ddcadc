package nodegroup

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultArch and DefaultOS are the kubernetes.io/arch and kubernetes.io/os the autoscaler's
// clusterapi provider gives a template node whose labels do not say (its
// CAPI_SCALE_ZERO_DEFAULT_ARCH, when unset, and linux). An arm64 group must therefore carry
// kubernetes.io/arch in LabelsKey, or pods that select arm64 never scale it up; Capacity carries
// the label from the group's nodes, where the kubelet sets it.
const (
	DefaultArch = "amd64"
	DefaultOS   = "linux"
)

// TemplateNode returns a fresh Node named name with what the capacity keys of a group say: the
// labels of LabelsKey plus kubernetes.io/hostname (and kubernetes.io/arch and kubernetes.io/os
// as DefaultArch and DefaultOS when LabelsKey lacks them), the taints of TaintsKey, and cpu,
// memory, ephemeral-storage and pods as both capacity and allocatable (as the autoscaler's
// clusterapi provider builds its template node). It is Ready.
func TemplateNode(name string, annotations map[string]string) (*corev1.Node, error) {
	labels, err := ParseLabels(annotations[LabelsKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", LabelsKey, err)
	}
	if _, ok := labels[corev1.LabelArchStable]; !ok {
		labels[corev1.LabelArchStable] = DefaultArch
	}
	if _, ok := labels[corev1.LabelOSStable]; !ok {
		labels[corev1.LabelOSStable] = DefaultOS
	}
	taints, err := ParseTaints(annotations[TaintsKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", TaintsKey, err)
	}
	labels[corev1.LabelHostname] = name
	resources := corev1.ResourceList{}
	for key, res := range map[string]corev1.ResourceName{
		CPUKey:           corev1.ResourceCPU,
		MemoryKey:        corev1.ResourceMemory,
		EphemeralDiskKey: corev1.ResourceEphemeralStorage,
		MaxPodsKey:       corev1.ResourcePods,
	} {
		v, ok := annotations[key]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		resources[res] = q
	}
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}, nil
}

// ParseLabels parses the value of LabelsKey ("k1=v1,k2=v2").
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q is not key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// ParseTaints parses the value of TaintsKey ("key=value:Effect,key:Effect").
func ParseTaints(s string) ([]corev1.Taint, error) {
	if s == "" {
		return nil, nil
	}
	var out []corev1.Taint
	for _, t := range strings.Split(s, ",") {
		kv, effect, ok := strings.Cut(t, ":")
		if !ok {
			return nil, fmt.Errorf("taint %q has no effect", t)
		}
		switch e := corev1.TaintEffect(effect); e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("taint %q: unknown effect %q", t, e)
		}
		k, v, _ := strings.Cut(kv, "=")
		if k == "" {
			return nil, fmt.Errorf("taint %q has no key", t)
		}
		out = append(out, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)})
	}
	return out, nil
}

// BuiltinSlices returns the ResourceSlice that the autoscaler's clusterapi provider invents for
// a template node from DRADriverKey and GPUCountKey: one pool named after the node with devices
// gpu-0 … gpu-<n-1>, each with the single attribute type="gpu" (no capacity, no other
// attribute). The pool announces one slice, as providers with the resourceSliceCount fix do;
// older ones leave it at 0 and then no claim fits. It returns nil when either key is missing.
func BuiltinSlices(annotations map[string]string, nodeName string) ([]*resourceapi.ResourceSlice, error) {
	driver, ok := annotations[DRADriverKey]
	count, ok2 := annotations[GPUCountKey]
	if !ok || !ok2 {
		return nil, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%s: %q is not a count", GPUCountKey, count)
	}
	devices := make([]resourceapi.Device, n)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name:       "gpu-" + strconv.Itoa(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: new("gpu")}},
		}
	}
	return []*resourceapi.ResourceSlice{{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-builtin-" + driver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			NodeName: new(nodeName),
			Pool:     resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}}, nil
}
