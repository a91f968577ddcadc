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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
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

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
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

	stripper := newSliceStripper(o.Drivers, buildOptions(o))
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
		maps.Copy(byObject, nodeCacheObjects(o.Drivers, stripper))
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
	r.slices = stripper
	if management {
		r.Workloads = &WorkloadClusters{
			Secrets: mgr.GetClient(), Scheme: scheme,
			SyncTimeout: o.WorkloadSyncTimeout, ProbeInterval: o.WorkloadProbeInterval,
			QPS: o.Kube.QPS, Burst: o.Kube.Burst,
			Reachable: r.Metrics.WorkloadReachable,
			drivers:   o.Drivers, slices: stripper,
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
// Read-only here and the bulk of the cache at scale: no deep copies; Nodes without what the
// publisher does not read (stripNode); ResourceSlices of the served drivers only, each folded
// into its shape and identity values (slicecache.go). With one driver the API server filters
// the slices (a field selector on spec.driver); with several, which a field selector cannot
// say, the transform keeps only the name, driver and node of another driver's slice.
func nodeCacheObjects(drivers []string, slices *sliceStripper) map[client.Object]cache.ByObject {
	sliceCache := cache.ByObject{Transform: cache.TransformStripManagedFields(), UnsafeDisableDeepCopy: new(true)}
	if slices != nil {
		sliceCache.Transform = slices.transform
	}
	if len(drivers) == 1 {
		sliceCache.Field = fields.OneTermEqualSelector(resourceSliceDriverField, drivers[0])
	}
	return map[client.Object]cache.ByObject{
		&corev1.Node{}:               {Transform: stripNode, UnsafeDisableDeepCopy: new(true)},
		&resourceapi.ResourceSlice{}: sliceCache,
	}
}

// resourceSliceDriverField is the field selector the API server offers on ResourceSlices for
// their driver.
const resourceSliceDriverField = "spec.driver"

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

// stripNode keeps what the publisher reads of a Node: its name, UID and resource version, the
// labels that may describe a node group (nodegroup.CarriedLabel), taints and provider ID,
// capacity and allocatable. Managed fields, annotations, owner references, addresses, images,
// conditions and the node's info are dropped: on a large fleet they are most of a Node and
// change all the time.
func stripNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, DeletionTimestamp: n.DeletionTimestamp},
		Spec:       corev1.NodeSpec{Taints: n.Spec.Taints, ProviderID: n.Spec.ProviderID},
		Status:     corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable},
	}
	for k, v := range n.Labels {
		if nodegroup.CarriedLabel(k) {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = v
		}
	}
	return out, nil
}

// buildOptions are the template build options of o.
func buildOptions(o *Options) template.BuildOptions {
	return template.BuildOptions{IdentityAttributes: o.IdentityAttributes, KeepDeviceTaints: o.KeepDeviceTaints}
}
