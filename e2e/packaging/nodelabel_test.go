//go:build e2e

package packaging

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/deployments/helm"
	"github.com/accel-dra/accel-dra/pkg/nodelabels"
)

// testNodeScopedLabel: the GPU plugin's token bound to a pod on node A sets and removes the
// fabric clique label of node A as pkg/nodelabels does (a server-side apply of that one label),
// and the node-label policy refuses it every other change of a Node: the label on node B, another
// label or an annotation of its own node, and any change from a token bound to no pod.
func (e *env) testNodeScopedLabel(ctx context.Context, t *testing.T, r *helm.Rendered) {
	e.createNode(ctx, t, "label-a")
	e.createNode(ctx, t, "label-b")
	const kept = "example.com/kept"
	if _, err := e.client.CoreV1().Nodes().Patch(ctx, "label-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+kept+`":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := pluginSA(t, r, gpuDriver)
	onA := e.clientFor(t, e.token(ctx, t, sa, e.boundPod(ctx, t, sa, "label-a")))
	unbound := e.clientFor(t, e.token(ctx, t, sa, nil))
	labeler := func(node string) nodelabels.Labeler {
		return nodelabels.Labeler{Client: onA, NodeName: node, Key: nodelabels.CliqueLabel, FieldManager: "accel-dra-kubelet-plugin/" + gpuDriver}
	}
	const clique = "7a1d3c52-0c8e-4f7e-9a43-2d905bc37701.32766"

	// Until the apiserver has compiled the policy (about a second), node B's label may pass.
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := onA.CoreV1().Nodes().Patch(ctx, "label-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+nodelabels.CliqueLabel+`":"x"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Fatalf("the policy never refused the label of another node: %v", err)
	}

	// Its own node's label: set, kept on a second apply, removed.
	if got, err := labeler("label-a").Set(ctx, clique); err != nil || got != clique {
		t.Fatalf("plugin on label-a setting its clique label: %q, %v", got, err)
	}
	n, err := e.client.CoreV1().Nodes().Get(ctx, "label-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[nodelabels.CliqueLabel] != clique || n.Labels[kept] != "yes" {
		t.Errorf("label-a's labels %v, want the clique and its other label kept", n.Labels)
	}
	if _, err := labeler("label-a").Set(ctx, clique); err != nil {
		t.Errorf("plugin on label-a applying the same label again: %v", err)
	}
	if got, err := labeler("label-a").Set(ctx, ""); err != nil || got != "" {
		t.Errorf("plugin on label-a removing its clique label: %q, %v", got, err)
	}

	// Another node's label, another label, an annotation, and a token bound to no pod.
	_, err = labeler("label-b").Set(ctx, clique)
	wantForbidden(t, "plugin on label-a labelling label-b", err, "may not modify Node 'label-b'")
	_, err = onA.CoreV1().Nodes().Patch(ctx, "label-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"example.com/other":"x"}}}`), metav1.PatchOptions{})
	wantForbidden(t, "plugin on label-a setting another label of its node", err, "only its fabric clique label")
	_, err = onA.CoreV1().Nodes().Patch(ctx, "label-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+kept+`":null}}}`), metav1.PatchOptions{})
	wantForbidden(t, "plugin on label-a removing another label of its node", err, "only its fabric clique label")
	_, err = onA.CoreV1().Nodes().Patch(ctx, "label-a", types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/a":"x"}}}`), metav1.PatchOptions{})
	wantForbidden(t, "plugin on label-a annotating its node", err, "only its fabric clique label")
	_, err = onA.CoreV1().Nodes().Patch(ctx, "label-a", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	wantForbidden(t, "plugin on label-a cordoning its node", err, "only its fabric clique label")
	_, err = nodelabels.Labeler{Client: unbound, NodeName: "label-a", Key: nodelabels.CliqueLabel, FieldManager: "x"}.Set(ctx, clique)
	wantForbidden(t, "unbound plugin token labelling a node", err, "")
}
