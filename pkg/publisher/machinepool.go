package publisher

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// MachinePools are node groups of their own: the autoscaler's clusterapi provider scales a
// MachinePool through its scale subresource, reads the same capacity and min/max-size
// annotations on it as on a MachineDeployment, and finds its nodes by spec.providerIDList (each
// ID normalized, matched against Node.spec.providerID), not through Machines. The publisher does
// the same. A pool's status.nodeRefs (Cluster API's own resolution of that list) is used only to
// map a node's events back to its pool when the node is no longer in the list.

// Field indexes of MachinePools and of nodes by provider ID.
const (
	indexMachinePoolByProviderID = "accel-dra.io/machinepool-providerid"
	indexMachinePoolByNodeRef    = "accel-dra.io/machinepool-noderef"
	indexNodeByProviderID        = "accel-dra.io/node-providerid"
)

// NormalizedProviderID is the autoscaler's clusterapi provider's form of a provider ID, which
// it compares: the part after the last '/' (aws:///us-east-1a/i-0123 → i-0123), except for
// Azure scale-set IDs, which are kept whole.
func NormalizedProviderID(id string) string {
	if strings.HasPrefix(id, "azure://") && strings.Contains(id, "virtualMachineScaleSets") {
		return id
	}
	return id[strings.LastIndex(id, "/")+1:]
}

// MachinePoolsServed reports whether the API server serves Cluster API's MachinePools (the CRD
// is optional: Cluster API installs it only with its MachinePool feature). A mapper error other
// than "no match" is returned.
func MachinePoolsServed(mapper apimeta.RESTMapper) (bool, error) {
	_, err := mapper.RESTMapping(schema.GroupKind{Group: clusterv1.GroupVersion.Group, Kind: KindMachinePool}, clusterv1.GroupVersion.Version)
	switch {
	case err == nil:
		return true, nil
	case apimeta.IsNoMatchError(err):
		return false, nil
	default:
		return false, fmt.Errorf("looking up %s: %w", KindMachinePool, err)
	}
}

// AddMachinePoolIndexes registers the indexes of MachinePools (only where they are served).
func AddMachinePoolIndexes(ctx context.Context, idx client.FieldIndexer) error {
	for _, ix := range []struct {
		field string
		fn    client.IndexerFunc
	}{
		{indexMachinePoolByProviderID, func(o client.Object) []string {
			var out []string
			for _, id := range o.(*clusterv1.MachinePool).Spec.ProviderIDList {
				if n := NormalizedProviderID(id); n != "" {
					out = append(out, n)
				}
			}
			return out
		}},
		{indexMachinePoolByNodeRef, func(o client.Object) []string {
			var out []string
			for _, ref := range o.(*clusterv1.MachinePool).Status.NodeRefs {
				if ref.Name != "" {
					out = append(out, ref.Name)
				}
			}
			return out
		}},
		{indexGroupByCluster, func(o client.Object) []string { return one(ClusterOf(o).String()) }},
		{indexGroupByCopyFrom, copyFromIndex},
	} {
		if err := idx.IndexField(ctx, &clusterv1.MachinePool{}, ix.field, ix.fn); err != nil {
			return err
		}
	}
	return nil
}

// nodeProviderIDIndex indexes nodes by their normalized spec.providerID (on the cache that
// holds the nodes).
func nodeProviderIDIndex(o client.Object) []string {
	return one(NormalizedProviderID(o.(*corev1.Node).Spec.ProviderID))
}

// machinePoolNodes returns the nodes of a MachinePool with their templates: those whose
// providerID is in its spec.providerIDList, read through nodes.
func (r *Reconciler) machinePoolNodes(ctx context.Context, mp *clusterv1.MachinePool, nodes client.Reader, cluster *ClusterRef) ([]NodeInput, error) {
	seen := sets.New[string]()
	var names []string
	for _, id := range mp.Spec.ProviderIDList {
		n := NormalizedProviderID(id)
		if n == "" || seen.Has(n) {
			continue
		}
		seen.Insert(n)
		var list corev1.NodeList
		if err := nodes.List(ctx, &list, client.MatchingFields{indexNodeByProviderID: n}); err != nil {
			return nil, fmt.Errorf("listing the node of provider ID %s: %w", id, err)
		}
		for _, node := range list.Items {
			names = append(names, node.Name)
		}
	}
	slices.Sort(names)
	return r.nodeInputs(ctx, slices.Compact(names), nodes, cluster)
}

// machinePoolsOfNode returns the MachinePools a node belongs to: by its provider ID, and those
// whose status.nodeRefs still name it.
func (r *Reconciler) machinePoolsOfNode(ctx context.Context, cluster *ClusterRef, node string) []GroupKey {
	if !r.MachinePools {
		return nil
	}
	var opts []client.ListOption
	if cluster != nil {
		opts = append(opts, client.InNamespace(cluster.Namespace))
	}
	var keys []GroupKey
	add := func(field, value string) {
		var list clusterv1.MachinePoolList
		if err := r.Client.List(ctx, &list, append(opts, client.MatchingFields{field: value})...); err != nil {
			return
		}
		for i := range list.Items {
			if cluster == nil || ClusterOf(&list.Items[i]) == *cluster {
				keys = append(keys, GroupKey{KindMachinePool, list.Items[i].Namespace, list.Items[i].Name})
			}
		}
	}
	add(indexMachinePoolByNodeRef, node)
	if id := r.providerIDOf(ctx, cluster, node); id != "" {
		add(indexMachinePoolByProviderID, id)
	}
	return keys
}

// providerIDOf returns a node's normalized provider ID from the cache that holds it, "" when
// it is not there.
func (r *Reconciler) providerIDOf(ctx context.Context, cluster *ClusterRef, name string) string {
	reader := client.Reader(r.Client)
	if cluster != nil {
		if r.Workloads == nil {
			return ""
		}
		wr, err := r.Workloads.Reader(ctx, *cluster)
		if err != nil {
			return ""
		}
		reader = wr
	}
	node := &corev1.Node{}
	if err := reader.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return ""
	}
	return NormalizedProviderID(node.Spec.ProviderID)
}

func (r *Reconciler) groupsOfMachinePool(_ context.Context, mp *clusterv1.MachinePool, _ bool) []GroupKey {
	return []GroupKey{{KindMachinePool, mp.Namespace, mp.Name}}
}

// machinePoolGroups lists the MachinePools matching opts as group keys.
func (r *Reconciler) machinePoolGroups(ctx context.Context, opts ...client.ListOption) []GroupKey {
	if !r.MachinePools {
		return nil
	}
	var list clusterv1.MachinePoolList
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		return nil
	}
	keys := make([]GroupKey, 0, len(list.Items))
	for _, mp := range list.Items {
		keys = append(keys, GroupKey{KindMachinePool, mp.Namespace, mp.Name})
	}
	return keys
}

// copyFromIndex indexes a group by the MachineDeployment its copy-from annotation names.
func copyFromIndex(o client.Object) []string {
	v, ok := o.GetAnnotations()[nodegroup.CopyFromAnnotation]
	if !ok {
		return nil
	}
	ns, name, err := ParseCopyFrom(o.GetNamespace(), v)
	if err != nil {
		return nil
	}
	return []string{ns + "/" + name}
}
