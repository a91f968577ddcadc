// Package otherdrivers keeps a kubelet plugin from publishing a device that another DRA driver
// already publishes on the same node (docs/migrate-from-nvidia.md, "Two drivers, one GPU").
//
// Two drivers that publish one GPU each hand it out on their own: a claim of either can get the
// GPU the other gave away, and nothing on the node stops two containers from using it. The
// only place both publications meet is the API server, so the plugin watches the
// ResourceSlices of its node, reads the device UUIDs other drivers name there (their uuid and
// parentUUID attributes, the names NVIDIA's DRA driver and this one use), and leaves out of its
// own slices every device whose UUID or parent UUID is among them. It yields rather than
// competes: the other driver may be one (NVIDIA's) that never looks at anyone else's slices.
// A device left out is only unpublished: a claim this plugin already prepared on it keeps
// working and is unprepared as usual; the device comes back once the other driver's slices no
// longer name it.
//
// The state is the watch's cache of the node's slices; Claimed is derived from it on every
// change and owned by whoever called Watch.
package otherdrivers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// uuidAttributes are the attribute names, without their domain, whose values are device UUIDs:
// NVIDIA's driver and this one publish a GPU's or MIG device's UUID as uuid and a MIG device's
// GPU as parentUUID (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go).
var uuidAttributes = []string{"uuid", "parentUUID"}

// Claimed maps a device UUID to the other drivers whose slices on the node name it, sorted.
type Claimed map[string][]string

// Equal reports whether c and o name the same UUIDs with the same drivers.
func (c Claimed) Equal(o Claimed) bool {
	return maps.EqualFunc(c, o, slices.Equal[[]string])
}

// Scan returns the UUIDs that the slices of node name for drivers other than own.
func Scan(list []*resourceapi.ResourceSlice, own, node string) Claimed {
	found := map[string]map[string]bool{}
	for _, s := range list {
		if s.Spec.Driver == own || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		for i := range s.Spec.Devices {
			for _, u := range deviceUUIDs(&s.Spec.Devices[i]) {
				if found[u] == nil {
					found[u] = map[string]bool{}
				}
				found[u][s.Spec.Driver] = true
			}
		}
	}
	out := make(Claimed, len(found))
	for u, drivers := range found {
		out[u] = slices.Sorted(maps.Keys(drivers))
	}
	return out
}

// deviceUUIDs are the UUIDs a device's attributes name, in its driver's domain (unqualified)
// or any other.
func deviceUUIDs(d *resourceapi.Device) []string {
	var out []string
	for name, a := range d.Attributes {
		n := string(name)
		if i := strings.LastIndex(n, "/"); i >= 0 {
			n = n[i+1:]
		}
		if slices.Contains(uuidAttributes, n) && a.StringValue != nil && *a.StringValue != "" {
			out = append(out, *a.StringValue)
		}
	}
	return out
}

// Withheld is a device left out of the slices because another driver names its UUID (or its
// parent's).
type Withheld struct {
	Device  string
	UUID    string
	Drivers []string
}

func (w Withheld) String() string {
	return fmt.Sprintf("%s (%s: %s)", w.Device, w.UUID, strings.Join(w.Drivers, ", "))
}

// Withhold returns res without the devices whose UUID or parent UUID claimed names, and those
// devices sorted by name. res is not changed. A pool's shared counters stay: a counter nobody
// consumes is harmless, and the slices that carry counters keep their shape.
func Withhold(res resourceslice.DriverResources, claimed Claimed) (resourceslice.DriverResources, []Withheld) {
	if len(claimed) == 0 {
		return res, nil
	}
	var withheld []Withheld
	out := resourceslice.DriverResources{Pools: make(map[string]resourceslice.Pool, len(res.Pools))}
	for name, pool := range res.Pools {
		p := pool
		p.Slices = make([]resourceslice.Slice, len(pool.Slices))
		for i, s := range pool.Slices {
			s.Devices = slices.DeleteFunc(slices.Clone(s.Devices), func(d resourceapi.Device) bool {
				for _, u := range deviceUUIDs(&d) {
					if drivers, ok := claimed[u]; ok {
						withheld = append(withheld, Withheld{Device: d.Name, UUID: u, Drivers: drivers})
						return true
					}
				}
				return false
			})
			p.Slices[i] = s
		}
		out.Pools[name] = p
	}
	slices.SortFunc(withheld, func(a, b Withheld) int { return strings.Compare(a.Device, b.Device) })
	return out, withheld
}

// Watch watches the ResourceSlices of node and calls changed with what drivers other than own
// name, once the cache has synced and again on every change of it, from one goroutine, until
// ctx is done. It returns once the first call has returned, or with the error that kept the
// cache from syncing.
func Watch(ctx context.Context, kube kubernetes.Interface, own, node string, changed func(context.Context, Claimed)) error {
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return kube.ResourceV1().ResourceSlices().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return kube.ResourceV1().ResourceSlices().Watch(ctx, o)
		},
	}
	// As client-go's generated informers do: a client that cannot stream the initial list (the
	// fake clientset) says so, and is listed instead.
	informer := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, kube), &resourceapi.ResourceSlice{}, cache.SharedIndexInformerOptions{})
	// Changes are coalesced: the handler only signals, one goroutine rescans the whole cache.
	kick := make(chan struct{}, 1)
	signal := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	}); err != nil {
		return err
	}
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("watching the ResourceSlices of node %s: %w", node, context.Cause(ctx))
	}
	scan := func() Claimed {
		var list []*resourceapi.ResourceSlice
		for _, o := range informer.GetStore().List() {
			list = append(list, o.(*resourceapi.ResourceSlice))
		}
		return Scan(list, own, node)
	}
	last := scan()
	changed(ctx, last)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
			if now := scan(); !now.Equal(last) {
				klog.FromContext(ctx).V(2).Info("Devices other drivers publish on the node changed", "uuids", len(now))
				last = now
				changed(ctx, now)
			}
		}
	}()
	return nil
}
