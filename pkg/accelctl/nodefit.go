package accelctl

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// podNodeMismatch says why the scheduler would not put pod on the template node whatever its
// devices: the pod's nodeSelector and required node affinity do not match the node's labels (a
// pod selecting kubernetes.io/arch=arm64 and a group of amd64 machines, say), or the node has a
// NoSchedule or NoExecute taint the pod does not tolerate. It uses the scheduler's own matching
// (k8s.io/component-helpers). "" when the pod could go there, or when there is no pod.
func podNodeMismatch(pod *corev1.Pod, node *corev1.Node) string {
	if pod == nil {
		return ""
	}
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	switch {
	case err != nil:
		return fmt.Sprintf("pod %s: invalid node affinity: %v", pod.Name, err)
	case !ok:
		return fmt.Sprintf("pod %s: its node selector or required node affinity does not match the group's template node (labels %s)", pod.Name, labelString(node.Labels))
	}
	taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, true)
	if untolerated {
		return fmt.Sprintf("pod %s does not tolerate the group's taint %s", pod.Name, taint.ToString())
	}
	return ""
}

func labelString(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
