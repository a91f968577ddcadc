package nodegroup

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/accel-dra/accel-dra/pkg/template"
)

// Capacity returns the capacity keys of a node group from its nodes: cpu, memory,
// ephemeral-disk and maxPods, each the smallest value among the nodes, taken from
// status.allocatable (what the scheduler checks; status.capacity when allocatable lacks it) so
// that the autoscaler never expects more room on a new node than a real one has; and labels
// and taints that all the nodes have in common and that describe the group rather than one
// machine (see CarriedLabel and CarriedTaint). A key is absent when no node reports it (labels
// and taints when none qualify). nodes is not modified.
func Capacity(nodes []*corev1.Node) map[string]string {
	out := map[string]string{}
	if len(nodes) == 0 {
		return out
	}
	for key, name := range map[string]corev1.ResourceName{
		CPUKey:           corev1.ResourceCPU,
		MemoryKey:        corev1.ResourceMemory,
		EphemeralDiskKey: corev1.ResourceEphemeralStorage,
		MaxPodsKey:       corev1.ResourcePods,
	} {
		q, ok := minResource(nodes, name)
		if !ok {
			continue
		}
		if name == corev1.ResourcePods {
			out[key] = strconv.FormatInt(q.Value(), 10)
		} else {
			out[key] = q.String()
		}
	}
	if l := commonLabels(nodes); l != "" {
		out[LabelsKey] = l
	}
	if t := commonTaints(nodes); t != "" {
		out[TaintsKey] = t
	}
	return out
}

func minResource(nodes []*corev1.Node, name corev1.ResourceName) (resource.Quantity, bool) {
	var found resource.Quantity
	ok := false
	for _, n := range nodes {
		q, has := n.Status.Allocatable[name]
		if !has {
			q, has = n.Status.Capacity[name]
		}
		if !has || q.Sign() <= 0 {
			continue
		}
		if !ok || q.Cmp(found) < 0 {
			found, ok = q.DeepCopy(), true
		}
	}
	return found, ok
}

// CarriedLabel reports whether a node label may describe a node group. Dropped:
// kubernetes.io/hostname (per machine; the autoscaler sets it for a template node itself),
// node-role.kubernetes.io/* (roles are assigned to machines after they join, not a property of
// what the group creates), and Cluster API's own bookkeeping in *.cluster.x-k8s.io domains
// except node.cluster.x-k8s.io/*, which Cluster API copies from the MachineDeployment's machine
// template to every node of the group.
func CarriedLabel(key string) bool {
	if key == corev1.LabelHostname {
		return false
	}
	domain, _, hasDomain := strings.Cut(key, "/")
	if !hasDomain {
		return true
	}
	switch {
	case domain == "node-role.kubernetes.io":
		return false
	case domain == "node.cluster.x-k8s.io":
		return true
	case domain == "cluster.x-k8s.io" || strings.HasSuffix(domain, ".cluster.x-k8s.io"):
		return false
	}
	return true
}

// CarriedTaint reports whether a node taint describes a node group rather than the current
// state of one node. Dropped: node.kubernetes.io/* (not-ready, unreachable, unschedulable,
// pressure conditions, out-of-service), node.cloudprovider.kubernetes.io/* (uninitialized,
// shutdown), Cluster API's taints in *.cluster.x-k8s.io domains (uninitialized, outdated
// revision), and the autoscaler's own ToBeDeletedByClusterAutoscaler and
// DeletionCandidateOfClusterAutoscaler.
func CarriedTaint(t corev1.Taint) bool {
	switch t.Key {
	case "ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler":
		return false
	}
	domain, _, hasDomain := strings.Cut(t.Key, "/")
	if !hasDomain {
		return true
	}
	switch {
	case domain == "node.kubernetes.io", domain == "node.cloudprovider.kubernetes.io":
		return false
	case domain == "cluster.x-k8s.io" || strings.HasSuffix(domain, ".cluster.x-k8s.io"):
		return false
	}
	return true
}

// commonLabels returns "k1=v1,k2=v2" (sorted by key) of the carried labels every node has with
// the same value.
func commonLabels(nodes []*corev1.Node) string {
	var keys []string
	for k, v := range nodes[0].Labels {
		if !CarriedLabel(k) {
			continue
		}
		common := true
		for _, n := range nodes[1:] {
			if w, ok := n.Labels[k]; !ok || w != v {
				common = false
				break
			}
		}
		if common {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + nodes[0].Labels[k]
	}
	return strings.Join(parts, ",")
}

// commonTaints returns "key=value:Effect,key:Effect" (sorted) of the carried taints every node
// has.
func commonTaints(nodes []*corev1.Node) string {
	type taint struct {
		key, value string
		effect     corev1.TaintEffect
	}
	has := func(n *corev1.Node, t taint) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(u corev1.Taint) bool {
			return u.Key == t.key && u.Value == t.value && u.Effect == t.effect
		})
	}
	var common []taint
	for _, t := range nodes[0].Spec.Taints {
		if !CarriedTaint(t) {
			continue
		}
		c := taint{t.Key, t.Value, t.Effect}
		if slices.Contains(common, c) {
			continue
		}
		all := true
		for _, n := range nodes[1:] {
			if !has(n, c) {
				all = false
				break
			}
		}
		if all {
			common = append(common, c)
		}
	}
	slices.SortFunc(common, func(a, b taint) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.value, b.value), cmp.Compare(a.effect, b.effect))
	})
	parts := make([]string, len(common))
	for i, t := range common {
		if t.value == "" {
			parts[i] = fmt.Sprintf("%s:%s", t.key, t.effect)
		} else {
			parts[i] = fmt.Sprintf("%s=%s:%s", t.key, t.value, t.effect)
		}
	}
	return strings.Join(parts, ",")
}

// DRA returns the dra-driver, gpu-count and dra-pool keys for a template: the driver of its
// whole accelerators (WholeDevices) and their number over all its pools, if it has any. Released
// autoscalers invent that many devices with only the attribute type=gpu for the template node
// (see BuiltinSlices), which any class of the driver matches, so the count must be what a claim
// for whole devices can really get on a new node: counting partitions (208 "GPUs" on an 8×H100
// dynamic-MIG node) made the autoscaler add nodes for claims no node can satisfy. A node with
// none (static MIG: only partitions) gets no keys: a stock autoscaler then expects no devices of
// the driver, and only accel-dra's template describes the node. dra-pool is written only when
// exactly one pool of the driver has whole devices, so that it names the pool gpu-count counts: the
// driver name followed by the pool's suffix (a valid pool name, unique per driver and pool on
// the node and the same on every node of the shape; the autoscaler suffixes pool names per
// simulated node anyway).
//
// The driver is chosen per template (LegacyDriver), so that an NPU group names the NPU driver
// and a GPU group the GPU driver with one publisher. preferred ("--autoscaler-gpu-driver") only
// decides for a template with whole devices of more than one driver, which the keys cannot
// express; an empty preferred, or a template without whole devices, gives no keys.
func DRA(t *template.Template, preferred string) map[string]string {
	out := map[string]string{}
	if t == nil || preferred == "" {
		return out
	}
	w, ok := LegacyDriver(t, preferred)
	if !ok {
		return out
	}
	out[DRADriverKey] = w.Driver
	out[GPUCountKey] = strconv.Itoa(w.Count)
	if w.Pools == 1 {
		out[DRAPoolKey] = w.Driver + w.PoolSuffix
	}
	return out
}

// DriverWholeDevices are one driver's whole devices in a template.
type DriverWholeDevices struct {
	Driver string
	// Count is the number of whole devices over all the driver's pools.
	Count int
	// Pools is the number of the driver's pools with whole devices, PoolSuffix the suffix of
	// the last of them (the only one when Pools is 1).
	Pools      int
	PoolSuffix string
}

// LegacyDriver returns the driver that dra-driver and gpu-count describe for a template: the
// only driver with whole devices; with several (a node with GPUs and NPUs), preferred if it is
// one of them, else the one with the most whole devices and, at equal counts, the first by
// name. The legacy keys name one driver, so a stock autoscaler simulates only that one: the
// preference lets an operator pick the accelerator their autoscaled workloads ask for, and the
// rest of the order makes the choice depend on the template alone (the same on every
// reconcile and every replica), never on the order of slices. False when no driver has whole
// devices.
func LegacyDriver(t *template.Template, preferred string) (DriverWholeDevices, bool) {
	var all []DriverWholeDevices
	for _, d := range t.Drivers {
		n := WholeDevices(d)
		if n == 0 {
			continue
		}
		i := slices.IndexFunc(all, func(w DriverWholeDevices) bool { return w.Driver == d.Name })
		if i < 0 {
			all = append(all, DriverWholeDevices{Driver: d.Name})
			i = len(all) - 1
		}
		all[i].Count += n
		all[i].Pools++
		all[i].PoolSuffix = d.PoolSuffix
	}
	if len(all) == 0 {
		return DriverWholeDevices{}, false
	}
	if i := slices.IndexFunc(all, func(w DriverWholeDevices) bool { return w.Driver == preferred }); i >= 0 {
		return all[i], true
	}
	return slices.MinFunc(all, func(a, b DriverWholeDevices) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Driver, b.Driver))
	}), true
}

// WholeDeviceTypes are the values of a device's type attribute that name a whole accelerator.
// MIG devices ("mig") are partitions of one. A shared GPU (time-slicing, MPS, consumable
// memory) is still one whole device: the autoscaler's invented device can be allocated once,
// which undercounts what the node gives shared claims but never promises a claim it cannot get.
var WholeDeviceTypes = []string{"gpu", "npu"}

// WholeDevices counts the devices of d whose type attribute (bare, or in the driver's domain)
// is one of WholeDeviceTypes.
func WholeDevices(d template.Driver) int {
	n := 0
	for _, dev := range d.Devices {
		a, ok := dev.Attributes["type"]
		if !ok {
			a, ok = dev.Attributes[resourceapi.QualifiedName(d.Name+"/type")]
		}
		if ok && a.StringValue != nil && slices.Contains(WholeDeviceTypes, *a.StringValue) {
			n++
		}
	}
	return n
}
