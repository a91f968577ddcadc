package nodeplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	logsapi "k8s.io/component-base/logs/api/v1"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/bootid"
	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/metrics"
)

// ApplyLogging validates and applies the logging flags; call it once after flag parsing.
func (o *Options) ApplyLogging() error {
	return logsapi.ValidateAndApply(o.Logging, nil)
}

// Run runs the plugin until ctx is done.
func Run(ctx context.Context, o *Options) error {
	if err := o.Complete(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("driver", o.DriverName, "node", o.NodeName)
	ctx = klog.NewContext(ctx, logger)

	// The HTTP endpoint comes first, so that probes and people get an answer, and the metrics,
	// while the plugin starts.
	m := metrics.NewPlugin(o.DriverName)
	start := newStartup()
	if o.HTTPAddress != "" {
		srv, err := serveHTTP(ctx, o.HTTPAddress, m, start, o.Profiling)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}

	if root := o.backendDriverRoot(); root != "" && !waitForDriver(ctx, start, root, o.NVIDIAHostDriverRoot) {
		logger.Info("Shutting down")
		return nil
	}
	start.waitFor(ctx, "the device backend to enumerate the devices")
	be, err := backend.New(ctx, backend.Options{
		Name: o.Backend, MockProfile: o.MockProfile, NodeName: o.NodeName,
		SysRoot: o.SysfsRoot, DevRoot: o.DevRoot, MockDir: o.MockDir, AscendDriverRoot: o.AscendDriverRoot,
		NVIDIAProcRoot: o.NVIDIAProcRoot, NVIDIADriverRoot: o.backendDriverRoot(),
	})
	if err != nil {
		return fmt.Errorf("device backend %q: %w", o.Backend, err)
	}
	inv, err := be.Enumerate(ctx)
	if err != nil {
		err = fmt.Errorf("enumerating devices: %w", err)
	}
	var common *specs.ContainerEdits
	var src *driverSource
	if err == nil {
		start.waitFor(ctx, "the driver's CDI edits (a search of the driver root)")
		if src, err = newDriverSource(ctx, o, be, inv.Kind); err == nil {
			common, err = src.edits(ctx)
		}
		if err != nil {
			err = fmt.Errorf("CDI edits of the driver: %w", err)
		}
	}
	// Dynamic MIG keeps the backend to create and destroy MIG instances.
	var partitioner device.Partitioner
	if err == nil && o.DynamicMIG {
		if inv, partitioner, err = dynamicMIG(ctx, be, inv, o.MIGProfiles); err != nil {
			err = fmt.Errorf("dynamic MIG: %w", err)
		}
	}
	// Devices are enumerated once; unless device health or dynamic MIG needs it, nothing
	// queries the backend afterwards, so NVML is shut down (and a mock machine freed) now
	// rather than held for the life of the process (a driver change opens a backend of its
	// own, for the new driver's version).
	watcher, watchHealth := be.(health.Watcher)
	watchHealth = watchHealth && o.DeviceHealth
	closeBackend := func() {
		if cerr := be.Close(); cerr != nil {
			klog.FromContext(ctx).Error(cerr, "Closing device backend")
		}
	}
	if (!watchHealth && partitioner == nil) || err != nil {
		closeBackend()
	} else {
		defer closeBackend()
	}
	if err != nil {
		return err
	}

	start.waitFor(ctx, "the checkpoint and its lock (which the other instance of a rolling update may hold)")
	boot, err := bootid.Read(o.BootIDFile)
	if err != nil {
		return fmt.Errorf("reading boot ID: %w", err)
	}
	store, err := checkpoint.Open(o.CheckpointDir, boot)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer func() { _ = store.Close() }()

	calls := newCallMetrics(o.DriverName, m.Registry)
	cfg, err := o.Kube.RESTConfig("accel-dra-kubelet-plugin/" + o.NodeName)
	if err != nil {
		return err
	}
	cfg.Wrap(calls.wrapTransport)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	events, stopEvents := nodeEvents(kube, o.NodeName, o.DriverName)
	defer stopEvents()

	mps, err := mpsControl(o, src, inv.Kind, kube)
	if err != nil {
		return err
	}
	drv, err := driver.New(ctx, driver.Options{
		DriverName: o.DriverName, NodeName: o.NodeName, Inventory: inv,
		CDI: cdi.New(o.CDIRoot, inv.Kind), CommonEdits: common, State: store, Metrics: m, Kube: kube, Events: events,
		MIG:              partitioner,
		ConsumableMemory: o.ConsumableMemory, TimeSlicer: timeSlicer(o, src, inv.Kind),
		MPS: mps, ComputeMode: computeModeSetter(be, inv.Kind),
	})
	if err != nil {
		return err
	}
	// Deferred before the helper's Stop, so it runs after it: the instance's registration goes
	// only once no gRPC call can reach it any more, and then at once, so that the other
	// instance of a rolling update may roll back what this one left half-done without waiting
	// for the process to exit.
	defer drv.Close()
	start.waitFor(ctx, fmt.Sprintf("the checkpoint to be reconciled (the API server is asked whether prepared claims still exist, for at most %s)", driver.DefaultReconcileAPITimeout))
	if _, err := drv.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconciling checkpoint: %w", err)
	}
	if watchHealth {
		if err := enableHealth(o, drv, watcher, inv, boot); err != nil {
			return err
		}
	}

	// The kubelet creates neither directory for a plugin it has not met yet.
	for _, dir := range []string{o.PluginDataDir, o.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(o.DriverName),
		kubeletplugin.NodeName(o.NodeName),
		kubeletplugin.KubeClient(kube),
		kubeletplugin.RegistrarDirectoryPath(o.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(o.PluginDataDir),
		// The driver locks per claim; see driver.Driver.
		kubeletplugin.Serialize(false),
		// Off, the kubelet does not ask; a 1.36 kubelet would otherwise retry every 5s.
		kubeletplugin.HealthService(watchHealth),
		kubeletplugin.GRPCInterceptor(calls.interceptor),
	}
	if o.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(o.PodUID)))
	}
	var plugin kubeletplugin.DRAPlugin = drv
	if o.DeviceMetadata {
		plugin = drv.WithDeviceMetadata()
		opts = append(opts, kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
			kubeletplugin.CDIDirectory(o.CDIRoot))
	}
	start.waitFor(ctx, "the kubelet plugin's gRPC servers to start")
	helper, err := kubeletplugin.Start(ctx, plugin, opts...)
	if err != nil {
		return fmt.Errorf("starting kubelet plugin: %w", err)
	}
	defer helper.Stop()
	if err := helper.PublishResources(ctx, drv.Resources()); err != nil {
		return fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	// Records of claims the kubelet no longer needs (a prepare it cancelled that published
	// after its unprepare) and leftovers of lost GPUs are collected in the background.
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		drv.RunGC(ctx, driver.DefaultGCInterval, driver.DefaultGCGrace)
	}()
	defer func() { <-gcDone }()
	healthDone := make(chan struct{})
	go func() {
		defer close(healthDone)
		drv.RunHealth(ctx, func(ctx context.Context) error { return helper.PublishResources(ctx, drv.Resources()) })
	}()
	defer func() { <-healthDone }()
	// Start-up is the plugin's allocation peak (enumeration, building slices); hand that memory
	// back now instead of waiting for the background scavenger, so a node's steady-state RSS
	// reflects what the plugin holds.
	debug.FreeOSMemory()

	start.serving(newHealthChecker(o, helper), func() error {
		if st := helper.RegistrationStatus(); st == nil || !st.PluginRegistered {
			return errors.New("not registered with the kubelet yet")
		}
		return nil
	})
	if o.DriverCheckInterval > 0 && (src.root != "" || inv.ResolveControlNodes != nil) {
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			newDriverWatch(src, drv, common, inv.ResolveControlNodes).run(ctx, o.DriverCheckInterval)
		}()
		// Before the checkpoint and the driver close: a rewrite in progress finishes first.
		defer func() { <-watched }()
	}
	logger.Info("Plugin running", "backend", o.Backend, "devices", len(inv.Devices))
	<-ctx.Done()
	logger.Info("Shutting down")
	return nil
}

func serveHTTP(ctx context.Context, addr string, m *metrics.Plugin, start *startup, profiling bool) (*http.Server, error) {
	mux := http.NewServeMux()
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", start.serveHealthz)
	mux.HandleFunc("/readyz", start.serveReadyz)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http endpoint: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP endpoint stopped")
		}
	}()
	return srv, nil
}

type nodeEventSink struct {
	rec record.EventRecorder
	ref *corev1.ObjectReference
}

func (s nodeEventSink) Warning(reason, message string) {
	s.rec.Event(s.ref, corev1.EventTypeWarning, reason, message)
}

func (s nodeEventSink) Normal(reason, message string) {
	s.rec.Event(s.ref, corev1.EventTypeNormal, reason, message)
}

// nodeEvents reports on the Node object, where an operator looks when a node has fewer devices
// than expected.
func nodeEvents(kube kubernetes.Interface, nodeName, driverName string) (driver.EventSink, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: driverName, Host: nodeName})
	ref := &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}
	return nodeEventSink{rec: rec, ref: ref}, b.Shutdown
}
