// Package annotations removes the template publisher's annotations from Cluster API node
// groups when the chart is uninstalled (docs/uninstall.md), so that the Cluster Autoscaler does
// not keep building template nodes from devices nothing publishes any more. The publisher writes
// them with server-side apply under its own field manager; applying an empty configuration
// under that manager removes exactly the fields it owns and leaves every other annotation (an
// operator's, a seed's the publisher never took over) as it is. A package of its own, so that
// the static publisher binary links nothing of the node clean-up.
package annotations

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/pflag"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/pkg/kubeclient"
)

// Remove removes what fieldManager applied to the MachineDeployments, MachineSets and
// MachinePools in namespace (all namespaces when empty) and returns the objects it changed, as
// kind/ns/name. MachinePools are optional in Cluster API (its MachinePool feature): where the
// API server does not serve them there are none to clean.
func Remove(ctx context.Context, c client.Client, namespace, fieldManager string) ([]string, error) {
	logger := klog.FromContext(ctx)
	var mds clusterv1.MachineDeploymentList
	if err := c.List(ctx, &mds, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing MachineDeployments: %w", err)
	}
	var mss clusterv1.MachineSetList
	if err := c.List(ctx, &mss, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing MachineSets: %w", err)
	}
	var mps clusterv1.MachinePoolList
	if err := c.List(ctx, &mps, client.InNamespace(namespace)); err != nil && !apimeta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing MachinePools: %w", err)
	}
	var objs []client.Object
	for i := range mds.Items {
		objs = append(objs, &mds.Items[i])
	}
	for i := range mss.Items {
		objs = append(objs, &mss.Items[i])
	}
	for i := range mps.Items {
		objs = append(objs, &mps.Items[i])
	}
	var changed []string
	for _, o := range objs {
		if !applied(o.GetManagedFields(), fieldManager) {
			continue
		}
		kind := "MachineDeployment"
		switch o.(type) {
		case *clusterv1.MachineSet:
			kind = "MachineSet"
		case *clusterv1.MachinePool:
			kind = "MachinePool"
		}
		body, err := json.Marshal(map[string]any{
			"apiVersion": clusterv1.GroupVersion.String(),
			"kind":       kind,
			"metadata":   map[string]any{"name": o.GetName(), "namespace": o.GetNamespace(), "uid": o.GetUID()},
		})
		if err != nil {
			return changed, err
		}
		if err := c.Patch(ctx, o, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(fieldManager)); err != nil {
			return changed, fmt.Errorf("%s %s/%s: removing the annotations of %s: %w", kind, o.GetNamespace(), o.GetName(), fieldManager, err)
		}
		ref := kind + "/" + o.GetNamespace() + "/" + o.GetName()
		logger.Info("Removed the publisher's annotations", "object", ref)
		changed = append(changed, ref)
	}
	return changed, nil
}

func applied(fields []metav1.ManagedFieldsEntry, manager string) bool {
	for _, f := range fields {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// Main is the publisher binary's `cleanup` subcommand (args after it): it removes the
// publisher's annotations in --watch-namespace (all namespaces when empty). The chart's
// post-delete hook runs it once the publisher is gone.
func Main(ctx context.Context, args []string, scheme *runtime.Scheme, fieldManager string) error {
	fs := pflag.NewFlagSet("cleanup", pflag.ContinueOnError)
	var namespace string
	kube := kubeclient.Options{QPS: 50, Burst: 100}
	fs.StringVar(&namespace, "watch-namespace", "", "The publisher's --watch-namespace: only node groups in this namespace (default: all).")
	kube.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := kube.RESTConfig(fieldManager + "/cleanup")
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	_, err = Remove(ctx, c, namespace, fieldManager)
	return err
}
