package publisher

import (
	"context"
	"fmt"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// ReasonTemplateStale: the group is at zero and its infrastructure machine template is no
// longer the one its template was taken from (nodegroup.MachineTemplateAnnotation): the
// machines the autoscaler would create are of another type than the template describes.
// What happens to the template is --stale-template-policy's choice.
const ReasonTemplateStale = "TemplateStale"

// What the publisher does with a stale template (--stale-template-policy).
const (
	// StaleWithdraw (the default) removes every key taken from the old machines: the
	// template, cpu, memory, ephemeral-disk, maxPods, labels, taints, dra-driver, dra-pool,
	// gpu-count and source. The record of what they were taken from stays, so that the state
	// is visible and a seed or copy-from, which may describe the old type as well, is not
	// applied until an operator removes it. Without the capacity keys the clusterapi provider
	// takes the group's capacity from the new infrastructure template's status.capacity
	// (Cluster API's scale-from-zero contract), which describes the new type, or does not
	// scale the group from zero: never a scale-up for the old shape.
	StaleWithdraw = "withdraw"
	// StaleReseed applies the group's seed or copy-from, if it names one, as for a group that
	// never had nodes (the operator says that these follow the machine type); a group without
	// one is withdrawn.
	StaleReseed = "reseed"
	// StaleKeep keeps the old template, reported all the same: the autoscaler keeps scaling
	// the group up for pods that only the old type could hold.
	StaleKeep = "keep"
)

// StalePolicies are the values of --stale-template-policy.
var StalePolicies = []string{StaleWithdraw, StaleReseed, StaleKeep}

// MachineTemplateRef is the value of nodegroup.MachineTemplateAnnotation for an infrastructure
// reference, "<Kind>.<apiGroup>/<name>" (the namespace is the group's), or "" for none. Cluster
// API's infrastructure machine templates are immutable by contract: a new machine type is a new
// template that the group's infrastructureRef then names, so the reference says which machines
// the group creates.
func MachineTemplateRef(ref clusterv1.ContractVersionedObjectReference) string {
	if ref.Kind == "" || ref.Name == "" {
		return ""
	}
	return ref.Kind + "." + ref.APIGroup + "/" + ref.Name
}

// staleMachineTemplate returns what the group's template was taken from when the group's
// machine template is no longer that (in.MachineTemplate); "" when it is not stale, or when
// either side is unknown (a template published before the record existed is not judged).
func staleMachineTemplate(in Input) string {
	was := in.Annotations[nodegroup.MachineTemplateAnnotation]
	if was == "" || in.MachineTemplate == "" || was == in.MachineTemplate {
		return ""
	}
	return was
}

// decideStale is Decide for a group at zero whose template is stale (was is what it was taken
// from). desired holds the divergence report only.
func decideStale(p Plan, in Input, cfg Config, desired map[string]string, was string) Plan {
	head := fmt.Sprintf("the group's infrastructure machine template changed from %s to %s while it had no nodes: its template describes the old machines", was, in.MachineTemplate)
	switch cfg.StalePolicy {
	case StaleKeep:
		p.Problems = append(p.Problems, Problem{ReasonTemplateStale, head + "; it is kept (--stale-template-policy=keep), so the autoscaler scales the group up for pods that only the old machines could hold"})
		p.TemplateBytes = templateBytes(in.Annotations)
		return p
	case StaleReseed:
		if in.Seed != nil || in.CopyFrom != nil {
			what := "copy-from " + in.Annotations[nodegroup.CopyFromAnnotation]
			if in.Seed != nil {
				what = "seed " + in.Seed.Name
			}
			q, ok := seedOrCopy(p, in, cfg, clone(desired))
			if ok {
				q.Problems = append(q.Problems, Problem{ReasonTemplateStale, head + "; it is replaced by its " + what + " (--stale-template-policy=reseed)"})
				return q
			}
			p.Problems = q.Problems
		}
	}
	// Withdraw: only the record of what the withdrawn keys described stays (with a divergence
	// report, if any); finish removes every other key the publisher owns.
	keepOwned(in, desired, nodegroup.MachineTemplateAnnotation)
	why := "--stale-template-policy=" + StaleWithdraw
	if cfg.StalePolicy == StaleReseed {
		why = "--stale-template-policy=" + StaleReseed + ", without a seed or copy-from that applies"
	}
	p.Problems = append(p.Problems, Problem{ReasonTemplateStale, head + "; its template, capacity, labels and taints are withdrawn (" + why + ") until nodes of the new machines join, or " +
		nodegroup.MachineTemplateAnnotation + " is removed to let a seed or copy-from apply"})
	return finish(p, in, desired)
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// machineTemplateOf returns the infrastructure machine template the group's template describes
// (Input.MachineTemplate): for a MachineDeployment with nodes, that of its current MachineSet,
// whose nodes they are (during a rollout the MachineDeployment already names the next one);
// otherwise the group's own, which is what the autoscaler would create.
func (r *Reconciler) machineTemplateOf(ctx context.Context, key GroupKey, obj client.Object, hasNodes bool) (string, error) {
	switch g := obj.(type) {
	case *clusterv1.MachineSet:
		return MachineTemplateRef(g.Spec.Template.Spec.InfrastructureRef), nil
	case *clusterv1.MachinePool:
		return MachineTemplateRef(g.Spec.Template.Spec.InfrastructureRef), nil
	case *clusterv1.MachineDeployment:
		if hasNodes {
			var list clusterv1.MachineSetList
			if err := r.Client.List(ctx, &list, client.InNamespace(key.Namespace), client.MatchingFields{indexMachineSetByMD: key.Name}); err != nil {
				return "", fmt.Errorf("listing MachineSets of %s: %w", key, err)
			}
			sets := make([]*clusterv1.MachineSet, len(list.Items))
			for i := range list.Items {
				sets[i] = &list.Items[i]
			}
			if ms := CurrentMachineSet(sets); ms != nil {
				if ref := MachineTemplateRef(ms.Spec.Template.Spec.InfrastructureRef); ref != "" {
					return ref, nil
				}
			}
		}
		return MachineTemplateRef(g.Spec.Template.Spec.InfrastructureRef), nil
	}
	return "", nil
}
