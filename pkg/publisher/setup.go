package publisher

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

func one(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// AddIndexes registers the field indexes the reconciler and its event mapping use, all on one
// cache (self-managed mode).
func AddIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := AddGroupIndexes(ctx, idx); err != nil {
		return err
	}
	return AddNodeIndexes(ctx, idx)
}

// AddNodeIndexes registers the indexes of ResourceSlices by node and of Nodes by provider ID,
// on the cache that holds the nodes (a workload cluster's in management mode).
func AddNodeIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &resourceapi.ResourceSlice{}, indexSliceByNode, func(o client.Object) []string {
		if n := o.(*resourceapi.ResourceSlice).Spec.NodeName; n != nil {
			return one(*n)
		}
		return nil
	}); err != nil {
		return err
	}
	// The nodes of a MachinePool are found by provider ID.
	return idx.IndexField(ctx, &corev1.Node{}, indexNodeByProviderID, nodeProviderIDIndex)
}

// AddGroupIndexes registers the indexes of the Cluster API objects.
func AddGroupIndexes(ctx context.Context, idx client.FieldIndexer) error {
	copyFrom := copyFromIndex
	for _, ix := range []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&clusterv1.Machine{}, indexMachineByNode, func(o client.Object) []string { return one(o.(*clusterv1.Machine).Status.NodeRef.Name) }},
		{&clusterv1.Machine{}, indexMachineByMachineSet, func(o client.Object) []string { return one(MachineSetOf(o.(*clusterv1.Machine))) }},
		{&clusterv1.MachineSet{}, indexMachineSetByMD, func(o client.Object) []string { return one(MachineDeploymentOf(o.(*clusterv1.MachineSet))) }},
		{&clusterv1.MachineDeployment{}, indexGroupByCopyFrom, copyFrom},
		{&clusterv1.MachineDeployment{}, indexGroupByCluster, func(o client.Object) []string { return one(ClusterOf(o).String()) }},
		{&clusterv1.MachineSet{}, indexGroupByCluster, func(o client.Object) []string { return one(ClusterOf(o).String()) }},
		{&clusterv1.MachineSet{}, indexGroupByCopyFrom, copyFrom},
	} {
		if err := idx.IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return err
		}
	}
	return nil
}

// SetupWithManager registers the indexes and the controller: it watches MachineDeployments,
// MachineSets, Machines and, in self-managed mode, Nodes and ResourceSlices, and maps each event
// to the node groups it concerns. In management mode r.Workloads forwards the workload
// clusters' Node and ResourceSlice events, and kubeconfig Secret events requeue the groups of
// their cluster.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr manager.Manager, workers int) error {
	idx := AddIndexes
	if r.Workloads != nil {
		idx = AddGroupIndexes
	}
	if err := idx(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	served, err := MachinePoolsServed(mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	if r.MachinePools = served; served {
		if err := AddMachinePoolIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
			return err
		}
	}
	c := mgr.GetCache()
	log := mgr.GetLogger().WithValues("controller", Name)
	b := builder.TypedControllerManagedBy[GroupKey](mgr).
		Named(Name).
		WithOptions(controller.TypedOptions[GroupKey]{
			MaxConcurrentReconciles: workers,
			LogConstructor: func(k *GroupKey) logr.Logger {
				if k == nil {
					return log
				}
				return log.WithValues("kind", k.Kind, "group", klog.KRef(k.Namespace, k.Name))
			},
		}).
		WatchesRawSource(source.TypedKind(c, &clusterv1.MachineDeployment{}, mapEvents(r.groupsOfMachineDeployment, func(o, n *clusterv1.MachineDeployment) bool {
			return !maps.Equal(o.Annotations, n.Annotations) || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
				o.Spec.ClusterName != n.Spec.ClusterName || !maps.Equal(o.Labels, n.Labels) ||
				o.Spec.Template.Spec.InfrastructureRef != n.Spec.Template.Spec.InfrastructureRef
		}))).
		WatchesRawSource(source.TypedKind(c, &clusterv1.MachineSet{}, mapEvents(r.groupsOfMachineSet, func(o, n *clusterv1.MachineSet) bool {
			return !maps.Equal(o.Annotations, n.Annotations) || !maps.Equal(o.Labels, n.Labels) ||
				!equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences) || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
				o.Spec.Template.Spec.InfrastructureRef != n.Spec.Template.Spec.InfrastructureRef
		}))).
		WatchesRawSource(source.TypedKind(c, &clusterv1.Machine{}, mapEvents(r.groupsOfMachine, func(o, n *clusterv1.Machine) bool {
			return o.Status.NodeRef != n.Status.NodeRef || !maps.Equal(o.Labels, n.Labels) ||
				!equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences) || !o.DeletionTimestamp.Equal(n.DeletionTimestamp)
		})))
	if r.MachinePools {
		b = b.WatchesRawSource(source.TypedKind(c, &clusterv1.MachinePool{}, mapEvents(r.groupsOfMachinePool, func(o, n *clusterv1.MachinePool) bool {
			return !maps.Equal(o.Annotations, n.Annotations) || !maps.Equal(o.Labels, n.Labels) || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
				o.Spec.ClusterName != n.Spec.ClusterName || !slices.Equal(o.Spec.ProviderIDList, n.Spec.ProviderIDList) ||
				!equality.Semantic.DeepEqual(o.Status.NodeRefs, n.Status.NodeRefs) ||
				o.Spec.Template.Spec.InfrastructureRef != n.Spec.Template.Spec.InfrastructureRef
		})))
	}
	if r.Workloads == nil {
		b = b.WatchesRawSource(source.TypedKind(c, &corev1.Node{}, mapEventsFor(r.groupsOfNodeObject, relevantNodeUpdate, r.nodeUpdateMatters))).
			WatchesRawSource(source.TypedKind(c, &resourceapi.ResourceSlice{}, mapEvents(r.groupsOfSlice, relevantSliceUpdate)))
	} else {
		ch := make(chan event.TypedGenericEvent[GroupKey], 1024)
		r.Workloads.OnNode = func(ctx context.Context, ref ClusterRef, node string, deleted bool) {
			if deleted {
				r.ForgetNode(nodeCacheKey(&ref, node))
			}
			enqueueChannel(ch, r.groupsOfNode(ctx, &ref, node))
		}
		r.Workloads.OnCluster = func(ctx context.Context, ref ClusterRef) {
			enqueueChannel(ch, r.groupsOfCluster(ctx, ref))
		}
		if err := mgr.Add(r.Workloads); err != nil {
			return err
		}
		b = b.WatchesRawSource(source.TypedKind(c, &corev1.Secret{}, mapEvents(r.groupsOfSecret, func(o, n *corev1.Secret) bool {
			return !equality.Semantic.DeepEqual(o.Data, n.Data)
		}))).
			WatchesRawSource(source.TypedChannel(ch, handler.TypedFuncs[GroupKey, GroupKey]{
				GenericFunc: func(_ context.Context, e event.TypedGenericEvent[GroupKey], q workqueue.TypedRateLimitingInterface[GroupKey]) {
					q.Add(e.Object)
				},
			}))
	}
	return b.Complete(r)
}

// relevantNodeUpdate: heartbeats and condition changes do not matter; what the capacity keys and
// the template are made of does.
func relevantNodeUpdate(o, n *corev1.Node) bool {
	return o.UID != n.UID || !maps.Equal(o.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
		!equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable) ||
		!equality.Semantic.DeepEqual(o.Status.Capacity, n.Status.Capacity)
}

// relevantSliceUpdate: a change of the spec, or of the shape or identity values the cache folds
// it into (slicecache.go).
func relevantSliceUpdate(o, n *resourceapi.ResourceSlice) bool {
	return !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !maps.Equal(o.Annotations, n.Annotations)
}

// nodeUpdateMatters filters a relevant Node update per group: a change of labels alone (GPU
// feature discovery rewrites a timestamp label on every node every minute) matters to a group
// only if it can change the labels the group's current nodes have in common (labelChangeMatters).
func (r *Reconciler) nodeUpdateMatters(ctx context.Context, key GroupKey, o, n *corev1.Node) bool {
	if o.UID != n.UID || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
		!equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable) ||
		!equality.Semantic.DeepEqual(o.Status.Capacity, n.Status.Capacity) {
		return true
	}
	return r.labelChangeMatters(ctx, key, o, n)
}

// labelChangeMatters reports whether changing node n's labels from o's can change the labels
// common to the current nodes of the group: only for a label that was common before (all
// nodes had o's value) or is common after (all have n's). A node outside the group's current
// revision does not count at all. When in doubt (a MachinePool, a cache miss) it matters.
func (r *Reconciler) labelChangeMatters(ctx context.Context, key GroupKey, o, n *corev1.Node) bool {
	if key.Kind == KindMachinePool {
		return true
	}
	obj, err := r.getGroup(ctx, key)
	if err != nil {
		return true
	}
	names, err := r.currentNodeNames(ctx, key, obj)
	if err != nil {
		return true
	}
	if !slices.Contains(names, n.Name) {
		return false
	}
	others := make([]*corev1.Node, 0, len(names))
	for _, name := range names {
		if name == n.Name {
			continue
		}
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, node); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return true
		}
		others = append(others, node)
	}
	commonWith := func(k string, labels map[string]string) bool {
		v, ok := labels[k]
		if !ok {
			return false
		}
		for _, m := range others {
			if w, ok := m.Labels[k]; !ok || w != v {
				return false
			}
		}
		return true
	}
	for k := range changedKeys(o.Labels, n.Labels) {
		if commonWith(k, o.Labels) || commonWith(k, n.Labels) {
			return true
		}
	}
	return false
}

// changedKeys are the keys whose values differ between two maps (present in one only included).
func changedKeys(a, b map[string]string) sets.Set[string] {
	out := sets.New[string]()
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out.Insert(k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out.Insert(k)
		}
	}
	return out
}

// mapEvents enqueues the groups fn maps an object to, for updates those of the old and the new
// object, and only when relevant says the update matters.
func mapEvents[T client.Object](fn func(context.Context, T, bool) []GroupKey, relevant func(o, n T) bool) handler.TypedEventHandler[T, GroupKey] {
	return mapEventsFor(fn, relevant, nil)
}

// mapEventsFor is mapEvents where matters, when set, also decides for each group of a relevant
// update whether it concerns that group.
func mapEventsFor[T client.Object](fn func(context.Context, T, bool) []GroupKey, relevant func(o, n T) bool, matters func(ctx context.Context, key GroupKey, o, n T) bool) handler.TypedEventHandler[T, GroupKey] {
	add := func(q workqueue.TypedRateLimitingInterface[GroupKey], keys []GroupKey) {
		for _, k := range keys {
			q.Add(k)
		}
	}
	return handler.TypedFuncs[T, GroupKey]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[GroupKey]) {
			add(q, fn(ctx, e.Object, false))
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[T], q workqueue.TypedRateLimitingInterface[GroupKey]) {
			if !relevant(e.ObjectOld, e.ObjectNew) {
				return
			}
			keys := sortedKeys(append(fn(ctx, e.ObjectOld, false), fn(ctx, e.ObjectNew, false)...))
			if matters != nil {
				keys = slices.DeleteFunc(keys, func(k GroupKey) bool { return !matters(ctx, k, e.ObjectOld, e.ObjectNew) })
			}
			add(q, keys)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[T], q workqueue.TypedRateLimitingInterface[GroupKey]) {
			add(q, fn(ctx, e.Object, true))
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[T], q workqueue.TypedRateLimitingInterface[GroupKey]) {
			add(q, fn(ctx, e.Object, false))
		},
	}
}

// groupsOfMachineDeployment: the MachineDeployment itself and the groups that copy from it.
func (r *Reconciler) groupsOfMachineDeployment(ctx context.Context, md *clusterv1.MachineDeployment, _ bool) []GroupKey {
	keys := []GroupKey{{KindMachineDeployment, md.Namespace, md.Name}}
	ref := client.MatchingFields{indexGroupByCopyFrom: md.Namespace + "/" + md.Name}
	var mds clusterv1.MachineDeploymentList
	if err := r.Client.List(ctx, &mds, ref); err == nil {
		for _, o := range mds.Items {
			keys = append(keys, GroupKey{KindMachineDeployment, o.Namespace, o.Name})
		}
	}
	var mss clusterv1.MachineSetList
	if err := r.Client.List(ctx, &mss, ref); err == nil {
		for i := range mss.Items {
			keys = append(keys, GroupOfMachineSet(&mss.Items[i]))
		}
	}
	keys = append(keys, r.machinePoolGroups(ctx, ref)...)
	return sortedKeys(keys)
}

func (r *Reconciler) groupsOfMachineSet(_ context.Context, ms *clusterv1.MachineSet, _ bool) []GroupKey {
	return []GroupKey{GroupOfMachineSet(ms)}
}

func (r *Reconciler) groupsOfMachine(ctx context.Context, m *clusterv1.Machine, _ bool) []GroupKey {
	msName := MachineSetOf(m)
	if msName == "" {
		return nil
	}
	ms := &clusterv1.MachineSet{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: msName}, ms); err == nil {
		return []GroupKey{GroupOfMachineSet(ms)}
	}
	// The MachineSet is not (yet) in the cache; its labels on the Machine say enough.
	if md := m.Labels[clusterv1.MachineDeploymentNameLabel]; md != "" {
		return []GroupKey{{KindMachineDeployment, m.Namespace, md}}
	}
	return []GroupKey{{KindMachineSet, m.Namespace, msName}}
}

func (r *Reconciler) groupsOfNodeObject(ctx context.Context, n *corev1.Node, deleted bool) []GroupKey {
	if deleted {
		r.ForgetNode(nodeCacheKey(nil, n.Name))
	}
	return r.groupsOfNode(ctx, nil, n.Name)
}

func (r *Reconciler) groupsOfSlice(ctx context.Context, s *resourceapi.ResourceSlice, _ bool) []GroupKey {
	if s.Spec.NodeName == nil || !r.Drivers.Has(s.Spec.Driver) {
		return nil
	}
	return r.groupsOfNode(ctx, nil, *s.Spec.NodeName)
}

// groupsOfNode maps a node to the groups of the Machines whose status.nodeRef names it and to
// its MachinePools; in management mode (cluster set) only groups of that workload cluster.
func (r *Reconciler) groupsOfNode(ctx context.Context, cluster *ClusterRef, node string) []GroupKey {
	var machines clusterv1.MachineList
	opts := []client.ListOption{client.MatchingFields{indexMachineByNode: node}}
	if cluster != nil {
		opts = append(opts, client.InNamespace(cluster.Namespace))
	}
	if err := r.Client.List(ctx, &machines, opts...); err != nil {
		klog.FromContext(ctx).Error(err, "Listing Machines of node", "node", node)
		return nil
	}
	var keys []GroupKey
	for i := range machines.Items {
		if cluster != nil && ClusterOf(&machines.Items[i]) != *cluster {
			continue
		}
		keys = append(keys, r.groupsOfMachine(ctx, &machines.Items[i], false)...)
	}
	keys = append(keys, r.machinePoolsOfNode(ctx, cluster, node)...)
	return sortedKeys(slices.Clip(keys))
}

// groupsOfCluster: the MachineDeployments and bare MachineSets of a workload cluster.
func (r *Reconciler) groupsOfCluster(ctx context.Context, cluster ClusterRef) []GroupKey {
	var keys []GroupKey
	f := client.MatchingFields{indexGroupByCluster: cluster.String()}
	var mds clusterv1.MachineDeploymentList
	if err := r.Client.List(ctx, &mds, client.InNamespace(cluster.Namespace), f); err == nil {
		for _, md := range mds.Items {
			keys = append(keys, GroupKey{KindMachineDeployment, md.Namespace, md.Name})
		}
	}
	var mss clusterv1.MachineSetList
	if err := r.Client.List(ctx, &mss, client.InNamespace(cluster.Namespace), f); err == nil {
		for i := range mss.Items {
			if MachineDeploymentOf(&mss.Items[i]) == "" {
				keys = append(keys, GroupOfMachineSet(&mss.Items[i]))
			}
		}
	}
	keys = append(keys, r.machinePoolGroups(ctx, client.InNamespace(cluster.Namespace), f)...)
	return sortedKeys(keys)
}

// groupsOfSecret: a kubeconfig Secret's cluster's groups.
func (r *Reconciler) groupsOfSecret(ctx context.Context, s *corev1.Secret, _ bool) []GroupKey {
	name, ok := strings.CutSuffix(s.Name, KubeconfigSecretSuffix)
	if !ok || name == "" {
		return nil
	}
	return r.groupsOfCluster(ctx, ClusterRef{s.Namespace, name})
}
