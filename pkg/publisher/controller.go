// Package publisher is the template publisher: a controller that mirrors the ResourceSlices of
// the nodes of each Cluster API node group (a MachineDeployment, or a MachineSet without one)
// into a node group template (package template) and the Cluster Autoscaler's capacity keys
// (package nodegroup) on the group object, so that the autoscaler can scale the group up from
// zero for pods with ResourceClaims. docs/template-publisher.md describes its behaviour.
package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// Field indexes the reconciler needs on its cache (see AddIndexes).
const (
	indexMachineByNode       = "accel-dra.io/machine-node"
	indexMachineByMachineSet = "accel-dra.io/machine-machineset"
	indexMachineSetByMD      = "accel-dra.io/machineset-deployment"
	indexSliceByNode         = "accel-dra.io/slice-node"
	indexGroupByCopyFrom     = "accel-dra.io/copy-from"
	indexGroupByCluster      = "accel-dra.io/cluster"
)

// pendingRetry is how soon a group is looked at again when a node's pool was mid-update.
const pendingRetry = 5 * time.Second

// cacheWait bounds how long a reconcile waits for the cache to show its own write.
const cacheWait = 5 * time.Second

// Reconciler publishes the template of one node group per call.
type Reconciler struct {
	// Client reads from the informer cache (with the indexes of AddIndexes) and writes to the
	// API server.
	Client   client.Client
	Recorder events.EventRecorder
	Metrics  *Metrics
	// Drivers are the DRA drivers whose slices go into templates.
	Drivers      sets.Set[string]
	Config       Config
	BuildOptions template.BuildOptions
	FieldManager string
	// Workloads reads the nodes of each group's workload cluster in management mode; nil in
	// self-managed mode, where Client reads them.
	Workloads *WorkloadClusters
	// MachinePools: the API server serves MachinePools, and they are node groups too.
	MachinePools bool
	// Seeds are the seeds groups can name (nodegroup.SeedAnnotation).
	Seeds Seeds

	// slices compacts the ResourceSlices the cache did not (tests' fake clients) and expands
	// them again for Build (slicecache.go).
	slices *sliceStripper

	mu sync.Mutex
	// nodeTemplates remembers, for each node, the shape key of its slices (by the identity of
	// those slices), so that a group of many nodes is not looked at from scratch on every
	// event; templates holds one template per shape key with the number of nodes that have
	// it: a fleet of one shape keeps one template, not one per node.
	nodeTemplates map[string]nodeTemplate
	templates     map[string]*sharedTemplate
	// problems remembers each group's problems, to emit events and count conflicts only when
	// they start or change.
	problems map[GroupKey]map[string]string
}

type nodeTemplate struct {
	// ids are the UIDs and resource versions of the node's slices of the served drivers.
	ids string
	// shape is the key of templates; empty when err is set.
	shape string
	err   error
}

type sharedTemplate struct {
	t     *template.Template
	hash  string
	nodes int
}

// NewReconciler returns a reconciler for the options.
func NewReconciler(c client.Client, rec events.EventRecorder, m *Metrics, o *Options) *Reconciler {
	build := buildOptions(o)
	return &Reconciler{
		Client:       c,
		Recorder:     rec,
		Metrics:      m,
		Drivers:      sets.New(o.Drivers...),
		Config:       Config{Budget: o.TemplateBudgetBytes, GPUDriver: o.GPUDriver, StalePolicy: o.StaleTemplatePolicy},
		BuildOptions: build,
		slices:       newSliceStripper(o.Drivers, build),
		FieldManager: FieldManager,
		Seeds:        Seeds{Dir: o.SeedsDir, TemplatesDir: o.SeedTemplatesDir},
	}
}

// Reconcile looks at one node group and writes its annotations if they changed.
func (r *Reconciler) Reconcile(ctx context.Context, key GroupKey) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	obj, err := r.getGroup(ctx, key)
	if apierrors.IsNotFound(err) {
		r.forget(key)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if ms, ok := obj.(*clusterv1.MachineSet); ok && MachineDeploymentOf(ms) != "" {
		// Owned by a MachineDeployment, which is the node group.
		r.forget(key)
		return reconcile.Result{}, nil
	}

	nodeReader, cluster := client.Reader(r.Client), (*ClusterRef)(nil)
	if r.Workloads != nil {
		ref := ClusterOf(obj)
		cluster = &ref
		wr, err := r.Workloads.Reader(ctx, ref)
		if err != nil {
			// Keep whatever the group has: its nodes are not gone, only out of sight.
			r.report(ctx, key, obj, []Problem{{ReasonWorkloadClusterUnreachable, err.Error()}})
			return reconcile.Result{RequeueAfter: r.Workloads.ProbeInterval}, nil
		}
		nodeReader = wr
	}
	nodes, err := r.groupNodes(ctx, key, obj, nodeReader, cluster)
	if err != nil {
		return reconcile.Result{}, err
	}
	owners := annotationOwners(obj)
	in := Input{
		Annotations: obj.GetAnnotations(),
		Owned:       sets.New[string](),
		Foreign:     map[string]string{},
		Nodes:       nodes,
	}
	yielded := sets.New[string]()
	for k, ms := range owners {
		for _, m := range ms {
			switch {
			case m == r.FieldManager:
				in.Owned.Insert(k)
			case !nodegroup.IsManagedKey(k):
			case slices.Contains(YieldingManagers, m):
				yielded.Insert(k)
			default:
				in.Foreign[k] = m
			}
		}
	}
	if in.MachineTemplate, err = r.machineTemplateOf(ctx, key, obj, len(nodes) > 0); err != nil {
		return reconcile.Result{}, err
	}
	if v, ok := in.Annotations[nodegroup.CopyFromAnnotation]; ok && len(nodes) == 0 {
		in.CopyFrom = r.copySource(ctx, key, v)
	}
	if v, ok := in.Annotations[nodegroup.SeedAnnotation]; ok && len(nodes) == 0 {
		in.Seed = r.Seeds.Source(v, r.Config)
	}
	plan := Decide(in, r.Config)

	if plan.Apply != nil {
		if plan.Divergence != nil {
			// Said before the write that replaces the template, so that the record of what
			// the autoscaler was told precedes the new template.
			r.reportDivergence(ctx, key, obj, plan.Divergence)
		}
		// Force only to take over what a yielding manager (a seed) wrote; anyone else's key
		// is left out of the plan, and a conflict the cache did not show yet fails the apply.
		force := false
		for k, v := range plan.Apply {
			if yielded.Has(k) && in.Annotations[k] != v {
				force = true
			}
		}
		if err := r.apply(ctx, key, obj, plan.Apply, force); err != nil {
			r.Metrics.Writes.WithLabelValues("error").Inc()
			if c := conflictProblem(err); c != nil {
				// Reported now; the retry sees the other manager's ownership in the cache
				// and leaves the key out.
				r.report(ctx, key, obj, append(plan.Problems, *c))
			} else {
				r.report(ctx, key, obj, plan.Problems)
			}
			return reconcile.Result{}, fmt.Errorf("writing annotations of %s: %w", key, err)
		}
		r.Metrics.Writes.WithLabelValues("success").Inc()
		r.report(ctx, key, obj, plan.Problems)
		r.waitForCache(ctx, key, plan)
		logger.V(2).Info("Published node group annotations", "changed", plan.Changed, "hash", plan.Apply[template.HashAnnotation],
			"source", plan.Apply[nodegroup.SourceAnnotation], "templateBytes", plan.TemplateBytes, "nodes", len(nodes))
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, "TemplatePublished", "Publish",
			"node group annotations updated: template %s (%d bytes, source %s), %d nodes",
			orNone(plan.Apply[template.HashAnnotation]), plan.TemplateBytes, orNone(plan.Apply[nodegroup.SourceAnnotation]), len(nodes))
	} else {
		r.report(ctx, key, obj, plan.Problems)
		logger.V(5).Info("Node group annotations up to date", "nodes", len(nodes))
	}
	r.Metrics.TemplateBytes.WithLabelValues(key.Kind, key.Namespace, key.Name).Set(float64(plan.TemplateBytes))
	if plan.Pending {
		return reconcile.Result{RequeueAfter: pendingRetry}, nil
	}
	return reconcile.Result{}, nil
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func (r *Reconciler) getGroup(ctx context.Context, key GroupKey) (client.Object, error) {
	var obj client.Object
	switch key.Kind {
	case KindMachineDeployment:
		obj = &clusterv1.MachineDeployment{}
	case KindMachineSet:
		obj = &clusterv1.MachineSet{}
	case KindMachinePool:
		obj = &clusterv1.MachinePool{}
	default:
		return nil, fmt.Errorf("unknown node group kind %q", key.Kind)
	}
	return obj, r.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name}, obj)
}

// groupNodes returns the nodes of the group with their templates (of a MachineDeployment's
// current MachineSet; of a MachinePool by its provider IDs), read through nodes (the workload
// cluster's cache in management mode).
func (r *Reconciler) groupNodes(ctx context.Context, key GroupKey, obj client.Object, nodes client.Reader, cluster *ClusterRef) ([]NodeInput, error) {
	if mp, ok := obj.(*clusterv1.MachinePool); ok {
		return r.machinePoolNodes(ctx, mp, nodes, cluster)
	}
	names, err := r.currentNodeNames(ctx, key, obj)
	if err != nil {
		return nil, err
	}
	return r.nodeInputs(ctx, names, nodes, cluster)
}

// currentNodeNames returns the names of the nodes of the Machines of a MachineDeployment's
// current MachineSet, or of a bare MachineSet.
func (r *Reconciler) currentNodeNames(ctx context.Context, key GroupKey, obj client.Object) ([]string, error) {
	ms, ok := obj.(*clusterv1.MachineSet)
	if !ok {
		var list clusterv1.MachineSetList
		if err := r.Client.List(ctx, &list, client.InNamespace(key.Namespace), client.MatchingFields{indexMachineSetByMD: key.Name}); err != nil {
			return nil, fmt.Errorf("listing MachineSets of %s: %w", key, err)
		}
		sets := make([]*clusterv1.MachineSet, len(list.Items))
		for i := range list.Items {
			sets[i] = &list.Items[i]
		}
		if ms = CurrentMachineSet(sets); ms == nil {
			return nil, nil
		}
	}
	var machines clusterv1.MachineList
	if err := r.Client.List(ctx, &machines, client.InNamespace(key.Namespace), client.MatchingFields{indexMachineByMachineSet: ms.Name}); err != nil {
		return nil, fmt.Errorf("listing Machines of MachineSet %s/%s: %w", ms.Namespace, ms.Name, err)
	}
	seen := sets.New[string]()
	var names []string
	for i := range machines.Items {
		name := machines.Items[i].Status.NodeRef.Name
		if name == "" || seen.Has(name) {
			continue
		}
		seen.Insert(name)
		names = append(names, name)
	}
	return names, nil
}

// nodeInputs returns the named nodes that exist with their templates, sorted by name.
func (r *Reconciler) nodeInputs(ctx context.Context, names []string, nodes client.Reader, cluster *ClusterRef) ([]NodeInput, error) {
	var out []NodeInput
	for _, name := range names {
		node := &corev1.Node{}
		if err := nodes.Get(ctx, types.NamespacedName{Name: name}, node); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("getting node %s: %w", name, err)
		}
		var sliceList resourceapi.ResourceSliceList
		if err := nodes.List(ctx, &sliceList, client.MatchingFields{indexSliceByNode: name}); err != nil {
			return nil, fmt.Errorf("listing ResourceSlices of node %s: %w", name, err)
		}
		out = append(out, r.nodeTemplate(nodeCacheKey(cluster, name), node, sliceList.Items))
	}
	slices.SortFunc(out, func(a, b NodeInput) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	return out, nil
}

// nodeTemplate returns the template of a node's slices of the served drivers: the one of its
// shape (shapeKey), built from the first node of that shape.
func (r *Reconciler) nodeTemplate(cacheName string, node *corev1.Node, all []resourceapi.ResourceSlice) NodeInput {
	in := NodeInput{Node: node}
	var mine []*resourceapi.ResourceSlice
	ids := make([]string, 0, len(all))
	for i := range all {
		s := &all[i]
		if !r.Drivers.Has(s.Spec.Driver) {
			continue
		}
		mine = append(mine, s)
		ids = append(ids, string(s.UID)+"@"+s.ResourceVersion)
	}
	if len(mine) == 0 {
		r.setNodeTemplate(cacheName, nil)
		return in
	}
	slices.Sort(ids)
	idKey := strings.Join(ids, ",")

	r.mu.Lock()
	cached, ok := r.nodeTemplates[cacheName]
	var shared *sharedTemplate
	if ok && cached.ids == idKey && cached.err == nil {
		shared = r.templates[cached.shape]
	}
	r.mu.Unlock()
	if shared != nil {
		in.Template, in.Hash = shared.t, shared.hash
		return in
	}

	nt := nodeTemplate{ids: idKey}
	shared, nt.shape, nt.err = r.buildShared(node.Name, mine)
	r.setNodeTemplate(cacheName, &nt)
	if nt.err != nil {
		in.Err = nt.err
		return in
	}
	in.Template, in.Hash = shared.t, shared.hash
	return in
}

// buildShared finds the shape of a node's slices and returns its template, building it when
// no node of that shape had one yet. The template is registered by setNodeTemplate.
func (r *Reconciler) buildShared(node string, mine []*resourceapi.ResourceSlice) (*sharedTemplate, string, error) {
	cs := make([]*resourceapi.ResourceSlice, len(mine))
	for i, s := range mine {
		if cs[i] = s; !compacted(s) {
			// Not from the publisher's cache (a client without its transform).
			var err error
			if cs[i], err = r.slices.compact(s.DeepCopy()); err != nil {
				return nil, "", err
			}
		}
	}
	shape, err := shapeKey(node, cs)
	if err != nil {
		return nil, "", err
	}
	r.mu.Lock()
	shared := r.templates[shape]
	r.mu.Unlock()
	if shared != nil {
		return shared, shape, nil
	}
	expanded := make([]resourceapi.ResourceSlice, len(cs))
	for i, c := range cs {
		if expanded[i], err = r.slices.expandSlice(c); err != nil {
			return nil, "", err
		}
	}
	t, err := template.Build(expanded, r.BuildOptions)
	if err != nil {
		return nil, "", err
	}
	hash, err := t.Hash()
	if err != nil {
		return nil, "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.templates == nil {
		r.templates = map[string]*sharedTemplate{}
	}
	if shared = r.templates[shape]; shared == nil {
		// Not counted yet: setNodeTemplate counts the node.
		shared = &sharedTemplate{t: t, hash: hash}
		r.templates[shape] = shared
	}
	return shared, shape, nil
}

// setNodeTemplate records a node's shape (nil: it has none) and keeps the count of nodes per
// shape, dropping a template no node has any more.
func (r *Reconciler) setNodeTemplate(cacheName string, nt *nodeTemplate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, had := r.nodeTemplates[cacheName]
	if had && old.err == nil {
		if s := r.templates[old.shape]; s != nil {
			if s.nodes--; s.nodes <= 0 {
				delete(r.templates, old.shape)
			}
		}
	}
	if nt == nil {
		delete(r.nodeTemplates, cacheName)
		return
	}
	if nt.err == nil {
		if s := r.templates[nt.shape]; s != nil {
			s.nodes++
		}
	}
	if r.nodeTemplates == nil {
		r.nodeTemplates = map[string]nodeTemplate{}
	}
	r.nodeTemplates[cacheName] = *nt
}

// nodeCacheKey names a node in the template cache: node names repeat across workload clusters.
func nodeCacheKey(cluster *ClusterRef, node string) string {
	if cluster == nil {
		return node
	}
	return cluster.String() + "/" + node
}

// ForgetNode drops a deleted node's cached template (name from nodeCacheKey).
func (r *Reconciler) ForgetNode(name string) {
	r.setNodeTemplate(name, nil)
}

func (r *Reconciler) copySource(ctx context.Context, key GroupKey, value string) *CopySource {
	ns, name, err := ParseCopyFrom(key.Namespace, value)
	if err != nil {
		return &CopySource{Ref: value, Err: err}
	}
	src := &CopySource{Ref: ns + "/" + name}
	if key.Kind == KindMachineDeployment && ns == key.Namespace && name == key.Name {
		src.Err = fmt.Errorf("a group cannot copy from itself")
		return src
	}
	md := &clusterv1.MachineDeployment{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, md); err != nil {
		if !apierrors.IsNotFound(err) {
			src.Err = err
		}
		return src
	}
	src.Annotations = md.Annotations
	if src.Annotations == nil {
		src.Annotations = map[string]string{}
	}
	return src
}

// apply writes the publisher's annotations with server-side apply: the keys in ann get these
// values, and keys the publisher applied before but left out now are removed. The object's UID
// is a precondition, so a group deleted and re-created meanwhile is not touched. Without force,
// a key another manager owns with another value fails the whole apply (a conflict).
func (r *Reconciler) apply(ctx context.Context, key GroupKey, obj client.Object, ann map[string]string, force bool) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": clusterv1.GroupVersion.String(),
		"kind":       key.Kind,
		"metadata": map[string]any{
			"name":        key.Name,
			"namespace":   key.Namespace,
			"uid":         obj.GetUID(),
			"annotations": ann,
		},
	})
	if err != nil {
		return err
	}
	opts := []client.PatchOption{client.FieldOwner(r.FieldManager)}
	if force {
		opts = append(opts, client.ForceOwnership)
	}
	return r.Client.Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, body), opts...)
}

// conflictManager finds the manager in a server-side apply conflict cause's message:
// `conflict with "kubectl-annotate" using cluster.x-k8s.io/v1beta2`.
var conflictManager = regexp.MustCompile(`conflict with "([^"]*)"`)

// conflictProblem turns a server-side apply conflict on annotations into a problem, nil for
// any other error.
func conflictProblem(err error) *Problem {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return nil
	}
	var conflicts []string
	for _, c := range status.Status().Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		k, ok := strings.CutPrefix(c.Field, ".metadata.annotations.")
		if !ok {
			continue
		}
		m := "?"
		if sub := conflictManager.FindStringSubmatch(c.Message); sub != nil {
			m = sub[1]
		}
		conflicts = append(conflicts, fmt.Sprintf("%s (manager %q)", k, m))
	}
	if len(conflicts) == 0 {
		return nil
	}
	slices.Sort(conflicts)
	return &Problem{ReasonAnnotationConflict,
		"annotations set by another field manager are left alone (remove them to let the publisher manage them): " + strings.Join(conflicts, ", ")}
}

// waitForCache waits (briefly) until the informer cache shows the annotations just written.
// Without it, an event queued meanwhile (another node's slice of the same rollout) makes the next
// reconcile read the object from before the write and write the same values again.
func (r *Reconciler) waitForCache(ctx context.Context, key GroupKey, plan Plan) {
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, cacheWait, true, func(ctx context.Context) (bool, error) {
		obj, err := r.getGroup(ctx, key)
		if err != nil {
			return false, nil
		}
		ann := obj.GetAnnotations()
		for k, v := range plan.Apply {
			if ann[k] != v {
				return false, nil
			}
		}
		for _, k := range plan.Changed {
			if _, want := plan.Apply[k]; !want {
				if _, ok := ann[k]; ok {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		// Someone else changed the object meanwhile; the next event sorts it out.
		klog.FromContext(ctx).V(4).Info("Cache did not show the write in time", "err", err)
	}
}

// report emits an event and counts a conflict when a problem starts, logs when its message
// changes, and keeps the per-reason gauge current.
func (r *Reconciler) report(ctx context.Context, key GroupKey, obj client.Object, problems []Problem) {
	now := map[string]string{}
	for _, p := range problems {
		now[p.Reason] = p.Message
	}
	r.mu.Lock()
	before := r.problems[key]
	if len(now) == 0 {
		delete(r.problems, key)
	} else {
		if r.problems == nil {
			r.problems = map[GroupKey]map[string]string{}
		}
		r.problems[key] = now
	}
	r.mu.Unlock()

	for _, reason := range Reasons {
		_, was := before[reason]
		_, is := now[reason]
		switch {
		case is && !was:
			r.Metrics.GroupsWithProblems.WithLabelValues(reason).Inc()
			r.Metrics.Conflicts.WithLabelValues(reason).Inc()
		case was && !is:
			r.Metrics.GroupsWithProblems.WithLabelValues(reason).Dec()
			klog.FromContext(ctx).Info("Node group problem resolved", "reason", reason)
		}
		switch {
		case is && !was:
			klog.FromContext(ctx).Info("Node group problem", "reason", reason, "message", now[reason])
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Publish", "%s", now[reason])
		case is && before[reason] != now[reason]:
			// Only logged: while a driver rolls out node by node the message changes with
			// every node, and an event each time would be noise.
			klog.FromContext(ctx).V(2).Info("Node group problem changed", "reason", reason, "message", now[reason])
		}
	}
}

// forget drops what is remembered about a group that no longer is one.
func (r *Reconciler) forget(key GroupKey) {
	r.report(context.Background(), key, nil, nil)
	r.Metrics.TemplateBytes.DeleteLabelValues(key.Kind, key.Namespace, key.Name)
}

// YieldingManagers are the field managers whose annotations the publisher takes over (with a
// forced apply) when its own nodes give a value: `accelctl template seed` writes a seed that is
// meant to be replaced by the group's own nodes.
var YieldingManagers = []string{"accelctl"}

// annotationOwners returns, for each annotation key in the object's managed fields, the field
// managers that own it, sorted.
func annotationOwners(obj metav1.Object) map[string][]string {
	out := map[string][]string{}
	for _, mf := range obj.GetManagedFields() {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Metadata struct {
				Annotations map[string]json.RawMessage `json:"f:annotations"`
			} `json:"f:metadata"`
		}
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			continue
		}
		for k := range maps.Keys(fields.Metadata.Annotations) {
			if name, ok := strings.CutPrefix(k, "f:"); ok && !slices.Contains(out[name], mf.Manager) {
				out[name] = append(out[name], mf.Manager)
			}
		}
	}
	for _, ms := range out {
		slices.Sort(ms)
	}
	return out
}
