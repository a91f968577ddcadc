package cleanup

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// InUseError is Check's refusal: claims of the drivers are reserved for pods.
type InUseError struct {
	Claims []resourceapi.ResourceClaim
}

func (e *InUseError) Error() string {
	var names []string
	for _, c := range e.Claims {
		var pods []string
		for _, r := range c.Status.ReservedFor {
			pods = append(pods, r.Resource+"/"+r.Name)
		}
		names = append(names, fmt.Sprintf("%s/%s (for %s)", c.Namespace, c.Name, strings.Join(pods, ", ")))
	}
	return fmt.Sprintf("%d ResourceClaim(s) allocated by this release's drivers are in use: %s; delete the pods that use them and uninstall again, or force the clean-up (cleanup.force=true), which leaves them running on devices no plugin serves",
		len(e.Claims), strings.Join(names, "; "))
}

// Scope is one of the release's drivers and where its claims are the release's.
type Scope struct {
	Driver string
	// Nodes is a label selector of the nodes where the release serves Driver, for a driver
	// name the release shares with another driver node by node (NVIDIA's compatibility mode:
	// gpu.nvidia.com on the nodes handed over). Empty: every claim of Driver is the release's.
	Nodes string
}

// Check refuses (an *InUseError) while a ResourceClaim with a device of one of the release's
// drivers is reserved for a consumer: the kubelet would still have to unprepare it, and once
// the plugin is gone nothing would. The uninstall's pre-delete hook runs it, so that a refusal
// leaves the release installed. A scoped driver's claim counts only when its allocation can
// be on one of the scope's nodes; an allocation that names no node could be on any, and counts.
func Check(ctx context.Context, kube kubernetes.Interface, scopes []Scope) error {
	nodes := map[string][]*corev1.Node{} // by driver, for scoped drivers
	for _, s := range scopes {
		if s.Nodes == "" {
			continue
		}
		sel, err := labels.Parse(s.Nodes)
		if err != nil {
			return fmt.Errorf("the nodes of driver %s: %w", s.Driver, err)
		}
		list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return fmt.Errorf("listing the nodes of driver %s (%s): %w", s.Driver, s.Nodes, err)
		}
		nodes[s.Driver] = make([]*corev1.Node, 0, len(list.Items))
		for i := range list.Items {
			nodes[s.Driver] = append(nodes[s.Driver], &list.Items[i])
		}
	}
	list, err := kube.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ResourceClaims: %w", err)
	}
	var inUse []resourceapi.ResourceClaim
	for _, c := range list.Items {
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
			continue
		}
		mine, err := releases(c.Status.Allocation, scopes, nodes)
		if err != nil {
			return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
		}
		if mine {
			inUse = append(inUse, c)
		}
	}
	if len(inUse) > 0 {
		return &InUseError{Claims: inUse}
	}
	klog.FromContext(ctx).Info("No claim of the drivers is in use", "scopes", scopes)
	return nil
}

// releases tells whether an allocation has a device of one of the scopes.
func releases(a *resourceapi.AllocationResult, scopes []Scope, nodes map[string][]*corev1.Node) (bool, error) {
	for _, r := range a.Devices.Results {
		for _, s := range scopes {
			if r.Driver != s.Driver {
				continue
			}
			if s.Nodes == "" || a.NodeSelector == nil {
				return true, nil
			}
			sel, err := nodeaffinity.NewNodeSelector(a.NodeSelector)
			if err != nil {
				return false, fmt.Errorf("allocation's node selector: %w", err)
			}
			if slices.ContainsFunc(nodes[s.Driver], sel.Match) {
				return true, nil
			}
		}
	}
	return false, nil
}

// WaitForDaemonSets waits until every pod of each of the DaemonSets is ready: the node
// clean-up runs in their init container, so a ready pod is a node cleaned up. A pod whose
// clean-up failed ends the wait with the failure, the node and the container's message.
func WaitForDaemonSets(ctx context.Context, kube kubernetes.Interface, namespace string, names []string, poll time.Duration) error {
	logger := klog.FromContext(ctx)
	for {
		pending, err := notDone(ctx, kube, namespace, names)
		if err != nil {
			return err
		}
		if len(pending) == 0 {
			logger.Info("Every node is cleaned up", "daemonSets", names)
			return nil
		}
		logger.Info("Waiting for the clean-up", "pending", pending)
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the clean-up of %s: %w", strings.Join(pending, ", "), ctx.Err())
		case <-time.After(poll):
		}
	}
}

// notDone returns what is still pending, or an error naming the nodes whose clean-up failed.
func notDone(ctx context.Context, kube kubernetes.Interface, namespace string, names []string) ([]string, error) {
	var pending, failed []string
	for _, name := range names {
		ds, err := kube.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("DaemonSet %s: %w", name, err)
		}
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("DaemonSet %s: %w", name, err)
		}
		pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, fmt.Errorf("pods of DaemonSet %s: %w", name, err)
		}
		for _, p := range pods.Items {
			if msg, ok := initFailure(&p); ok {
				failed = append(failed, fmt.Sprintf("node %s: %s", p.Spec.NodeName, msg))
			}
		}
		if !daemonSetDone(ds) {
			pending = append(pending, fmt.Sprintf("%s (%d of %d nodes)", name, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled))
		}
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("the clean-up failed on %s", strings.Join(failed, "; "))
	}
	return pending, nil
}

func daemonSetDone(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation && s.NumberReady == s.DesiredNumberScheduled && s.UpdatedNumberScheduled == s.DesiredNumberScheduled
}

// initFailure is the message of an init container that exited with an error, now or last time.
func initFailure(p *corev1.Pod) (string, bool) {
	for _, st := range p.Status.InitContainerStatuses {
		for _, term := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
			if term != nil && term.ExitCode != 0 {
				msg := strings.TrimSpace(term.Message)
				if msg == "" {
					msg = fmt.Sprintf("exit code %d", term.ExitCode)
				}
				return msg, true
			}
		}
	}
	return "", false
}
