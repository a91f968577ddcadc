package publisher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Cluster API's kubeconfig Secret of a workload cluster: <cluster>-kubeconfig in the Cluster's
// namespace, the kubeconfig under this key, labelled with the cluster's name.
const (
	KubeconfigSecretSuffix = "-kubeconfig"
	KubeconfigSecretKey    = "value"
)

// ClusterRef names a Cluster API Cluster: the workload cluster of a node group in management
// mode.
type ClusterRef struct{ Namespace, Name string }

func (c ClusterRef) String() string { return c.Namespace + "/" + c.Name }

// ClusterOf returns the workload cluster of a group object: its spec.clusterName, else its
// cluster.x-k8s.io/cluster-name label.
func ClusterOf(obj client.Object) ClusterRef {
	name := ""
	switch o := obj.(type) {
	case *clusterv1.MachineDeployment:
		name = o.Spec.ClusterName
	case *clusterv1.MachineSet:
		name = o.Spec.ClusterName
	case *clusterv1.Machine:
		name = o.Spec.ClusterName
	case *clusterv1.MachinePool:
		name = o.Spec.ClusterName
	}
	if name == "" {
		name = obj.GetLabels()[clusterv1.ClusterNameLabel]
	}
	return ClusterRef{obj.GetNamespace(), name}
}

// WorkloadClusters keeps one informer cache of Nodes and ResourceSlices per workload cluster,
// built from the cluster's kubeconfig Secret in the management cluster. A cache is started on
// first use, replaced when the Secret's kubeconfig changes (rotation), and stopped when the
// Secret goes away. Each cluster is probed every ProbeInterval; a cluster that does not answer
// (or whose cache never synced) is unreachable and Reader says why, so that its groups keep
// their annotations rather than lose their nodes.
//
// Per-cluster caches rather than a multi-cluster library: the publisher needs two read-only
// kinds per workload cluster and nothing else of a multi-cluster manager, and a cache per
// kubeconfig makes rotation a plain stop and start.
type WorkloadClusters struct {
	// Secrets reads kubeconfig Secrets (the manager's cache).
	Secrets client.Reader
	Scheme  *runtime.Scheme
	// SyncTimeout bounds the wait for a new cache's first sync; ProbeInterval is how often a
	// cluster's API server is asked for its version.
	SyncTimeout, ProbeInterval time.Duration
	// QPS and Burst of each workload cluster's client.
	QPS   float32
	Burst int
	// Reachable is a gauge per cluster: 1 reachable, 0 not.
	Reachable *prometheus.GaugeVec
	// OnNode is called for each relevant Node or ResourceSlice event of a workload cluster with
	// the node's name; it maps it to groups and enqueues them. OnCluster is called when a
	// cluster becomes reachable or unreachable.
	OnNode    func(ctx context.Context, c ClusterRef, node string, deleted bool)
	OnCluster func(ctx context.Context, c ClusterRef)

	// drivers and slices say which ResourceSlices the caches keep and how (nodeCacheObjects);
	// slices nil keeps them whole.
	drivers []string
	slices  *sliceStripper

	mu       sync.Mutex
	ctx      context.Context
	clusters map[ClusterRef]*workloadCluster
}

type workloadCluster struct {
	hash   string
	cache  cache.Cache
	cancel context.CancelFunc

	mu  sync.Mutex
	err error
}

func (w *workloadCluster) state() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// notSyncedError: a cache has not synced within the timeout.
type notSyncedError struct{ timeout time.Duration }

func (e notSyncedError) Error() string {
	return fmt.Sprintf("its Nodes and ResourceSlices did not sync within %s", e.timeout)
}

// setState records a probe's outcome and reports whether reachability changed.
func (w *workloadCluster) setState(err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := (w.err == nil) != (err == nil)
	w.err = err
	return changed
}

// Start keeps the manager's context for the caches it starts, and stops them all when it ends.
// It is a manager.Runnable that runs only while the publisher leads.
func (w *WorkloadClusters) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	<-ctx.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	for ref, c := range w.clusters {
		c.cancel()
		delete(w.clusters, ref)
	}
	return nil
}

// Reader returns the cache of a workload cluster's Nodes and ResourceSlices (with the
// slice-by-node index), or why the cluster cannot be read now.
func (w *WorkloadClusters) Reader(ctx context.Context, ref ClusterRef) (client.Reader, error) {
	if ref.Name == "" {
		return nil, fmt.Errorf("the node group names no Cluster (spec.clusterName, label %s)", clusterv1.ClusterNameLabel)
	}
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name + KubeconfigSecretSuffix}
	if err := w.Secrets.Get(ctx, key, secret); err != nil {
		w.stop(ref)
		return nil, fmt.Errorf("reading kubeconfig Secret %s of cluster %s: %w", key, ref, err)
	}
	kubeconfig := secret.Data[KubeconfigSecretKey]
	if len(kubeconfig) == 0 {
		w.stop(ref)
		return nil, fmt.Errorf("kubeconfig Secret %s has no key %q", key, KubeconfigSecretKey)
	}
	sum := sha256.Sum256(kubeconfig)
	hash := hex.EncodeToString(sum[:])

	w.mu.Lock()
	c, ok := w.clusters[ref]
	if !ok || c.hash != hash {
		if ok {
			// A rotated kubeconfig: the old cache's credentials may be revoked already.
			klog.FromContext(ctx).Info("Kubeconfig of workload cluster changed, restarting its cache", "cluster", ref)
			c.cancel()
		}
		var err error
		if c, err = w.start(ref, kubeconfig, hash); err != nil {
			delete(w.clusters, ref)
			w.mu.Unlock()
			w.setReachable(ref, false)
			return nil, fmt.Errorf("workload cluster %s: %w", ref, err)
		}
		if w.clusters == nil {
			w.clusters = map[ClusterRef]*workloadCluster{}
		}
		w.clusters[ref] = c
	}
	w.mu.Unlock()

	if state := c.state(); !ok || state != nil {
		// A new cache, or one not synced yet: wait a little for the first sync. An error
		// of the prober (the server stopped answering after the sync) stays until the
		// prober clears it.
		syncCtx, cancel := context.WithTimeout(ctx, w.SyncTimeout)
		synced := c.cache.WaitForCacheSync(syncCtx)
		cancel()
		var ns notSyncedError
		switch {
		case !synced && state == nil:
			c.setState(notSyncedError{w.SyncTimeout})
		case synced && (state == nil || errors.As(state, &ns)):
			c.setState(nil)
		}
	}
	if err := c.state(); err != nil {
		w.setReachable(ref, false)
		return nil, fmt.Errorf("workload cluster %s is unreachable: %w", ref, err)
	}
	w.setReachable(ref, true)
	return c.cache, nil
}

func (w *WorkloadClusters) setReachable(ref ClusterRef, ok bool) {
	if w.Reachable == nil {
		return
	}
	v := 0.0
	if ok {
		v = 1
	}
	w.Reachable.WithLabelValues(ref.Namespace, ref.Name).Set(v)
}

// stop ends a cluster's cache (its Secret is gone).
func (w *WorkloadClusters) stop(ref ClusterRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.clusters[ref]; ok {
		c.cancel()
		delete(w.clusters, ref)
	}
}

// start creates and starts a cluster's cache and its prober; w.mu is held.
func (w *WorkloadClusters) start(ref ClusterRef, kubeconfig []byte, hash string) (*workloadCluster, error) {
	if w.ctx == nil {
		return nil, fmt.Errorf("not started")
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = w.QPS, w.Burst
	cfg.UserAgent = Name
	cfg.Timeout = w.SyncTimeout
	c, err := cache.New(cfg, cache.Options{Scheme: w.Scheme, ByObject: nodeCacheObjects(w.drivers, w.slices)})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(w.ctx)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("workloadCluster", ref))
	if err := AddNodeIndexes(ctx, c); err != nil {
		cancel()
		return nil, err
	}
	if err := w.watch(ctx, ref, c); err != nil {
		cancel()
		return nil, err
	}
	wc := &workloadCluster{hash: hash, cache: c, cancel: cancel}
	go func() {
		if err := c.Start(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Workload cluster cache stopped")
		}
	}()
	go w.probe(ctx, ref, wc, cfg)
	return wc, nil
}

// watch forwards the Node and ResourceSlice events of a workload cluster that matter.
func (w *WorkloadClusters) watch(ctx context.Context, ref ClusterRef, c cache.Cache) error {
	for _, obj := range []client.Object{&corev1.Node{}, &resourceapi.ResourceSlice{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		nodeOf := func(o any, deleted bool) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			switch v := o.(type) {
			case *corev1.Node:
				w.OnNode(ctx, ref, v.Name, deleted)
			case *resourceapi.ResourceSlice:
				if v.Spec.NodeName != nil {
					w.OnNode(ctx, ref, *v.Spec.NodeName, false)
				}
			}
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { nodeOf(o, false) },
			UpdateFunc: func(o, n any) {
				if relevantWorkloadUpdate(o, n) {
					nodeOf(n, false)
				}
			},
			DeleteFunc: func(o any) { nodeOf(o, true) },
		}); err != nil {
			return err
		}
	}
	return nil
}

func relevantWorkloadUpdate(o, n any) bool {
	switch ov := o.(type) {
	case *corev1.Node:
		nv, ok := n.(*corev1.Node)
		return ok && relevantNodeUpdate(ov, nv)
	case *resourceapi.ResourceSlice:
		nv, ok := n.(*resourceapi.ResourceSlice)
		return ok && relevantSliceUpdate(ov, nv)
	}
	return true
}

// probe asks the cluster's API server for its version every ProbeInterval and records whether
// it answers (and the cache has synced); a change is reported through OnCluster.
func (w *WorkloadClusters) probe(ctx context.Context, ref ClusterRef, wc *workloadCluster, cfg *rest.Config) {
	logger := klog.FromContext(ctx)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		logger.Error(err, "Workload cluster probe")
		return
	}
	t := time.NewTicker(w.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := dc.ServerVersion()
		if err == nil {
			syncCtx, cancel := context.WithTimeout(ctx, time.Second)
			if !wc.cache.WaitForCacheSync(syncCtx) {
				err = fmt.Errorf("its Nodes and ResourceSlices have not synced")
			}
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		if wc.setState(err) {
			if err != nil {
				logger.Info("Workload cluster unreachable", "err", err)
			} else {
				logger.Info("Workload cluster reachable again")
			}
			w.setReachable(ref, err == nil)
			w.OnCluster(ctx, ref)
		}
	}
}

// enqueueChannel adapts group keys to a controller-runtime channel source.
func enqueueChannel(ch chan<- event.TypedGenericEvent[GroupKey], keys []GroupKey) {
	for _, k := range keys {
		ch <- event.TypedGenericEvent[GroupKey]{Object: k}
	}
}
