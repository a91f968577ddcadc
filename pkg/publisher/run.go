package publisher

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/pprof"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// NewScheme returns a scheme with the Kubernetes and Cluster API v1beta2 types.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := clusterv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Run runs the publisher until ctx is done (with --leader-elect, only while it leads).
func Run(ctx context.Context, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	ctrl.SetLogger(logger)
	cfg, err := o.Kube.RESTConfig(Name)
	if err != nil {
		return err
	}
	scheme, err := NewScheme()
	if err != nil {
		return err
	}

	byObject := map[client.Object]cache.ByObject{
		&clusterv1.Machine{}: {Transform: cache.TransformStripManagedFields()},
		// MachineDeployments and MachineSets keep their managed fields: they say which
		// annotations the publisher owns.
	}
	management := o.Mode == ModeManagement
	if management {
		// Only Cluster API's kubeconfig Secrets (labelled with their cluster), and of those
		// only the kubeconfig.
		sel, err := labels.Parse(clusterv1.ClusterNameLabel)
		if err != nil {
			return err
		}
		byObject[&corev1.Secret{}] = cache.ByObject{Label: sel, Transform: stripSecret}
	} else {
		maps.Copy(byObject, nodeCacheObjects())
	}
	cacheOpts := cache.Options{ByObject: byObject}
	if o.WatchNamespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{o.WatchNamespace: {}}
	}
	metricsOpts := metricsserver.Options{BindAddress: o.MetricsBindAddress}
	if o.Profiling {
		metricsOpts.ExtraHandlers = map[string]http.Handler{
			"/debug/pprof/":        http.HandlerFunc(pprof.Index),
			"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
			"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
			"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
			"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
		}
	}
	leaseDuration, renewDeadline, retryPeriod := o.LeaseDuration, o.RenewDeadline, o.RetryPeriod
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        logger,
		Cache:                         cacheOpts,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
	})
	if err != nil {
		return fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	r := NewReconciler(mgr.GetClient(), mgr.GetEventRecorder(Name), NewMetrics(ctrlmetrics.Registry), o)
	if management {
		r.Workloads = &WorkloadClusters{
			Secrets: mgr.GetClient(), Scheme: scheme,
			SyncTimeout: o.WorkloadSyncTimeout, ProbeInterval: o.WorkloadProbeInterval,
			QPS: o.Kube.QPS, Burst: o.Kube.Burst,
			Reachable: r.Metrics.WorkloadReachable,
			// The controller may reconcile before the manager has started the registry
			// (both are leader-election runnables, in no set order).
			ctx: ctx,
		}
	}
	if err := r.SetupWithManager(ctx, mgr, o.Workers); err != nil {
		return fmt.Errorf("setting up the controller: %w", err)
	}
	logger.Info("Starting", "mode", o.Mode, "drivers", o.Drivers, "budget", o.TemplateBudgetBytes, "watchNamespace", o.WatchNamespace, "leaderElect", o.LeaderElect)
	return mgr.Start(ctx)
}

// nodeCacheObjects are the cache settings of the kinds read from the cluster that has the nodes.
// Read-only here and the bulk of the cache at scale: no deep copies, no managed fields, no image
// lists.
func nodeCacheObjects() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Node{}:               {Transform: stripNode, UnsafeDisableDeepCopy: new(true)},
		&resourceapi.ResourceSlice{}: {Transform: cache.TransformStripManagedFields(), UnsafeDisableDeepCopy: new(true)},
	}
}

// stripSecret keeps only the kubeconfig of a Cluster API kubeconfig Secret; other Secrets of a
// cluster (certificates, tokens) are not kept in memory at all.
func stripSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	s.ManagedFields = nil
	data := s.Data
	s.Data, s.StringData = nil, nil
	if strings.HasSuffix(s.Name, KubeconfigSecretSuffix) {
		if v, ok := data[KubeconfigSecretKey]; ok {
			s.Data = map[string][]byte{KubeconfigSecretKey: v}
		}
	}
	return s, nil
}

// stripNode keeps what the publisher reads of a Node: metadata without managed fields, spec,
// capacity and allocatable.
func stripNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	n.Status = corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable}
	return n, nil
}
