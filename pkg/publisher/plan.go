package publisher

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// Reasons of the problems a node group can have; they are the reasons of the Warning events on
// the group object and the reason label of the conflict metrics.
const (
	// ReasonNodesDisagree: nodes of the group's current revision give different templates. The
	// last good template is kept.
	ReasonNodesDisagree = "TemplateNodesDisagree"
	// ReasonOverBudget: the template does not fit --template-budget-bytes. It is never
	// truncated; the last good template is kept.
	ReasonOverBudget = "TemplateOverBudget"
	// ReasonCopyFromFailed: the group asks to copy another group's template
	// (template.accel-dra.io/copy-from), but that group or its template cannot be read.
	ReasonCopyFromFailed = "TemplateCopyFromFailed"
	// ReasonInvalidSlices: a node's ResourceSlices cannot be made into a template (for example a
	// pool with per-device node selection). That node is left out.
	ReasonInvalidSlices = "TemplateInvalidSlices"
	// ReasonAnnotationConflict: someone else (an operator with kubectl annotate, another
	// controller) set one of the publisher's keys to another value. The publisher does not take
	// it over: it leaves that key (and, for a template key, the whole template) alone until the
	// annotation is removed.
	ReasonAnnotationConflict = "TemplateAnnotationConflict"
	// ReasonWorkloadClusterUnreachable: in management mode, the group's workload cluster cannot
	// be read (no kubeconfig Secret, a bad kubeconfig, or its API server does not answer). The
	// group's annotations are kept as they are.
	ReasonWorkloadClusterUnreachable = "WorkloadClusterUnreachable"
	// ReasonSeedFailed: the group names one of the publisher's seeds
	// (template.accel-dra.io/seed), but the publisher has no such seed, cannot read it, or the
	// group also has a copy-from annotation. Nothing is written.
	ReasonSeedFailed = "TemplateSeedFailed"
)

// Reasons lists every problem reason, for metrics.
var Reasons = []string{ReasonNodesDisagree, ReasonOverBudget, ReasonCopyFromFailed, ReasonInvalidSlices, ReasonAnnotationConflict, ReasonWorkloadClusterUnreachable, ReasonSeedFailed, ReasonTemplateStale}

// NodeInput is one node of a group's current revision and the template of its ResourceSlices.
type NodeInput struct {
	Node *corev1.Node
	// Template is the template of the node's ResourceSlices of the configured drivers, nil when
	// it has none (its plugins have not published yet, or it has no accelerators) or when Err
	// is set.
	Template *template.Template
	// Hash is Template's hash.
	Hash string
	// Err says why the slices could not be templated; template.ErrIncompletePool (wrapped)
	// means a pool is being updated and the node is only skipped for now.
	Err error
}

// CopySource is the group named by the copy-from annotation.
type CopySource struct {
	// Ref is "<namespace>/<name>".
	Ref string
	// Annotations of that group; nil when it does not exist.
	Annotations map[string]string
	// Err is set when the annotation itself is malformed or names the group itself.
	Err error
}

// Input is what the publisher knows about one node group when it decides what to write.
type Input struct {
	// Annotations are the group object's current annotations.
	Annotations map[string]string
	// Owned are the annotation keys the publisher's field manager owns on the object (applied
	// by an earlier write).
	Owned sets.Set[string]
	// Foreign are the publisher's keys (nodegroup.ManagedKeys) that another field manager owns,
	// with that manager's name; the publisher never forces a new value over them. Managers
	// that yield to the publisher (accelctl's seed) are not in it.
	Foreign map[string]string
	// Nodes are the nodes whose Machines belong to the group's current MachineSet.
	Nodes []NodeInput
	// CopyFrom is the group named by the copy-from annotation, nil if there is none.
	CopyFrom *CopySource
	// Seed is the seed named by the seed annotation, nil if there is none.
	Seed *SeedSource
	// MachineTemplate is the infrastructure machine template (MachineTemplateRef) that a
	// template written now describes: of the machines of Nodes, or without nodes of the
	// machines the group would create. Empty when unknown.
	MachineTemplate string
}

// Config are the settings Decide needs.
type Config struct {
	// Budget is the size limit of the template annotations (template.Template.Encode).
	Budget int
	// GPUDriver is the driver dra-driver and gpu-count describe in a group whose template has
	// whole devices of more than one driver; any other group's name the driver of its whole
	// devices (nodegroup.DRA). Empty: no such keys.
	GPUDriver string
	// StalePolicy says what happens to a stale template (stale.go); empty is StaleWithdraw.
	StalePolicy string
}

// Problem is something an operator should know about a group.
type Problem struct {
	Reason  string
	Message string
}

// Plan is the outcome of Decide.
type Plan struct {
	// Apply is the complete set of the publisher's annotations the object should have after a
	// server-side apply: a key the publisher owns and that is not in Apply is removed. Nil
	// when the object already has exactly these values, so that nothing is written.
	Apply map[string]string
	// Desired is what the publisher's keys should be (Apply, also when nothing needs writing).
	Desired map[string]string
	// Changed are the keys Apply sets to a new value or removes, sorted.
	Changed []string
	// Problems found.
	Problems []Problem
	// Pending is set when a node was skipped because a pool of it is being updated; try again
	// later.
	Pending bool
	// TemplateBytes is the size (keys plus values) of the template annotations the object has
	// after the write.
	TemplateBytes int
	// Divergence is set when the write replaces a template that did not come from the group's
	// nodes and that differs from theirs (divergence.go).
	Divergence *Divergence
}

// Decide works out the publisher's annotations for one group. It is a pure function; see
// docs/template-publisher.md for the rules it implements.
//
//   - With nodes at the current revision: the capacity keys come from all of them. The
//     template comes from the nodes that have slices; if they all give the same template it is
//     encoded within the budget and written with dra-driver/gpu-count and source "nodes". If
//     they disagree, or the template is over budget, the last good template (and its
//     dra-driver/gpu-count) is kept and a problem is reported.
//   - Without nodes (never scaled up, or scaled to zero): nothing is written, except that a
//     group with a copy-from annotation whose template did not come from its own nodes gets
//     the other group's template and shape keys (not labels and taints), and a group with a
//     seed annotation whose template did not come from its own nodes gets the seed's
//     annotations, the same that `accelctl template seed` writes.
//
// cpu, memory, ephemeral-disk and maxPods are never removed: when no node reports them the
// current values are kept.
func Decide(in Input, cfg Config) Plan {
	cur := in.Annotations
	desired := map[string]string{}
	var p Plan
	keep := func(keys ...string) { keepOwned(in, desired, keys...) }
	set := func(m map[string]string) { maps.Copy(desired, m) }
	keepTemplate := func() {
		keep(nodegroup.TemplateKeys...)
		keep(nodegroup.DRADriverKey, nodegroup.DRAPoolKey, nodegroup.GPUCountKey, nodegroup.SourceAnnotation, nodegroup.MachineTemplateAnnotation)
	}
	// A divergence report stays until someone removes it (divergence.go).
	keep(nodegroup.DivergenceAnnotation)

	if len(in.Nodes) == 0 {
		if was := staleMachineTemplate(in); was != "" {
			// The machines the autoscaler would create are not those the template
			// describes (stale.go).
			return decideStale(p, in, cfg, desired, was)
		}
		if (in.CopyFrom == nil && in.Seed == nil) || cur[nodegroup.SourceAnnotation] == nodegroup.SourceNodes {
			// A group at zero keeps what it has: the autoscaler needs it most now.
			p.TemplateBytes = templateBytes(cur)
			return p
		}
		p, _ = seedOrCopy(p, in, cfg, desired)
		return p
	}

	nodes := make([]*corev1.Node, 0, len(in.Nodes))
	byHash := map[string][]string{}
	var first *template.Template
	var invalid []string
	for _, n := range in.Nodes {
		nodes = append(nodes, n.Node)
		switch {
		case errors.Is(n.Err, template.ErrIncompletePool):
			p.Pending = true
		case n.Err != nil:
			invalid = append(invalid, fmt.Sprintf("%s: %v", n.Node.Name, n.Err))
		case n.Template != nil:
			if len(byHash) == 0 {
				first = n.Template
			}
			byHash[n.Hash] = append(byHash[n.Hash], n.Node.Name)
		}
	}
	if len(invalid) > 0 {
		slices.Sort(invalid)
		p.Problems = append(p.Problems, Problem{ReasonInvalidSlices, "ResourceSlices of nodes cannot be templated (nodes left out): " + strings.Join(invalid, "; ")})
	}

	capacity := nodegroup.Capacity(nodes)
	set(capacity)
	for _, k := range []string{nodegroup.CPUKey, nodegroup.MemoryKey, nodegroup.EphemeralDiskKey, nodegroup.MaxPodsKey} {
		if _, ok := capacity[k]; !ok {
			keep(k)
		}
	}

	switch len(byHash) {
	case 0:
		keepTemplate()
	case 1:
		if alreadyPublished(in, firstHash(byHash), cfg.Budget) {
			// The group already has this template from the publisher: encoding it again
			// (a JSON document, gzip, the dra-resource-slices key) would give the same bytes.
			keep(nodegroup.TemplateKeys...)
			set(nodegroup.DRA(first, cfg.GPUDriver))
			desired[nodegroup.SourceAnnotation] = nodegroup.SourceNodes
			recordMachineTemplate(in, desired)
			break
		}
		ann, err := first.Encode(cfg.Budget)
		if err == nil {
			err = nodegroup.AddDRAResourceSlices(ann, first, cfg.Budget)
		}
		var be *template.BudgetError
		switch {
		case errors.As(err, &be):
			p.Problems = append(p.Problems, Problem{ReasonOverBudget, fmt.Sprintf("the template of nodes %s needs %d bytes, over the budget of %d bytes; it is not truncated, the last good template is kept", nodeList(byHash), be.Size, be.Budget)})
			keepTemplate()
		case err != nil:
			p.Problems = append(p.Problems, Problem{ReasonInvalidSlices, fmt.Sprintf("the template of nodes %s cannot be encoded: %v", nodeList(byHash), err)})
			keepTemplate()
		default:
			set(ann)
			set(nodegroup.DRA(first, cfg.GPUDriver))
			desired[nodegroup.SourceAnnotation] = nodegroup.SourceNodes
			recordMachineTemplate(in, desired)
			if d := divergence(cur, first, desired, nodeList(byHash)); d != nil && !templateIsForeign(in, desired) {
				p.Divergence = d
				desired[nodegroup.DivergenceAnnotation] = d.Annotation()
			}
		}
	default:
		p.Problems = append(p.Problems, Problem{ReasonNodesDisagree, "nodes of the current revision have different templates, the last good template is kept: " + nodeList(byHash)})
		keepTemplate()
	}
	return finish(p, in, desired)
}

// seedOrCopy is Decide for a group without nodes that names a seed or a copy-from: their
// annotations, recording the group's machine template; false (and the problem, nothing
// written) when they cannot be had.
func seedOrCopy(p Plan, in Input, cfg Config, desired map[string]string) (Plan, bool) {
	fail := func(prob *Problem) (Plan, bool) {
		p.Problems = append(p.Problems, *prob)
		p.TemplateBytes = templateBytes(in.Annotations)
		return p, false
	}
	if in.Seed != nil {
		if prob := seedFrom(in.Seed, in.CopyFrom != nil, desired); prob != nil {
			return fail(prob)
		}
		recordMachineTemplate(in, desired)
		return finish(p, in, desired), true
	}
	keepOwned(in, desired, nodegroup.LabelsKey, nodegroup.TaintsKey)
	if prob := copyFrom(in.CopyFrom, cfg, desired); prob != nil {
		return fail(prob)
	}
	for _, k := range []string{nodegroup.CPUKey, nodegroup.MemoryKey, nodegroup.EphemeralDiskKey, nodegroup.MaxPodsKey} {
		if _, ok := desired[k]; !ok {
			keepOwned(in, desired, k)
		}
	}
	recordMachineTemplate(in, desired)
	return finish(p, in, desired), true
}

// keepOwned keeps the current values of the keys the publisher owns.
func keepOwned(in Input, desired map[string]string, keys ...string) {
	for _, k := range keys {
		if v, ok := in.Annotations[k]; ok && in.Owned.Has(k) {
			desired[k] = v
		}
	}
}

// recordMachineTemplate notes, with a template written now, which machines it describes.
func recordMachineTemplate(in Input, desired map[string]string) {
	if in.MachineTemplate != "" {
		desired[nodegroup.MachineTemplateAnnotation] = in.MachineTemplate
	}
}

func firstHash(byHash map[string][]string) string {
	for h := range byHash {
		return h
	}
	return ""
}

// alreadyPublished reports whether the group has the template of hash as the publisher wrote it:
// every template key present and the publisher's, of this format version, within the budget.
func alreadyPublished(in Input, hash string, budget int) bool {
	if in.Annotations[template.HashAnnotation] != hash || in.Annotations[template.VersionAnnotation] != template.Version {
		return false
	}
	for _, k := range nodegroup.TemplateKeys {
		if _, ok := in.Annotations[k]; !ok || !in.Owned.Has(k) {
			return false
		}
	}
	return templateBytes(in.Annotations) <= budget
}

// copyFrom fills desired from the copy source, or reports why it cannot.
func copyFrom(src *CopySource, cfg Config, desired map[string]string) *Problem {
	fail := func(format string, args ...any) *Problem {
		return &Problem{ReasonCopyFromFailed, fmt.Sprintf("copy-from %s: ", src.Ref) + fmt.Sprintf(format, args...)}
	}
	switch {
	case src.Err != nil:
		return fail("%v", src.Err)
	case src.Annotations == nil:
		return fail("no such MachineDeployment")
	}
	if _, err := template.Decode(src.Annotations); errors.Is(err, template.ErrNoTemplate) {
		return fail("it has no template yet")
	} else if err != nil {
		return fail("its template is invalid: %v", err)
	}
	if size := templateBytes(src.Annotations); size > cfg.Budget {
		return &Problem{ReasonOverBudget, fmt.Sprintf("copy-from %s: its template needs %d bytes, over the budget of %d bytes", src.Ref, size, cfg.Budget)}
	}
	for _, k := range append(append([]string{}, nodegroup.TemplateKeys...), nodegroup.ShapeKeys...) {
		if v, ok := src.Annotations[k]; ok {
			desired[k] = v
		}
	}
	desired[nodegroup.SourceAnnotation] = nodegroup.SourceCopyPrefix + src.Ref
	return nil
}

// finish turns the desired keys into a plan: no write when the object already matches.
func finish(p Plan, in Input, desired map[string]string) Plan {
	leaveForeignAlone(&p, in, desired)
	p.Desired = desired
	merged := maps.Clone(in.Annotations)
	if merged == nil {
		merged = map[string]string{}
	}
	for k, v := range desired {
		if w, ok := in.Annotations[k]; !ok || w != v {
			p.Changed = append(p.Changed, k)
		}
		merged[k] = v
	}
	for k := range in.Owned {
		if _, ok := desired[k]; ok || !nodegroup.IsManagedKey(k) {
			continue
		}
		if _, ok := in.Annotations[k]; ok {
			// Owned but no longer wanted: the apply removes it.
			p.Changed = append(p.Changed, k)
			delete(merged, k)
		}
	}
	if len(p.Changed) > 0 {
		slices.Sort(p.Changed)
		p.Apply = desired
	}
	p.TemplateBytes = templateBytes(merged)
	if size, before := AnnotationBytes(merged), AnnotationBytes(in.Annotations); p.Apply != nil && size > MaxAnnotationBytes && size > before {
		// The API server would refuse the object (or Cluster API the MachineSet it copies
		// the annotations to); nothing is written and what the group has stays.
		p.Problems = append(p.Problems, Problem{ReasonOverBudget, fmt.Sprintf(
			"the group's annotations would total %d bytes after the write (%d now), over the %d bytes the publisher allows (the API's limit of %d for all annotations of an object, less %d for what Cluster API adds to the MachineSets it copies them to); nothing is written, the current annotations are kept: lower --template-budget-bytes or remove other annotations",
			size, before, MaxAnnotationBytes, apivalidation.TotalAnnotationSizeLimitB, AnnotationReserveBytes)})
		p.Apply, p.Changed, p.Divergence = nil, nil, nil
		p.TemplateBytes = templateBytes(in.Annotations)
	}
	return p
}

// Sizes of all annotations of a group object together.
const (
	// AnnotationReserveBytes is left to what Cluster API adds to the annotations it copies from
	// a MachineDeployment to its MachineSets (revision, desired and max replicas).
	AnnotationReserveBytes = 4 << 10
	// MaxAnnotationBytes is the most the publisher lets all annotations of a group (keys plus
	// values, its own and everyone else's) grow to with a write: the API's limit less the
	// reserve.
	MaxAnnotationBytes = apivalidation.TotalAnnotationSizeLimitB - AnnotationReserveBytes
	// MaxTemplateBudget caps --template-budget-bytes: the template keys may take at most
	// three quarters of an object's annotations, the rest is left to the capacity keys and
	// to everyone else's.
	MaxTemplateBudget = apivalidation.TotalAnnotationSizeLimitB * 3 / 4
)

// AnnotationBytes is the size of annotations as the API server counts it (keys plus values).
func AnnotationBytes(ann map[string]string) int {
	n := 0
	for k, v := range ann {
		n += len(k) + len(v)
	}
	return n
}

// leaveForeignAlone drops from desired every key that another manager owns with a different
// value, and reports it. A template is all or nothing: when one of its keys is someone else's,
// the publisher's other template keys keep their current values (a template whose hash another
// manager set would not decode).
func leaveForeignAlone(p *Plan, in Input, desired map[string]string) {
	var conflicts []string
	templateConflict := false
	for _, k := range slices.Sorted(maps.Keys(desired)) {
		m, foreign := in.Foreign[k]
		if !foreign || in.Annotations[k] == desired[k] {
			continue
		}
		delete(desired, k)
		conflicts = append(conflicts, fmt.Sprintf("%s (manager %q)", k, m))
		if slices.Contains(nodegroup.TemplateKeys, k) {
			templateConflict = true
		}
	}
	if templateConflict {
		for _, k := range nodegroup.TemplateKeys {
			if _, foreign := in.Foreign[k]; foreign {
				continue
			}
			if v, ok := in.Annotations[k]; ok && in.Owned.Has(k) {
				desired[k] = v
			} else {
				delete(desired, k)
			}
		}
	}
	if len(conflicts) > 0 {
		p.Problems = append(p.Problems, Problem{ReasonAnnotationConflict,
			"annotations set by another field manager are left alone (remove them to let the publisher manage them): " + strings.Join(conflicts, ", ")})
	}
}

// templateBytes is the size of the template annotations (keys plus values) in a map.
func templateBytes(ann map[string]string) int {
	n := 0
	for _, k := range nodegroup.TemplateKeys {
		if v, ok := ann[k]; ok {
			n += len(k) + len(v)
		}
	}
	return n
}

// nodeList formats nodes by template hash: "sha256:0123abcd… (node-a, node-b), …", or just
// "(node-a, node-b)" when there is one hash.
func nodeList(byHash map[string][]string) string {
	names := func(h string) string {
		n := slices.Clone(byHash[h])
		slices.Sort(n)
		if len(n) > 5 {
			n = append(n[:5], fmt.Sprintf("and %d more", len(n)-5))
		}
		return "(" + strings.Join(n, ", ") + ")"
	}
	hashes := slices.Sorted(maps.Keys(byHash))
	if len(hashes) == 1 {
		return names(hashes[0])
	}
	parts := make([]string, len(hashes))
	for i, h := range hashes {
		short := h
		if len(short) > len("sha256:")+12 {
			short = short[:len("sha256:")+12] + "…"
		}
		parts[i] = short + " " + names(h)
	}
	return strings.Join(parts, ", ")
}
