package publisher

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
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

// divergence compares the template in force (in cur) with the template of the group's nodes
// (next, of hash nextHash, from nodes), when the one in force did not come from the group's own
// nodes: a seed, a copy, or one written by hand, which nobody checked against the hardware. A
// template from the nodes that the nodes change (a rollout to another GPU, a driver upgrade)
// is the publisher's own observation, reported by TemplatePublished as any write. Nil when
// there is nothing to report: no template in force, one that does not decode (it was no
// template the autoscaler could use), the same hash, or no difference modulo placeholders.
func divergence(cur map[string]string, next *template.Template, nextHash, nodes string) *Divergence {
	source := cur[nodegroup.SourceAnnotation]
	if source == nodegroup.SourceNodes || cur[template.HashAnnotation] == nextHash {
		return nil
	}
	old, err := template.Decode(cur)
	if err != nil {
		return nil
	}
	diffs := template.Diff(old, next)
	if len(diffs) == 0 {
		return nil
	}
	oldHash := cur[template.HashAnnotation]
	if oldHash == "" {
		oldHash, _ = old.Hash()
	}
	return &Divergence{Source: source, TemplateHash: oldHash, NodeHash: nextHash, Nodes: strings.TrimSpace(nodes), Differences: diffs}
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
