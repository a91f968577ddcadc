package publisher

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// ReasonTemplateDiverged is the reason of the Warning event that says the first nodes of a group
// differ from the template the group had (a seed, a copy): the autoscaler scaled the group up
// on a template that lied about it. The publisher replaces the template all the same.
const ReasonTemplateDiverged = "TemplateDiverged"

// Sizes of a divergence report: the event's message (the events API takes 1 KiB; the node
// names and the first difference are always in, so a report can exceed these a little) and the
// annotation's value.
const (
	divergenceEventBytes      = 900
	divergenceAnnotationBytes = 512
)

// Divergence is how the nodes of a group differ from the template in force before their own
// replaced it.
type Divergence struct {
	// Source is the replaced template's source annotation (seed, copy-from:<group>, or empty
	// for one written by hand).
	Source string
	// TemplateHash and NodeHash are the two templates' hashes.
	TemplateHash, NodeHash string
	// Nodes names the nodes whose template replaces it, "(node-a, node-b)".
	Nodes       string
	Differences []template.Difference
}

// Message is the event's message; Annotation the value of nodegroup.DivergenceAnnotation.
func (d *Divergence) Message() string {
	head := fmt.Sprintf("the template the group had (source %s, %s) differs from its nodes' %s (%s) in %d ways, modulo placeholders; it is replaced: ",
		orNone(d.Source), d.TemplateHash, d.Nodes, d.NodeHash, len(d.Differences))
	return head + template.FormatDifferences(d.Differences, max(divergenceEventBytes-len(head), 0))
}

// Annotation is a one-line summary that stays on the group until someone removes it, for alerts
// (docs/template-publisher.md, "Divergence").
func (d *Divergence) Annotation() string {
	head := fmt.Sprintf("source %s %s, nodes %s %s: %d differences: ", orNone(d.Source), shortHash(d.TemplateHash), d.Nodes, shortHash(d.NodeHash), len(d.Differences))
	return head + template.FormatDifferences(d.Differences, max(divergenceAnnotationBytes-len(head), 0))
}

func shortHash(h string) string {
	if len(h) > len("sha256:")+12 {
		return h[:len("sha256:")+12]
	}
	return h
}

// divergence compares what the group had in force (cur) with what its nodes give (next, the
// template of their slices, and desired, the keys written from them), when what was in force
// did not come from the group's own nodes: a seed, a copy, or keys written by hand, which
// nobody checked against the machines. The devices are compared modulo placeholders
// (template.Diff); the capacity keys as capacityDiff says. What the nodes change in a template
// taken from them (a rollout to another GPU, a driver upgrade) is the publisher's own
// observation, reported by TemplatePublished as any write. Nil when there is nothing to report:
// nothing was in force that the autoscaler could build a template node from (neither a
// template that decodes nor cpu and memory), or no difference.
func divergence(cur map[string]string, next *template.Template, desired map[string]string, nodes string) *Divergence {
	source := cur[nodegroup.SourceAnnotation]
	if source == nodegroup.SourceNodes {
		return nil
	}
	nextHash := desired[template.HashAnnotation]
	old, err := template.Decode(cur)
	_, hasCPU := cur[nodegroup.CPUKey]
	_, hasMemory := cur[nodegroup.MemoryKey]
	if err != nil && !(hasCPU && hasMemory) {
		return nil
	}
	diffs := capacityDiff(cur, desired)
	oldHash := cur[template.HashAnnotation]
	if err == nil && oldHash != nextHash {
		diffs = append(diffs, template.Diff(old, next)...)
		if oldHash == "" {
			oldHash, _ = old.Hash()
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return &Divergence{Source: source, TemplateHash: oldHash, NodeHash: nextHash, Nodes: strings.TrimSpace(nodes), Differences: diffs}
}

// capacityScalarKeys are the capacity keys compared as single values, in report order; the
// quantities among them are compared as quantities ("1000Gi" and "1073741824Ki" agree).
var capacityScalarKeys = []struct {
	key, name string
	quantity  bool
}{
	{nodegroup.CPUKey, "cpu", true},
	{nodegroup.MemoryKey, "memory", true},
	{nodegroup.GPUCountKey, "gpu-count", true},
	{nodegroup.DRADriverKey, "dra-driver", false},
	{nodegroup.DRAPoolKey, "dra-pool", false},
	{nodegroup.EphemeralDiskKey, "ephemeral-disk", true},
	{nodegroup.MaxPodsKey, "maxPods", true},
}

// capacityDiff lists how the capacity keys of the nodes (node) differ from those in force
// (cur): every key, label and taint the template stated that the nodes do not give alike, and
// every taint of the nodes that the template did not state (the autoscaler scaled the group
// up for pods that do not tolerate it). A key or a label the template did not state is not a
// difference: the autoscaler put its own default there (its generic labels, 110 pods), and a
// pod that needed the nodes' value was not scaled for, never scaled for in vain.
func capacityDiff(cur, node map[string]string) []template.Difference {
	var out []template.Difference
	for _, k := range capacityScalarKeys {
		was, ok := cur[k.key]
		if !ok {
			continue
		}
		is, has := node[k.key]
		if has && (was == is || k.quantity && sameQuantity(was, is)) {
			continue
		}
		out = append(out, template.Difference{What: k.name, Template: shortValue(was), Node: valueOr(is, has)})
	}
	if v, ok := cur[nodegroup.TaintsKey]; ok || node[nodegroup.TaintsKey] != "" {
		out = append(out, taintDiff(v, node[nodegroup.TaintsKey])...)
	}
	if v, ok := cur[nodegroup.LabelsKey]; ok {
		out = append(out, labelDiff(v, node[nodegroup.LabelsKey])...)
	}
	return out
}

func sameQuantity(a, b string) bool {
	qa, errA := resource.ParseQuantity(a)
	qb, errB := resource.ParseQuantity(b)
	return errA == nil && errB == nil && qa.Cmp(qb) == 0
}

func valueOr(v string, ok bool) string {
	if !ok {
		return "<none>"
	}
	return shortValue(v)
}

// shortValue bounds a value in a report, as template.Diff does its values.
func shortValue(s string) string {
	if r := []rune(s); len(r) > 64 {
		return string(r[:63]) + "…"
	}
	return s
}

// labelDiff: each label of the template (a labels value) that the nodes lack or have with
// another value, by key. A value that does not parse is one difference.
func labelDiff(was, is string) []template.Difference {
	old, err := nodegroup.ParseLabels(was)
	if err != nil {
		return []template.Difference{{What: "labels", Template: shortValue(was), Node: shortValue(is)}}
	}
	now, _ := nodegroup.ParseLabels(is)
	var out []template.Difference
	for _, k := range slices.Sorted(maps.Keys(old)) {
		v, ok := now[k]
		if ok && v == old[k] {
			continue
		}
		out = append(out, template.Difference{What: "label " + k, Template: shortValue(old[k]), Node: valueOr(v, ok)})
	}
	return out
}

// taintDiff: each taint (by key and effect) that one side has and the other has not or with
// another value.
func taintDiff(was, is string) []template.Difference {
	old, err := nodegroup.ParseTaints(was)
	if err != nil {
		return []template.Difference{{What: "taints", Template: shortValue(was), Node: shortValue(is)}}
	}
	now, _ := nodegroup.ParseTaints(is)
	byKey := func(ts []corev1.Taint) map[string]string {
		m := map[string]string{}
		for _, t := range ts {
			m[t.Key+":"+string(t.Effect)] = t.Value
		}
		return m
	}
	o, n := byKey(old), byKey(now)
	keys := slices.Sorted(maps.Keys(o))
	for k := range n {
		if _, ok := o[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []template.Difference
	for _, k := range keys {
		ov, oOK := o[k]
		nv, nOK := n[k]
		if oOK && nOK && ov == nv {
			continue
		}
		out = append(out, template.Difference{What: "taint " + k, Template: taintValue(ov, oOK), Node: taintValue(nv, nOK)})
	}
	return out
}

// taintValue is a taint's value in a report: "<none>" for a taint that side lacks, "present"
// for one without a value.
func taintValue(v string, ok bool) string {
	switch {
	case !ok:
		return "<none>"
	case v == "":
		return "present"
	}
	return shortValue(v)
}

// templateIsForeign says whether another manager's template keys keep the publisher from
// writing the desired template (leaveForeignAlone): then nothing is replaced, and nothing
// diverged that the publisher could report.
func templateIsForeign(in Input, desired map[string]string) bool {
	for _, k := range nodegroup.TemplateKeys {
		if _, foreign := in.Foreign[k]; foreign && in.Annotations[k] != desired[k] {
			return true
		}
	}
	return false
}

// reportDivergence tells that the group's nodes differ from the template in force: a Warning
// event on the group, the divergence counter, and a log line with every difference (the event
// and the annotation carry only the first few).
func (r *Reconciler) reportDivergence(ctx context.Context, key GroupKey, obj client.Object, d *Divergence) {
	diffs := make([]string, len(d.Differences))
	for i, x := range d.Differences {
		diffs[i] = x.String()
	}
	klog.FromContext(ctx).Info("Nodes differ from the node group's template, replacing it", "source", d.Source,
		"templateHash", d.TemplateHash, "nodes", d.Nodes, "nodeHash", d.NodeHash, "differences", diffs)
	r.Metrics.TemplateDivergences.WithLabelValues(key.Kind, key.Namespace, key.Name).Inc()
	r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonTemplateDiverged, "Publish", "%s", d.Message())
}
