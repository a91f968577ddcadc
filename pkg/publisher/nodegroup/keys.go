// Package nodegroup computes the annotations that describe a Cluster API node group to the
// Cluster Autoscaler besides the DRA template itself (package template): the
// `capacity.cluster-autoscaler.kubernetes.io/` keys that released autoscalers read (cpu, memory,
// ephemeral disk, max pods, labels, taints, and the DRA driver and GPU count of their built-in
// DRA template), plus the template publisher's own bookkeeping keys.
//
// It also goes the other way, for `accelctl simulate`: from annotations to the template node and
// to the ResourceSlice the autoscaler invents from `dra-driver` and `gpu-count`.
//
// docs/template-publisher.md is the contract for these keys.
package nodegroup

import "github.com/accel-dra/accel-dra/pkg/template"

// Keys the Cluster Autoscaler's clusterapi provider reads from a MachineDeployment or MachineSet
// (see /docs/template-publisher.md for the value formats).
const (
	CapacityPrefix   = "capacity.cluster-autoscaler.kubernetes.io/"
	CPUKey           = CapacityPrefix + "cpu"
	MemoryKey        = CapacityPrefix + "memory"
	EphemeralDiskKey = CapacityPrefix + "ephemeral-disk"
	MaxPodsKey       = CapacityPrefix + "maxPods"
	LabelsKey        = CapacityPrefix + "labels"
	TaintsKey        = CapacityPrefix + "taints"
	DRADriverKey     = CapacityPrefix + "dra-driver"
	GPUCountKey      = CapacityPrefix + "gpu-count"
	// DRAPoolKey names the ResourcePool of the dra-driver's devices on the template node, as
	// proposed with dra-driver (kubernetes/autoscaler#7724). Nodes name their pools after
	// themselves, which a template cannot know, so the value is a stand-in that is the same for
	// every node of a shape: the driver name plus the template's pool suffix (see DRA).
	DRAPoolKey = CapacityPrefix + "dra-pool"
)

// The publisher's own keys, in the template format's domain. They are not part of the template
// format (docs/template-format.md); readers of templates ignore them.
const (
	// SourceAnnotation says where the group's template came from: SourceNodes, SourceSeed, or
	// SourceCopyPrefix followed by "<namespace>/<name>" of the group it was copied from. The
	// publisher never replaces a template that came from the group's own nodes with a seed or a
	// copy; remove this annotation to allow that.
	SourceAnnotation = template.AnnotationPrefix + "source"
	// CopyFromAnnotation, set by an operator on a MachineDeployment (or bare MachineSet) as
	// "[<namespace>/]<name>" of another MachineDeployment, makes the publisher copy that group's
	// template and capacity keys while this group has no nodes of its own.
	CopyFromAnnotation = template.AnnotationPrefix + "copy-from"
	// SeedAnnotation, set by an operator on a node group as the name of one of the
	// publisher's seeds (--seeds-dir), makes the publisher write that seed's template and
	// capacity keys while the group has no template from nodes of its own.
	SeedAnnotation = template.AnnotationPrefix + "seed"
	// DivergenceAnnotation, written by the publisher when the first nodes of a group differ
	// from the template the group had (a seed or a copy; docs/template-publisher.md), says how,
	// in one line; it stays until someone removes it, for alerts.
	DivergenceAnnotation = template.AnnotationPrefix + "divergence"
	// MachineTemplateAnnotation records what the group's template describes: the
	// infrastructure machine template (MachineTemplateRef) of the group's machines when the
	// publisher took the template from its nodes, or of the group when it wrote a seed or a
	// copy. A group at zero whose infrastructure template is no longer this one has a stale
	// template (docs/template-publisher.md, "A machine type changed at zero").
	MachineTemplateAnnotation = template.AnnotationPrefix + "machine-template"
)

// DefaultGPUDriver is the driver dra-driver and gpu-count describe, by default, for a group
// with whole devices of more than one driver (DRA); any other group's keys name the driver of
// its whole devices.
const DefaultGPUDriver = "gpu.accel-dra.io"

// Values of SourceAnnotation.
const (
	SourceNodes      = "nodes"
	SourceSeed       = "seed"
	SourceCopyPrefix = "copy-from:"
)

// TemplateKeys hold the group's template node: the template format's annotations (package
// template) and the same ResourceSlices in the key proposed to the autoscaler
// (DRAResourceSlicesKey). They are written, kept and copied together.
var TemplateKeys = []string{
	template.VersionAnnotation,
	template.HashAnnotation,
	template.EncodingAnnotation,
	template.ResourceSlicesAnnotation,
	DRAResourceSlicesKey,
}

// ShapeKeys are the capacity keys that describe the machine rather than where it runs; a copy
// from another group (CopyFromAnnotation) takes these but not labels and taints, which are
// usually specific to a group.
var ShapeKeys = []string{CPUKey, MemoryKey, EphemeralDiskKey, MaxPodsKey, DRADriverKey, DRAPoolKey, GPUCountKey}

// ManagedKeys are all keys the publisher may write. It owns them (server-side apply, field
// manager accel-dra-template-publisher) and leaves every other annotation alone.
var ManagedKeys = append(append(append([]string{}, TemplateKeys...),
	CPUKey, MemoryKey, EphemeralDiskKey, MaxPodsKey, LabelsKey, TaintsKey, DRADriverKey, DRAPoolKey, GPUCountKey),
	SourceAnnotation, DivergenceAnnotation, MachineTemplateAnnotation)

// IsManagedKey reports whether k is one of ManagedKeys.
func IsManagedKey(k string) bool {
	for _, m := range ManagedKeys {
		if m == k {
			return true
		}
	}
	return false
}
