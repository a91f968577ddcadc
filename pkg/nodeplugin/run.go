package nodeplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	logsapi "k8s.io/component-base/logs/api/v1"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend"
	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/bootid"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/health"
	"github.com/accel-dra/accel-dra/pkg/metrics"
	"github.com/accel-dra/accel-dra/pkg/otherdrivers"
	"github.com/accel-dra/accel-dra/pkg/serverfeatures"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

// ApplyLogging validates and applies the logging flags; call it once after flag parsing.
func (o *Options) ApplyLogging() error {
	return logsapi.ValidateAndApply(o.Logging, nil)
}

// ErrExecAgain is returned (wrapped) by Run when the plugin must start again in a new process
// (ExecAgain): the driver's NVML library was replaced, and a process calls the library it
// loaded first for as long as it lives (LibraryReplacedError).
var ErrExecAgain = errors.New("the plugin must start again in a new process")

// ExecAgain replaces this process with a new one of the same executable, arguments and
// environment (execve of /proc/self/exe, which names the executable even if its file was
// replaced): the container and its pod stay, no restart is counted or backed off, and the new
// process loads the driver's libraries afresh. It returns only on failure.
func ExecAgain() error {
	return syscall.Exec("/proc/self/exe", os.Args, os.Environ())
}

// Run runs the plugin until ctx is done.
func Run(ctx context.Context, o *Options) error {
	if err := o.Complete(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("driver", o.DriverName, "node", o.NodeName)
	ctx = klog.NewContext(ctx, logger)
	// Before anything touches the node: never beside NVIDIA's DRA driver on its GPUs
	// (compat.go). The refusal ends the process; the pod's status and a Node event say why.
	if err := o.nvidiaPluginGone(ctx); err != nil {
		if kube, kerr := o.eventsClient(); kerr == nil {
			recordNodeWarning(ctx, kube, o.EventsNamespace, o.NodeName, o.DriverName, ReasonNVIDIADriverServes, err.Error())
		}
		return err
	}
	// A refusal (gates.go) ends the background work as a signal does.
	ctx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()

	// The HTTP endpoint comes first, so that probes and people get an answer, and the metrics,
	// while the plugin starts.
	m, calls := newMetrics(o.DriverName)
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
	beOpts := backend.Options{
		Name: o.Backend, MockProfile: o.MockProfile, NodeName: o.NodeName,
		SysRoot: o.SysfsRoot, DevRoot: o.DevRoot, MockDir: o.MockDir, AscendDriverRoot: o.AscendDriverRoot,
		NVIDIAProcRoot: o.NVIDIAProcRoot, NVIDIADriverRoot: o.backendDriverRoot(), NVIDIAHostDriverRoot: o.backendHostDriverRoot(),
	}
	be, err := backend.New(ctx, beOpts)
	var inv *device.Inventory
	if err != nil {
		err = fmt.Errorf("device backend %q: %w", o.Backend, err)
	} else if inv, err = be.Enumerate(ctx); err != nil {
		err = fmt.Errorf("enumerating devices: %w", err)
	}
	// A driver upgraded without a reboot (mismatch.go): serve the last enumeration, tainted.
	var mismatch error
	if errors.Is(err, nvmlbackend.ErrVersionMismatch) {
		// The reason claims are refused with: the library's error, not how it was found.
		mismatch = cmp.Or(errors.Unwrap(err), err)
		logger.Error(err, "NVML refuses the driver: serving the devices last enumerated, tainted, until the versions agree again")
		if be != nil {
			_ = be.Close()
			be = nil
		}
		if inv, err = loadInventory(o.PluginDataDir, device.KindGPU); err != nil {
			err = fmt.Errorf("%w; and the last enumeration cannot be read: %w", mismatch, err)
		}
	} else if err != nil && be != nil {
		_ = be.Close()
	}
	if err != nil {
		return err
	}
	if mismatch == nil {
		if serr := saveInventory(o.PluginDataDir, inv); serr != nil {
			logger.Error(serr, "Cannot keep the enumeration for a start after a driver upgrade without reboot")
		}
	}
	var common *specs.ContainerEdits
	var src *driverSource
	if mismatch == nil {
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
	if mismatch != nil && o.DynamicMIG {
		partitioner = mismatchedPartitioner{reason: mismatch}
	} else if err == nil && o.DynamicMIG {
		if inv, partitioner, err = dynamicMIG(ctx, be, inv, o.MIGProfiles); err != nil {
			err = fmt.Errorf("dynamic MIG: %w", err)
		}
	}
	// Devices are enumerated once; unless device health or dynamic MIG needs it, nothing
	// queries the backend afterwards, so NVML is shut down (and a mock machine freed) now
	// rather than held for the life of the process (a driver change opens a backend of its
	// own, for the new driver's version).
	watcher, watchHealth := be.(health.Watcher)
	watchHealth = (watchHealth || mismatch != nil) && o.DeviceHealth
	closeBackend := func() {
		if be == nil {
			return
		}
		if cerr := be.Close(); cerr != nil {
			klog.FromContext(ctx).Error(cerr, "Closing device backend")
		}
	}
	if (!watchHealth && partitioner == nil) || err != nil || mismatch != nil {
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

	// Node-wide hardware events are counted by one plugin process of the node (metrics.Reporter).
	defer electReporter(ctx, o, m)()
	cfg, err := o.Kube.RESTConfig("accel-dra-kubelet-plugin/" + o.NodeName)
	if err != nil {
		return err
	}
	cfg.Wrap(calls.wrapTransport)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	events, stopEvents := nodeEvents(ctx, kube, o.NodeName, o.DriverName, o.EventsNamespace)
	defer stopEvents()
	// Work beside the start-up, not in it: a slow or unreachable API server must not hold the
	// plugin back (the start-up waits for it only where /healthz says so), and this work only
	// labels or warns. It ends before the events sink stops.
	var beside sync.WaitGroup
	defer beside.Wait()
	if inv.Kind == device.KindGPU {
		checkRuntimeExposure(ctx, o.hostRoot(), events)
		// The label is for pod affinity; the devices carry their fabricClique either way.
		beside.Go(func() { labelFabricClique(ctx, kube, o, inv, events) })
	}
	start.waitFor(ctx, "the container runtime to show whether it applies CDI devices (the CDI canary: a container created and removed through --runtime-endpoint)")
	canaryAnswered, withhold := checkRuntimeCanary(ctx, o, events)
	beside.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if canaryAnswered {
			return
		}
		if node, err := kube.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{}); err == nil {
			checkRuntimeCDI(ctx, o.hostRoot(), node.Status.NodeInfo.ContainerRuntimeVersion, events)
		} else {
			logger.Error(err, "Cannot read the Node's container runtime version; not checking whether it injects CDI devices")
		}
	})

	var mps *sharing.MPS
	var slicer sharing.TimeSlicer
	if mismatch == nil {
		slicer = timeSlicer(o, src, inv.Kind)
		if mps, err = mpsControl(o, src, inv.Kind, kube); err != nil {
			return err
		}
	} else {
		events.Warning(ReasonDriverVersionMismatch, fmt.Sprintf("%s: %v. The plugin serves the %d devices it last enumerated, tainted %s/%s, unprepares claims and refuses new ones until the versions agree; it then restarts to enumerate again (docs/troubleshooting.md)", o.DriverName, mismatch, len(inv.Devices), o.DriverName, health.CauseDriver))
	}
	if mps != nil {
		mps.Daemons = countedDaemons{Daemons: mps.Daemons, m: m}
	}
	if partitioner != nil {
		partitioner = countedPartitioner{Partitioner: partitioner, m: m}
	}
	cliques := nvlinkCliquesKept(ctx, newGateCheck(o, kube, events), inv)
	drv, err := driver.New(ctx, driver.Options{
		DriverName: o.DriverName, NodeName: o.NodeName, Inventory: inv,
		CDI: o.cdiWriter(ctx, inv.Kind, events), CommonEdits: common, State: store, Metrics: m, Kube: kube, Events: events,
		MIG:              partitioner,
		ConsumableMemory: o.ConsumableMemory, TimeSlicer: slicer,
		MPS: mps, ComputeMode: computeModeSetter(be, inv.Kind),
		// NVIDIA compatibility mode (compat.go); nil and empty without it.
		ConfigTranslator: o.configTranslator(), ConfigApplies: o.configApplies(), TaintKeys: o.taintKeys(),
		Attributes: withNVLinkCliques(o.attributes(), cliques),
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
		if err := enableHealth(o, drv, watcher, mismatch, inv, boot, m); err != nil {
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
	if mismatch != nil {
		plugin = mismatchedPlugin{DRAPlugin: plugin, prepared: drv.PreparedClaims, reason: mismatch}
	}
	gates := newGateCheck(o, kube, events)
	plugin = gatedPlugin{DRAPlugin: plugin, check: gates}
	var helper *kubeletplugin.Helper
	// withdraw: the plugin published the slices the server dropped fields of.
	refuse := func(dropped *serverfeatures.DroppedError, withdraw bool) error {
		logger.Error(dropped, "Refusing to run: the API server does not keep what the plugin publishes", "gates", dropped.Gates())
		start.refuse(dropped.Error())
		// The helper stops first, or its slice controller would publish the slices again.
		helper.Stop()
		gates.refuse(ctx, dropped, withdraw)
		cancelRun()
		return fmt.Errorf("refusing to run: %w", dropped)
	}
	// What the server would keep of the first publish, asked with dry runs before the plugin
	// registers or publishes anything. Taints are published only when a device fails: whether
	// the server keeps them is asked now too, rather than when the first device fails.
	// Devices another DRA driver publishes on this node are left out of the slices, in every
	// mode (otherdrivers.go): the plugin yields them rather than hand them out a second time.
	published := drv.Resources
	if withhold {
		// The runtime ignores CDI (checkRuntimeCanary): no device, so that no pod is scheduled
		// to one its container cannot get.
		published = func() resourceslice.DriverResources { return resourceslice.DriverResources{} }
	}
	yield := &yielding{driverName: o.DriverName, resources: published, events: normalEvents(events)}
	start.waitFor(ctx, "the node's ResourceSlices, for devices other DRA drivers publish")
	if err := otherdrivers.Watch(ctx, kube, o.DriverName, o.NodeName, yield.set); err != nil {
		return err
	}
	start.waitFor(ctx, "the API server to say what it keeps of the ResourceSlices (dry runs)")
	first := yield.Resources(ctx)
	var taintDrops []serverfeatures.Drop
	if effects, _ := health.ParseEffects(o.DeviceTaintEffects); watchHealth && len(effects) > 0 {
		taintDrops = gates.probeTaints(ctx)
	}
	if o.DroppedFields == DroppedFieldsRefuse {
		if drops := append(gates.dryRun(ctx, first.Pools), taintDrops...); len(drops) > 0 {
			return refuse(&serverfeatures.DroppedError{Drops: drops}, false)
		}
	}
	start.waitFor(ctx, "the kubelet plugin's gRPC servers to start")
	helper, err = kubeletplugin.Start(ctx, plugin, opts...)
	if err != nil {
		return fmt.Errorf("starting kubelet plugin: %w", err)
	}
	defer helper.Stop()
	if err := helper.PublishResources(ctx, first); err != nil {
		return fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	// A field whose feature gate is off is dropped without an error: read the slices back
	// before serving (docs/versions.md).
	start.waitFor(ctx, "the API server to store the ResourceSlices, to check that it kept every field")
	// The read-back checks what the server kept (another apiserver than the dry runs', in a
	// control plane being upgraded); in warn mode it is the one report, with the taint probe's.
	gates.verify(ctx, first.Pools, taintDrops)
	if dropped := gates.refusalNow(); dropped != nil {
		return refuse(dropped, true)
	}
	// From now on every publish goes through yield; one that another driver's slices changed
	// since the first is published at once.
	if yield.start(helper.PublishResources) {
		if err := yield.Publish(ctx); err != nil {
			return fmt.Errorf("publishing ResourceSlices: %w", err)
		}
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
		drv.RunHealth(ctx, yield.Publish)
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
	libraryReplaced := make(chan *LibraryReplacedError, 1)
	if src != nil && o.DriverCheckInterval > 0 && (src.root != "" || inv.ResolveControlNodes != nil) {
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			w := newDriverWatch(src, drv, common, inv.ResolveControlNodes)
			w.changed = m.CountDriverChange
			w.replaced = func(ctx context.Context, e *LibraryReplacedError) {
				klog.FromContext(ctx).Info("The driver's NVML library was replaced: starting the plugin again in a new process, which loads it (the CDI edits, the health watch and the published devices follow it there)", "library", e.Found, "processLibrary", e.Bound)
				libraryReplaced <- e
			}
			w.run(ctx, o.DriverCheckInterval)
		}()
		// Before the checkpoint and the driver close: a rewrite in progress finishes first.
		defer func() { <-watched }()
	}
	agreed := make(chan struct{})
	if mismatch != nil {
		go func() {
			if awaitVersionsAgree(ctx, beOpts, cmp.Or(o.DriverCheckInterval, defaultVersionsAgreePoll)) {
				close(agreed)
			}
		}()
	}
	logger.Info("Plugin running", "backend", o.Backend, "devices", len(inv.Devices), "driverVersionMismatch", mismatch != nil)
	select {
	case <-agreed:
		// The kubelet starts the container again (exit status 0 or not), and the new process
		// enumerates with NVML: simpler and surer than rebuilding every part in place.
		logger.Info("NVML accepts the driver again: exiting to start afresh and enumerate the devices")
		// The background work ends with the context, before the deferred waits for it.
		cancelRun()
		return nil
	case e := <-libraryReplaced:
		cancelRun()
		return fmt.Errorf("%w: %w", ErrExecAgain, e)
	case <-ctx.Done():
	case <-gates.refused:
		return refuse(gates.refusalNow(), true)
	}
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
