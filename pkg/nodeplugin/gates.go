package nodeplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/serverfeatures"
)

// What the plugin does when kube-apiserver drops fields of its ResourceSlices (--dropped-fields).
const (
	// DroppedFieldsRefuse: a Warning event on the Node, 503 on /healthz and /readyz, the
	// plugin's ResourceSlices withdrawn, and exit status 1.
	DroppedFieldsRefuse = "refuse"
	// DroppedFieldsWarn: the Warning event and an error in the log; the plugin keeps serving
	// the slices as the server stored them.
	DroppedFieldsWarn = "warn"
)

// ReasonFieldsDropped is the reason of the Node event naming the gates.
const ReasonFieldsDropped = "ResourceSliceFieldsDropped"

// publishCheckTimeout bounds the wait for the server to hold the first publish; the slice
// controller creates the slices at once, so only a server in trouble takes this long, and
// then the controller's own reports (gatedPlugin) still catch a dropped field.
const publishCheckTimeout = 30 * time.Second

// gateCheck compares what the server stored with what the plugin published, after the first
// publish (verify) and, through the slice controller's reports, on every later one (a device
// taint appears only when a device fails).
type gateCheck struct {
	mode                 string
	kube                 kubernetes.Interface
	driverName, nodeName string
	eventsNamespace      string
	warnings             driver.EventSink

	mu sync.Mutex
	// refusal is what the server dropped, in refuse mode; refused is closed when it is set.
	refusal *serverfeatures.DroppedError
	refused chan struct{}
}

func newGateCheck(o *Options, kube kubernetes.Interface, warnings driver.EventSink) *gateCheck {
	return &gateCheck{
		mode: o.DroppedFields, kube: kube, driverName: o.DriverName, nodeName: o.NodeName,
		eventsNamespace: o.EventsNamespace, warnings: warnings,
		refused: make(chan struct{}),
	}
}

// report acts on dropped fields as the mode says; in refuse mode it sets the refusal, which
// Run picks up. complete replaces an earlier report: the read-back of the whole first
// publish says more than the slice controller's report of one slice.
func (g *gateCheck) report(ctx context.Context, err *serverfeatures.DroppedError, complete bool) {
	if g.mode == DroppedFieldsRefuse {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.refusal == nil {
			close(g.refused)
		}
		if g.refusal == nil || complete {
			g.refusal = err
		}
		return
	}
	klog.FromContext(ctx).Error(err, "ResourceSlices published without the fields named, as --dropped-fields=warn allows", "gates", err.Gates())
	g.warnings.Warning(ReasonFieldsDropped, err.Error())
}

// refusalNow returns the refusal, nil if none.
func (g *gateCheck) refusalNow() *serverfeatures.DroppedError {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refusal
}

// selector picks the driver's slices on this node.
func (g *gateCheck) selector() string {
	return fields.AndSelectors(
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, g.driverName),
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, g.nodeName),
	).String()
}

// verify reads back the slices of the first publish once the server holds them all and
// reports what it dropped, with probed (what probes found). Not seeing the slices within
// publishCheckTimeout is no refusal of its own.
func (g *gateCheck) verify(ctx context.Context, desired map[string]resourceslice.Pool, probed []serverfeatures.Drop) {
	logger := klog.FromContext(ctx)
	var drops []serverfeatures.Drop
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, publishCheckTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := g.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: g.selector()})
		if err != nil {
			logger.V(2).Info("Listing the published ResourceSlices", "err", err)
			return false, nil
		}
		var published bool
		drops, published = serverfeatures.ComparePools(desired, list.Items)
		return published, nil
	})
	if err != nil {
		logger.Info("The server did not hold every published ResourceSlice in time; the slice controller's reports check them", "timeout", publishCheckTimeout)
		drops = nil
	}
	if drops = append(probed, drops...); len(drops) > 0 {
		g.report(ctx, &serverfeatures.DroppedError{Drops: drops}, true)
	}
}

// dryRun creates every slice of desired with a dry run and returns what the server would
// drop: the check of the first publish before it happens, so that a plugin that refuses has
// published nothing (during a rolling update the node's slices are the other instance's). An
// error (an invalid slice, a server without dry run) is logged and no refusal: the publish
// reports it, and the read-back after it checks what the server kept.
func (g *gateCheck) dryRun(ctx context.Context, desired map[string]resourceslice.Pool) []serverfeatures.Drop {
	var drops []serverfeatures.Drop
	for _, name := range slices.Sorted(maps.Keys(desired)) {
		pool := desired[name]
		for i := range pool.Slices {
			want := &pool.Slices[i]
			s := &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{GenerateName: g.nodeName + "-" + g.driverName + "-dry-run-"},
				Spec: resourceapi.ResourceSliceSpec{
					Driver: g.driverName, NodeName: &g.nodeName,
					Pool:                   resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
					Devices:                want.Devices,
					SharedCounters:         want.SharedCounters,
					PerDeviceNodeSelection: want.PerDeviceNodeSelection,
					PartitionTypeAttribute: want.PartitionTypeAttribute,
					SkipNodeOperations:     want.SkipNodeOperations,
				},
			}
			got, err := g.kube.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				klog.FromContext(ctx).Error(err, "Dry-run ResourceSlice; what the server keeps is checked after the publish", "pool", name, "slice", i)
				continue
			}
			drops = append(drops, serverfeatures.CompareSlice(name, want, serverfeatures.FromAPI(got))...)
		}
	}
	return drops
}

// probeTaints asks the server, with a dry-run create of a slice holding one tainted device,
// whether it keeps device taints, and returns the drop if it does not. An error (a server without dry
// run, a webhook refusing it) is logged and not a refusal: the slice controller's reports
// still catch a dropped taint when one is published.
func (g *gateCheck) probeTaints(ctx context.Context) []serverfeatures.Drop {
	drops, err := g.probe(ctx, resourceapi.Device{
		Name:   "dry-run-probe",
		Taints: []resourceapi.DeviceTaint{{Key: g.driverName + "/probe", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Dry-run ResourceSlice with a device taint; whether the server keeps taints is checked when one is published")
	}
	return drops
}

// probe dry-run creates a slice of one device and returns what the server dropped of it.
func (g *gateCheck) probe(ctx context.Context, dev resourceapi.Device) ([]serverfeatures.Drop, error) {
	want := resourceslice.Slice{Devices: []resourceapi.Device{dev}}
	probe := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: g.nodeName + "-" + g.driverName + "-probe-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: g.driverName, NodeName: &g.nodeName,
			Pool:    resourceapi.ResourcePool{Name: g.nodeName, Generation: 1, ResourceSliceCount: 1},
			Devices: want.Devices,
		},
	}
	got, err := g.kube.ResourceV1().ResourceSlices().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return nil, err
	}
	return serverfeatures.CompareSlice(g.nodeName, &want, serverfeatures.FromAPI(got)), nil
}

// refuse records the refusal where an operator looks (the Node's events) and, with withdraw
// (the plugin published), deletes the slices so that no scheduler allocates from what the
// server kept of them. The event
// is created directly, not through the recorder, whose queue the exit would cut short.
func (g *gateCheck) refuse(ctx context.Context, err *serverfeatures.DroppedError, withdraw bool) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	recordNodeWarning(ctx, g.kube, g.eventsNamespace, g.nodeName, g.driverName, ReasonFieldsDropped, err.Error())
	if !withdraw {
		return
	}
	list, lerr := g.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: g.selector()})
	if lerr != nil {
		logger.Error(lerr, "Listing the ResourceSlices to withdraw")
		return
	}
	for _, s := range list.Items {
		derr := g.kube.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if derr != nil {
			logger.Error(derr, "Withdrawing a ResourceSlice", "slice", klog.KObj(&s))
		}
	}
}

// gatedPlugin hands the slice controller's dropped-fields reports to the gate check; the
// driver's HandleError still logs every error.
type gatedPlugin struct {
	kubeletplugin.DRAPlugin
	check *gateCheck
}

func (p gatedPlugin) HandleError(ctx context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) && dropped.DesiredSlice != nil && dropped.ActualSlice != nil {
		drops := serverfeatures.CompareSlice(dropped.PoolName, serverfeatures.FromAPI(dropped.DesiredSlice), serverfeatures.FromAPI(dropped.ActualSlice))
		if len(drops) > 0 {
			p.check.report(ctx, &serverfeatures.DroppedError{Drops: drops}, false)
		}
	}
	p.DRAPlugin.HandleError(ctx, err, msg)
}

func checkDroppedFieldsMode(mode string) error {
	if mode != DroppedFieldsRefuse && mode != DroppedFieldsWarn {
		return fmt.Errorf("--dropped-fields=%q: want %s or %s", mode, DroppedFieldsRefuse, DroppedFieldsWarn)
	}
	return nil
}
