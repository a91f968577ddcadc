//go:build e2e

package e2e

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// claimTemplate builds a ResourceClaimTemplate with one request "dev" of a class.
func claimTemplate(ns, name, class string, count int64, selectors []string, constraint string, config string) *resourceapi.ResourceClaimTemplate {
	req := resourceapi.DeviceRequest{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	for _, s := range selectors {
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	spec := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}
	if constraint != "" {
		attr := resourceapi.FullyQualifiedName(constraint)
		spec.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"dev"}, MatchAttribute: &attr}}
	}
	if config != "" {
		spec.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: class, Parameters: runtime.RawExtension{Raw: []byte(config)}},
		}}}
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: spec}},
	}
}

// podWithTemplate builds a pod whose container "ctr" uses a claim made from a template.
func podWithTemplate(ns, name, template string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "acc", ResourceClaimTemplateName: &template}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "acc"}}},
			}},
		},
	}
}

// attrString reads a string attribute of a device in slices.
func deviceAttrs(slices []resourceapi.ResourceSlice, device string) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, error) {
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				return d.Attributes, d.Capacity, nil
			}
		}
	}
	return nil, nil, fmt.Errorf("device %s not in slices", device)
}
