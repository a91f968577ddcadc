package accelctl

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Objects are the objects of a manifest file that simulate understands.
type Objects struct {
	Claims        []*resourceapi.ResourceClaim
	Templates     []*resourceapi.ResourceClaimTemplate
	Pods          []*corev1.Pod
	DeviceClasses []*resourceapi.DeviceClass
}

// ParseObjects reads a YAML or JSON manifest of one or more documents (also v1 Lists) holding
// ResourceClaims, ResourceClaimTemplates, Pods and DeviceClasses. Other kinds are errors.
func ParseObjects(data []byte) (*Objects, error) {
	out := &Objects{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for i := 0; ; i++ {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(raw.Raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw.Raw), []byte("null")) {
			continue
		}
		if err := out.add(raw.Raw); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
	}
	return out, nil
}

func (o *Objects) add(raw []byte) error {
	obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		return err
	}
	switch obj := obj.(type) {
	case *resourceapi.ResourceClaim:
		o.Claims = append(o.Claims, obj)
	case *resourceapi.ResourceClaimTemplate:
		o.Templates = append(o.Templates, obj)
	case *corev1.Pod:
		o.Pods = append(o.Pods, obj)
	case *resourceapi.DeviceClass:
		o.DeviceClasses = append(o.DeviceClasses, obj)
	case *corev1.List:
		for _, item := range obj.Items {
			if err := o.add(item.Raw); err != nil {
				return err
			}
		}
	case *resourceapi.DeviceClassList:
		for i := range obj.Items {
			o.DeviceClasses = append(o.DeviceClasses, &obj.Items[i])
		}
	default:
		return fmt.Errorf("unsupported kind %s (want ResourceClaim, ResourceClaimTemplate, Pod or DeviceClass, of resource.k8s.io/v1 and v1)", gvk.Kind)
	}
	return nil
}

// ClaimsToAllocate returns the claims that must all be allocated on one node: with a Pod, the
// claims its spec.resourceClaims name (templates become claims, as the controller-manager
// makes them); without one, every ResourceClaim and ResourceClaimTemplate of the file. Each
// claim gets a UID and a namespace, which the allocator needs.
func (o *Objects) ClaimsToAllocate() ([]*resourceapi.ResourceClaim, error) {
	fromTemplate := func(t *resourceapi.ResourceClaimTemplate, name string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.Namespace, Labels: t.Spec.Labels, Annotations: t.Spec.Annotations},
			Spec:       *t.Spec.Spec.DeepCopy(),
		}
	}
	var claims []*resourceapi.ResourceClaim
	switch len(o.Pods) {
	case 0:
		for _, c := range o.Claims {
			claims = append(claims, c.DeepCopy())
		}
		for _, t := range o.Templates {
			claims = append(claims, fromTemplate(t, t.Name))
		}
	case 1:
		pod := o.Pods[0]
		if len(pod.Spec.ResourceClaims) == 0 {
			return nil, fmt.Errorf("pod %s has no spec.resourceClaims", pod.Name)
		}
		for _, pc := range pod.Spec.ResourceClaims {
			switch {
			case pc.ResourceClaimName != nil:
				c := findByName(o.Claims, *pc.ResourceClaimName)
				if c == nil {
					return nil, fmt.Errorf("pod %s: ResourceClaim %s is not in the file", pod.Name, *pc.ResourceClaimName)
				}
				claims = append(claims, c.DeepCopy())
			case pc.ResourceClaimTemplateName != nil:
				t := findByName(o.Templates, *pc.ResourceClaimTemplateName)
				if t == nil {
					return nil, fmt.Errorf("pod %s: ResourceClaimTemplate %s is not in the file", pod.Name, *pc.ResourceClaimTemplateName)
				}
				claims = append(claims, fromTemplate(t, pod.Name+"-"+pc.Name))
			default:
				return nil, fmt.Errorf("pod %s: resourceClaims entry %s names no claim or template", pod.Name, pc.Name)
			}
		}
	default:
		return nil, fmt.Errorf("%d pods in the file; simulate one pod at a time", len(o.Pods))
	}
	if len(claims) == 0 {
		return nil, errors.New("no ResourceClaim, ResourceClaimTemplate or Pod in the file")
	}
	for i, c := range claims {
		if c.Namespace == "" {
			c.Namespace = metav1.NamespaceDefault
		}
		if c.Name == "" {
			c.Name = fmt.Sprintf("claim-%d", i)
		}
		c.UID = types.UID(fmt.Sprintf("accelctl-simulate-%d", i))
		c.Status = resourceapi.ResourceClaimStatus{}
		setDefaults(c)
	}
	return claims, nil
}

// setDefaults applies the API server's defaults for resource.k8s.io/v1 claims
// (k8s.io/kubernetes/pkg/apis/resource/v1), which a claim read from a file lacks and the
// allocator relies on: allocation mode ExactCount with count 1, toleration operator Equal.
func setDefaults(c *resourceapi.ResourceClaim) {
	mode := func(m *resourceapi.DeviceAllocationMode, count *int64) {
		if *m == "" {
			*m = resourceapi.DeviceAllocationModeExactCount
		}
		if *m == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
			*count = 1
		}
	}
	tolerations := func(ts []resourceapi.DeviceToleration) {
		for i := range ts {
			if ts[i].Operator == "" {
				ts[i].Operator = resourceapi.DeviceTolerationOpEqual
			}
		}
	}
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			mode(&r.Exactly.AllocationMode, &r.Exactly.Count)
			tolerations(r.Exactly.Tolerations)
		}
		for j := range r.FirstAvailable {
			mode(&r.FirstAvailable[j].AllocationMode, &r.FirstAvailable[j].Count)
			tolerations(r.FirstAvailable[j].Tolerations)
		}
	}
}

func findByName[T metav1.Object](items []T, name string) T {
	for _, it := range items {
		if it.GetName() == name {
			return it
		}
	}
	var zero T
	return zero
}
