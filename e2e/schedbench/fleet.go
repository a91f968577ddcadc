//go:build e2e

package schedbench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// nodeName is the name of fake node i.
func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var once sync.Once
	var first error
	workqueue.ParallelizeUntil(context.Background(), workers, n, func(i int) {
		if err := f(i); err != nil {
			once.Do(func() { first = err })
		}
	})
	return first
}

// createNodes creates n Node objects that the scheduler takes for ready nodes: a Ready
// condition, allocatable CPU, memory and pods, no taints. No kubelet runs for them, so the
// controller-manager runs without its node lifecycle controller (which would taint them
// unreachable once their heartbeat is missed).
func createNodes(ctx context.Context, client kubernetes.Interface, n int) ([]*corev1.Node, error) {
	nodes := make([]*corev1.Node, n)
	err := parallel(n, 16, func(i int) error {
		name := nodeName(i)
		node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		resources := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("128"),
			corev1.ResourceMemory: resource.MustParse("1Ti"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		now := metav1.Now()
		status, err := json.Marshal(map[string]any{"status": corev1.NodeStatus{
			Capacity: resources, Allocatable: resources,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
		}})
		if err != nil {
			return err
		}
		// A patch, not an update: the controller-manager's TTL controller annotates new nodes.
		if _, err = client.CoreV1().Nodes().PatchStatus(ctx, name, status); err != nil {
			return fmt.Errorf("node %s status: %w", name, err)
		}
		// The apiserver's TaintNodesByCondition admission taints a new node not-ready; the
		// node lifecycle controller, which is off, would take the taint away.
		if node, err = client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("node %s taints: %w", name, err)
		}
		nodes[i] = node
		return nil
	})
	return nodes, err
}

// publish gives every node the pool of model m: the kubelet plugin helper's own ResourceSlice
// controller publishes the first node's pool, as it does for the plugin, and the other nodes
// get copies of those slices with the node's name as node and pool, and the node as owner.
// It returns the number of slices per node.
func publish(ctx context.Context, client kubernetes.Interface, nodes []*corev1.Node, driver string, res resourceslice.DriverResources) (int, error) {
	first := nodes[0]
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: driver, KubeClient: client, Resources: &res,
		Owner: &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: first.Name, UID: first.UID},
	})
	if err != nil {
		return 0, err
	}
	want := len(res.Pools[first.Name].Slices)
	var template []resourceapi.ResourceSlice
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + first.Name + ",spec.driver=" + driver})
		if err != nil {
			return false, nil
		}
		template = list.Items
		return len(template) == want, nil
	})
	ctrl.Stop()
	if err != nil {
		return 0, fmt.Errorf("the ResourceSlice controller published %d of %d slices for %s: %w", len(template), want, first.Name, err)
	}
	err = parallel(len(nodes)-1, 16, func(i int) error {
		node := nodes[i+1]
		for _, t := range template {
			s := &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{
					GenerateName: strings.Replace(t.GenerateName, first.Name, node.Name, 1),
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: new(true),
					}},
				},
				Spec: *t.Spec.DeepCopy(),
			}
			s.Spec.NodeName = new(node.Name)
			s.Spec.Pool.Name = node.Name
			if _, err := client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("slice for %s: %w", node.Name, err)
			}
		}
		return nil
	})
	return want, err
}

// unpublish deletes every ResourceSlice of the driver and waits until none is left.
func unpublish(ctx context.Context, client kubernetes.Interface, driver string) error {
	sel := metav1.ListOptions{FieldSelector: "spec.driver=" + driver}
	if err := client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, sel)
		return err == nil && len(list.Items) == 0, nil
	})
}
