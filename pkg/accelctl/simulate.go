// Package accelctl is the logic of the accelctl command: showing a node group's template,
// seeding one, and simulating whether a new node of a group could satisfy ResourceClaims, with
// the scheduler's own DRA allocator, on accel-dra's template and on the template the Cluster
// Autoscaler's clusterapi provider builds by itself from dra-driver and gpu-count, as released
// and with the merged slice-count fix. Everything but the commands' API access works without a
// cluster.
package accelctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// TemplateNodeName is the name of the simulated node; it is a valid node name that no real node
// is expected to have.
const TemplateNodeName = "template-node"

// SimulateInput is what Simulate needs.
type SimulateInput struct {
	// Group names the node group in the report.
	Group string
	// Annotations of the group object.
	Annotations map[string]string
	// Classes are the cluster's DeviceClasses.
	Classes []*resourceapi.DeviceClass
	// Claims must all be allocated on the one new node (as for one pod).
	Claims []*resourceapi.ResourceClaim
	// Pod, when set, must also be allowed on the node: its node selector, required node affinity
	// and tolerations (nodefit.go).
	Pod *corev1.Pod
	// Timeout bounds each verdict's allocation, as the scheduler's DRA filter is bounded
	// (DynamicResourcesArgs.filterTimeout); zero means DefaultTimeout.
	Timeout time.Duration
	// Features are the allocator features of the scheduler to model (FeatureGates.Features
	// turns its --feature-gates into them); nil means DefaultFeatures, kube-scheduler 1.37
	// with its default gates.
	Features *structured.Features
}

// DefaultTimeout is kube-scheduler 1.37's default DRA filter timeout: past it the scheduler
// gives the node up for this attempt and retries the pod later, so an allocation that takes
// longer does not make a pod schedule, nor (in the autoscaler's simulation) a group scale up.
const DefaultTimeout = 10 * time.Second

// Report is the outcome of Simulate.
type Report struct {
	Group string `json:"group"`
	// Template is the verdict on accel-dra's template (template.accel-dra.io annotations).
	Template Verdict `json:"template"`
	// Builtin is the verdict on the template the autoscaler's clusterapi provider invents from
	// capacity.cluster-autoscaler.kubernetes.io/dra-driver and gpu-count, with the merged fix
	// that announces its pool's one slice (resourceSliceCount 1).
	Builtin Verdict `json:"builtin"`
	// Pinned is the verdict on the same devices as the provider builds them without that fix
	// (every release up to the autoscaler commit accel-dra pins): a pool that announces no
	// slices, which the allocator treats as incomplete.
	Pinned Verdict `json:"pinned"`
}

// Verdict says whether the claims fit a template node.
type Verdict struct {
	// Available is false when the group has no such template; Fits is then false too.
	Available bool `json:"available"`
	// Description of the template node's devices.
	Description string `json:"description"`
	Fits        bool   `json:"fits"`
	// Reason why not, when the allocator says so.
	Reason string `json:"reason,omitempty"`
	// Error is set when the allocator failed rather than found no devices, for example on a
	// CEL selector that reads an attribute the template node's devices lack. The scheduler
	// then reports an error for the node; the autoscaler does not scale the group up.
	Error bool `json:"error,omitempty"`
	// Undecided is set when the allocator found no answer within the timeout; Fits is false.
	// The scheduler's filter ends the same way (an error for the node, the pod retried).
	Undecided bool `json:"undecided,omitempty"`
	// Allocations per claim when it fits.
	Allocations []ClaimAllocation `json:"allocations,omitempty"`
}

// ClaimAllocation lists the devices the allocator picked for one claim.
type ClaimAllocation struct {
	Claim   string   `json:"claim"`
	Devices []string `json:"devices"`
}

// Simulate runs the structured allocator (as the scheduler's and the autoscaler's DRA plugin
// do) on a new node of the group: with the devices of the group's accel-dra template, with the
// devices the autoscaler's clusterapi provider invents from dra-driver and gpu-count, and with
// those devices in a pool as the provider announced it before the slice-count fix. An allocator error (a CEL selector that fails on a device, for example because it
// reads an attribute the device does not have) makes a verdict "does not fit" with Error set,
// as it makes the scheduler reject the node. An error from Simulate means the group's
// annotations cannot be turned into a node.
func Simulate(ctx context.Context, in SimulateInput) (*Report, error) {
	rep := &Report{Group: in.Group}
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	var features structured.Features
	if in.Features != nil {
		features = *in.Features
	} else {
		features = DefaultFeatures()
	}
	node, err := nodegroup.TemplateNode(TemplateNodeName, in.Annotations)
	if err != nil {
		return nil, fmt.Errorf("node group %s: %w", in.Group, err)
	}

	tmpl, err := template.Decode(in.Annotations)
	switch {
	case errors.Is(err, template.ErrNoTemplate):
		rep.Template.Description = "no template.accel-dra.io annotations: the autoscaler's template node has no devices of accel-dra's template"
	case err != nil:
		rep.Template.Description = fmt.Sprintf("the template does not decode (%v): an autoscaler would ignore it", err)
	default:
		slices, err := tmpl.ResourceSlices(TemplateNodeName)
		if err != nil {
			return nil, err
		}
		rep.Template.Available = true
		rep.Template.Description = describe(slices)
		if err := allocate(ctx, features, timeout, &rep.Template, node, slices, in.Classes, in.Claims); err != nil {
			return nil, err
		}
	}

	builtin, err := nodegroup.BuiltinSlices(in.Annotations, TemplateNodeName)
	switch {
	case err != nil:
		rep.Builtin.Description = fmt.Sprintf("invalid autoscaler DRA keys (%v)", err)
	case builtin == nil:
		rep.Builtin.Description = "no dra-driver and gpu-count annotations: the autoscaler's template node has no devices"
	default:
		rep.Builtin.Available = true
		rep.Builtin.Description = fmt.Sprintf("dra-driver=%s gpu-count=%s: devices with only type=\"gpu\"; ",
			in.Annotations[nodegroup.DRADriverKey], in.Annotations[nodegroup.GPUCountKey]) + describe(builtin)
		if err := allocate(ctx, features, timeout, &rep.Builtin, node, builtin, in.Classes, in.Claims); err != nil {
			return nil, err
		}
		pinned := make([]*resourceapi.ResourceSlice, len(builtin))
		for i, s := range builtin {
			pinned[i] = s.DeepCopy()
			pinned[i].Spec.Pool.ResourceSliceCount = 0
		}
		rep.Pinned.Available = true
		rep.Pinned.Description = "the same devices in a pool with resourceSliceCount 0 (provider without the slice-count fix)"
		if err := allocate(ctx, features, timeout, &rep.Pinned, node, pinned, in.Classes, in.Claims); err != nil {
			return nil, err
		}
	}
	if !rep.Pinned.Available {
		rep.Pinned.Description = rep.Builtin.Description
	}
	if reason := podNodeMismatch(in.Pod, node); reason != "" {
		for _, v := range []*Verdict{&rep.Template, &rep.Builtin} {
			if v.Available {
				v.Fits, v.Allocations, v.Reason = false, nil, reason
			}
		}
	}
	return rep, nil
}

func describe(slices []*resourceapi.ResourceSlice) string {
	count := map[string]int{}
	var drivers []string
	for _, s := range slices {
		if _, ok := count[s.Spec.Driver]; !ok {
			drivers = append(drivers, s.Spec.Driver)
		}
		count[s.Spec.Driver] += len(s.Spec.Devices)
	}
	parts := make([]string, len(drivers))
	for i, d := range drivers {
		parts[i] = fmt.Sprintf("%d devices of %s", count[d], d)
	}
	if len(parts) == 0 {
		return "no devices"
	}
	return strings.Join(parts, ", ")
}

func allocate(ctx context.Context, features structured.Features, timeout time.Duration, v *Verdict, node *corev1.Node, slices []*resourceapi.ResourceSlice, classes []*resourceapi.DeviceClass, claims []*resourceapi.ResourceClaim) error {
	// The scheduler refuses a claim whose class does not exist before it allocates; so do we,
	// with its words.
	lister := classLister(classes)
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			var names []string
			if r.Exactly != nil {
				names = append(names, r.Exactly.DeviceClassName)
			}
			for _, sub := range r.FirstAvailable {
				names = append(names, sub.DeviceClassName)
			}
			for _, n := range names {
				if _, err := lister.Get(n); err != nil {
					v.Reason = fmt.Sprintf("claim %s request %s: device class %s does not exist", c.Name, r.Name, n)
					return nil
				}
			}
		}
	}
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	cache := cel.NewCache(100, cel.Features{EnableConsumableCapacity: features.ConsumableCapacity, EnableListTypeAttributes: features.ListTypeAttributes})
	a, err := structured.NewAllocator(ctx, features, state, lister, slices, cache)
	if err != nil {
		return fmt.Errorf("creating the allocator: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results, err := a.Allocate(actx, node, claims)
	switch {
	case err != nil && ctx.Err() != nil:
		// Ended by the caller, not by the bound.
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		v.Undecided = true
		v.Reason = fmt.Sprintf("undecided: the allocator found no answer within %v (kube-scheduler's DRA filter gives up on the node after the same time by default, and the autoscaler does not scale up for it)", timeout)
		return nil
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		v.Reason = err.Error()
		return nil
	case err != nil:
		v.Reason, v.Error = err.Error(), true
		return nil
	case len(results) != len(claims):
		v.Reason = "cannot allocate all claims"
		return nil
	}
	v.Fits = true
	for i, r := range results {
		ca := ClaimAllocation{Claim: claims[i].Namespace + "/" + claims[i].Name}
		for _, d := range r.Devices.Results {
			ca.Devices = append(ca.Devices, fmt.Sprintf("%s: %s/%s", d.Request, d.Driver, d.Device))
		}
		v.Allocations = append(v.Allocations, ca)
	}
	return nil
}

// classLister serves DeviceClasses from a list, as the scheduler's informer does.
type classLister []*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l, nil }

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// WriteText prints a report for people.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Node group %s: would a new node satisfy the claims?\n", r.Group)
	for _, v := range []struct {
		name string
		v    Verdict
	}{
		{"accel-dra template", r.Template},
		{"autoscaler built-in (dra-driver/gpu-count), with the slice-count fix", r.Builtin},
		{"autoscaler built-in as released (resourceSliceCount 0)", r.Pinned},
	} {
		verdict := "NO"
		switch {
		case v.v.Fits:
			verdict = "YES"
		case v.v.Undecided:
			verdict = "UNDECIDED"
		}
		fmt.Fprintf(&b, "  %s: %s\n    template node: %s\n", v.name, verdict, v.v.Description)
		switch {
		case v.v.Error:
			fmt.Fprintf(&b, "    allocator error: %s\n", v.v.Reason)
		case v.v.Reason != "":
			fmt.Fprintf(&b, "    reason: %s\n", v.v.Reason)
		}
		for _, a := range v.v.Allocations {
			fmt.Fprintf(&b, "    claim %s: %s\n", a.Claim, strings.Join(a.Devices, ", "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
