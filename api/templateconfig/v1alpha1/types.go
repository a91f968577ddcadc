// Package v1alpha1 is the operator-facing seed of a node group template: a small, CRD-less
// object kept in a file and given to `accelctl template seed`, for a Cluster API node group that
// never had a node (so the template publisher has nothing to mirror) and that cannot copy
// another group's template (the template.accel-dra.io/copy-from annotation).
//
// It is versioned like a Kubernetes API because operators keep these files in Git. See
// docs/template-publisher.md ("Seeding a group").
package v1alpha1

import (
	"bytes"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// Group, Version and Kind of the seed.
const (
	GroupName = "templateconfig.accel-dra.io"
	Version   = "v1alpha1"
	Kind      = "NodeGroupSeed"
)

// APIVersion is the seed's apiVersion.
var APIVersion = GroupName + "/" + Version

// NodeGroupSeed describes a node of a group that has none yet: what the Cluster Autoscaler
// needs to simulate one. Exactly one of ResourceSlices and Template gives the devices.
type NodeGroupSeed struct {
	metav1.TypeMeta `json:",inline"`

	// Capacity of a node of the group; cpu and memory are required (the autoscaler ignores a
	// group at zero without them).
	Capacity Capacity `json:"capacity"`
	// Labels a node of the group has (carried in capacity.cluster-autoscaler.kubernetes.io/labels).
	Labels map[string]string `json:"labels,omitempty"`
	// Taints a node of the group has (capacity.cluster-autoscaler.kubernetes.io/taints).
	Taints []corev1.Taint `json:"taints,omitempty"`

	// ResourceSlices of one node of this shape, for example the items of
	// `kubectl get resourceslices --field-selector spec.nodeName=<node> -o yaml` on another
	// cluster. Slices without spec.nodeName are taken as one node's.
	ResourceSlices []resourceapi.ResourceSlice `json:"resourceSlices,omitempty"`
	// Template is a node group template document (template.accel-dra.io/v1alpha1
	// NodeGroupTemplate, docs/template-format.md), for example decoded from another group's
	// annotation with `accelctl template show -o template`.
	Template *runtime.RawExtension `json:"template,omitempty"`
	// IdentityAttributes overrides the attributes whose values become placeholders when the
	// template is built from ResourceSlices (default: the publisher's default).
	IdentityAttributes []string `json:"identityAttributes,omitempty"`
}

// Capacity is the size of a node.
type Capacity struct {
	CPU           *resource.Quantity `json:"cpu,omitempty"`
	Memory        *resource.Quantity `json:"memory,omitempty"`
	EphemeralDisk *resource.Quantity `json:"ephemeralDisk,omitempty"`
	MaxPods       *int32             `json:"maxPods,omitempty"`
}

// Decode parses a seed (YAML or JSON) strictly: unknown or duplicate fields are errors, because
// a misspelt field silently ignored would give the autoscaler a wrong node. It validates the
// result.
func Decode(data []byte) (*NodeGroupSeed, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty node group seed")
	}
	s := &NodeGroupSeed{}
	if err := yaml.UnmarshalStrict(data, s); err != nil {
		return nil, fmt.Errorf("node group seed: %w", err)
	}
	if s.APIVersion != APIVersion || s.Kind != Kind {
		return nil, fmt.Errorf("node group seed: apiVersion %q kind %q, want %s %s", s.APIVersion, s.Kind, APIVersion, Kind)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("node group seed: %w", err)
	}
	return s, nil
}

// Validate checks what Decode cannot: required fields and choices. The devices themselves are
// checked when the template is built.
func (s *NodeGroupSeed) Validate() error {
	var errs field.ErrorList
	capPath := field.NewPath("capacity")
	positive := func(q *resource.Quantity, name string, required bool) {
		switch {
		case q == nil && required:
			errs = append(errs, field.Required(capPath.Child(name), "the autoscaler ignores a group at zero without it"))
		case q != nil && q.Sign() <= 0:
			errs = append(errs, field.Invalid(capPath.Child(name), q.String(), "must be positive"))
		}
	}
	positive(s.Capacity.CPU, "cpu", true)
	positive(s.Capacity.Memory, "memory", true)
	positive(s.Capacity.EphemeralDisk, "ephemeralDisk", false)
	if p := s.Capacity.MaxPods; p != nil && *p <= 0 {
		errs = append(errs, field.Invalid(capPath.Child("maxPods"), *p, "must be positive"))
	}
	for i, t := range s.Taints {
		p := field.NewPath("taints").Index(i)
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}))
		}
		if t.Key == "" {
			errs = append(errs, field.Required(p.Child("key"), ""))
		}
	}
	switch {
	case len(s.ResourceSlices) > 0 && s.Template != nil:
		errs = append(errs, field.Forbidden(field.NewPath("template"), "give either resourceSlices or template, not both"))
	case len(s.ResourceSlices) == 0 && s.Template == nil:
		errs = append(errs, field.Required(field.NewPath("resourceSlices"), "give the devices as resourceSlices or template"))
	}
	return errs.ToAggregate()
}
