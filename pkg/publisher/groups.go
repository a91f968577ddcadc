package publisher

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// Kinds of node group objects.
const (
	KindMachineDeployment = "MachineDeployment"
	KindMachineSet        = "MachineSet"
	KindMachinePool       = "MachinePool"
)

// GroupKey names a node group: a MachineDeployment, a MachineSet without one, or a MachinePool
// (as the autoscaler's clusterapi provider sees node groups).
type GroupKey struct {
	Kind      string
	Namespace string
	Name      string
}

func (k GroupKey) String() string { return k.Kind + " " + k.Namespace + "/" + k.Name }

// controllerOwner returns the name of obj's controller owner of kind in the Cluster API group,
// or of its first owner of that kind when none is marked controller.
func controllerOwner(obj metav1.Object, kind string) string {
	name := ""
	for _, ref := range obj.GetOwnerReferences() {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || gv.Group != clusterv1.GroupVersion.Group || ref.Kind != kind {
			continue
		}
		if ref.Controller != nil && *ref.Controller {
			return ref.Name
		}
		if name == "" {
			name = ref.Name
		}
	}
	return name
}

// MachineSetOf returns the name of the MachineSet a Machine belongs to: its owner, or else its
// cluster.x-k8s.io/set-name label. Empty: none (a control plane or standalone machine).
func MachineSetOf(m *clusterv1.Machine) string {
	if n := controllerOwner(m, KindMachineSet); n != "" {
		return n
	}
	return m.Labels[clusterv1.MachineSetNameLabel]
}

// MachineDeploymentOf returns the name of the MachineDeployment a MachineSet belongs to: its
// owner, or else its cluster.x-k8s.io/deployment-name label. Empty: the MachineSet is a node
// group of its own.
func MachineDeploymentOf(ms *clusterv1.MachineSet) string {
	if n := controllerOwner(ms, KindMachineDeployment); n != "" {
		return n
	}
	return ms.Labels[clusterv1.MachineDeploymentNameLabel]
}

// GroupOfMachineSet returns the node group of a MachineSet.
func GroupOfMachineSet(ms *clusterv1.MachineSet) GroupKey {
	if md := MachineDeploymentOf(ms); md != "" {
		return GroupKey{KindMachineDeployment, ms.Namespace, md}
	}
	return GroupKey{KindMachineSet, ms.Namespace, ms.Name}
}

// revision is a MachineSet's machinedeployment.clusters.x-k8s.io/revision, -1 if absent.
func revision(ms *clusterv1.MachineSet) int64 {
	r, err := strconv.ParseInt(ms.Annotations[clusterv1.RevisionAnnotation], 10, 64)
	if err != nil {
		return -1
	}
	return r
}

// CurrentMachineSet returns the MachineSet of a MachineDeployment's current revision among its
// MachineSets: the highest machinedeployment.clusters.x-k8s.io/revision (a rollback gives the
// old MachineSet a new, higher revision), then the newest; MachineSets being deleted only when
// there is nothing else. Nil for none.
func CurrentMachineSet(sets []*clusterv1.MachineSet) *clusterv1.MachineSet {
	var best *clusterv1.MachineSet
	better := func(a, b *clusterv1.MachineSet) bool {
		if (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil) {
			return a.DeletionTimestamp == nil
		}
		if c := cmp.Compare(revision(a), revision(b)); c != 0 {
			return c > 0
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return b.CreationTimestamp.Before(&a.CreationTimestamp)
		}
		return a.Name > b.Name
	}
	for _, ms := range sets {
		if best == nil || better(ms, best) {
			best = ms
		}
	}
	return best
}

// ParseCopyFrom parses the copy-from annotation of a group in namespace ns: "[<namespace>/]<name>"
// of a MachineDeployment.
func ParseCopyFrom(ns, value string) (namespace, name string, err error) {
	value = strings.TrimSpace(value)
	namespace, name, found := strings.Cut(value, "/")
	if !found {
		namespace, name = ns, value
	}
	if namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%s=%q: want [<namespace>/]<machinedeployment-name>", nodegroup.CopyFromAnnotation, value)
	}
	return namespace, name, nil
}

// sortedKeys returns the group keys deduplicated and sorted.
func sortedKeys(keys []GroupKey) []GroupKey {
	slices.SortFunc(keys, func(a, b GroupKey) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return slices.Compact(keys)
}
