package accelctl

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldManager is the server-side apply field manager of `accelctl template seed`.
const FieldManager = "accelctl"

// Group is a node group object: a MachineDeployment, a MachineSet or a MachinePool.
type Group struct {
	Kind, Namespace, Name string
	UID                   types.UID
	Labels, Annotations   map[string]string
}

func (g *Group) String() string { return g.Kind + " " + g.Namespace + "/" + g.Name }

// Cluster is the API access accelctl needs; tests use a fake.
type Cluster interface {
	// GetGroup finds a node group by reference: "<name>" (a MachineDeployment, else a
	// MachineSet, else a MachinePool), "machinedeployment/<name>", "machineset/<name>" or
	// "machinepool/<name>" (also md/, ms/, mp/).
	GetGroup(ctx context.Context, namespace, ref string) (*Group, error)
	// ListGroups lists the MachineDeployments, MachineSets and MachinePools of a namespace
	// ("" for all).
	ListGroups(ctx context.Context, namespace string) ([]*Group, error)
	DeviceClasses(ctx context.Context) ([]*resourceapi.DeviceClass, error)
	// ApplyAnnotations sets annotations on the group with server-side apply.
	ApplyAnnotations(ctx context.Context, g *Group, ann map[string]string) error
}

const machinePool = "MachinePool"

// groupKinds are the kinds of node groups, in the order a bare name is looked up.
var groupKinds = []string{"MachineDeployment", "MachineSet", machinePool}

// apiCluster is Cluster on a controller-runtime client; groups are read as metadata only, so
// any served Cluster API version works.
type apiCluster struct{ c client.Client }

// NewCluster returns a Cluster on a client (its scheme needs the resource.k8s.io types).
func NewCluster(c client.Client) Cluster { return apiCluster{c} }

func (a apiCluster) GetGroup(ctx context.Context, namespace, ref string) (*Group, error) {
	kinds := groupKinds
	name := ref
	if k, n, ok := strings.Cut(ref, "/"); ok {
		name = n
		switch strings.ToLower(k) {
		case "machinedeployment", "machinedeployments", "md":
			kinds = kinds[:1]
		case "machineset", "machinesets", "ms":
			kinds = kinds[1:2]
		case "machinepool", "machinepools", "mp":
			kinds = kinds[2:]
		default:
			return nil, fmt.Errorf("node group %q: kind %q is not machinedeployment, machineset or machinepool", ref, k)
		}
	}
	for _, kind := range kinds {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(clusterv1.GroupVersion.WithKind(kind))
		err := a.c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj)
		// MachinePools are optional in Cluster API (its MachinePool feature): a cluster that
		// does not serve them has none.
		if apierrors.IsNotFound(err) || kind == machinePool && apimeta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("getting %s %s/%s: %w", kind, namespace, name, err)
		}
		return &Group{Kind: kind, Namespace: namespace, Name: name, UID: obj.UID, Labels: obj.Labels, Annotations: obj.Annotations}, nil
	}
	return nil, fmt.Errorf("no %s %s/%s", strings.Join(kinds, " or "), namespace, name)
}

func (a apiCluster) ListGroups(ctx context.Context, namespace string) ([]*Group, error) {
	var out []*Group
	for _, kind := range groupKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(clusterv1.GroupVersion.WithKind(kind + "List"))
		err := a.c.List(ctx, list, client.InNamespace(namespace))
		if kind == machinePool && apimeta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %ss: %w", kind, err)
		}
		for _, o := range list.Items {
			out = append(out, &Group{Kind: kind, Namespace: o.Namespace, Name: o.Name, UID: o.UID, Labels: o.Labels, Annotations: o.Annotations})
		}
	}
	return out, nil
}

func (a apiCluster) DeviceClasses(ctx context.Context) ([]*resourceapi.DeviceClass, error) {
	var list resourceapi.DeviceClassList
	if err := a.c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	out := make([]*resourceapi.DeviceClass, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func (a apiCluster) ApplyAnnotations(ctx context.Context, g *Group, ann map[string]string) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": clusterv1.GroupVersion.String(),
		"kind":       g.Kind,
		"metadata":   map[string]any{"name": g.Name, "namespace": g.Namespace, "uid": g.UID, "annotations": ann},
	})
	if err != nil {
		return err
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(clusterv1.GroupVersion.WithKind(g.Kind))
	obj.SetNamespace(g.Namespace)
	obj.SetName(g.Name)
	return a.c.Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(FieldManager), client.ForceOwnership)
}
