// Package nodelabels keeps the one label the kubelet plugin sets on its own Node: the NVLink
// fabric clique its GPUs share, so that pods of one job can ask, with pod affinity or a
// topology-aware scheduler (Kueue), for nodes in one multi-node NVLink domain (an NVL72 rack).
// Devices carry the same value as their fabricClique attribute; the label is what the
// scheduler's node-level features can see.
//
// The Node's labels are the only state. The plugin writes its label with server-side apply
// under a field manager of its own: an apply names only that one label, so no other label
// moves, and an apply without it drops the label only where this manager alone set it (an
// operator's or another writer's label of the same key stays).
package nodelabels

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// CliqueLabel is the label of the node's fabric clique, "<clusterUUID>.<cliqueID>".
	CliqueLabel = "gpu.accel-dra.io/clique"
	// NVIDIACliqueLabel is NVIDIA's key of the same value, written in NVIDIA compatibility
	// mode. NVIDIA's GPU feature discovery sets it from the fabric IDs of every GPU whose
	// fabric registration completed, and only when they all agree on one cluster UUID and one
	// clique ID (github.com/NVIDIA/k8s-device-plugin, internal/lm/fabric.go, getFabricIDs):
	// the same rule as Clique.
	NVIDIACliqueLabel = "nvidia.com/gpu.clique"
)

// Disagreement is the error of GPUs of one node in more than one fabric clique: no single
// label value describes the node, so it gets none.
type Disagreement struct {
	// Devices are the GPUs of each clique, sorted.
	Devices map[string][]string
}

func (d *Disagreement) Error() string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(d.Devices)) {
		parts = append(parts, fmt.Sprintf("%s (%s)", c, strings.Join(d.Devices[c], ", ")))
	}
	return "the GPUs are in more than one NVLink fabric clique: " + strings.Join(parts, "; ")
}

// Clique is the node's fabric clique from each whole GPU's, by device name ("" for a GPU
// that reports none: no fabric, or a registration not completed). GPUs without one do not
// count against the others, as in NVIDIA's feature discovery: a GPU whose registration is
// still in progress leaves the label to those that completed. No GPU with a clique gives "";
// GPUs in two cliques give "" and a *Disagreement.
func Clique(gpus map[string]string) (string, error) {
	byClique := map[string][]string{}
	for name, c := range gpus {
		if c != "" {
			byClique[c] = append(byClique[c], name)
		}
	}
	switch len(byClique) {
	case 0:
		return "", nil
	case 1:
		for c := range byClique {
			return c, nil
		}
	}
	for _, names := range byClique {
		slices.Sort(names)
	}
	return "", &Disagreement{Devices: byClique}
}

// Labeler sets one label of one Node.
type Labeler struct {
	Client   kubernetes.Interface
	NodeName string
	// Key is the label's key (CliqueLabel or NVIDIACliqueLabel).
	Key string
	// FieldManager owns the label; one per driver, so that two plugins of a node never drop
	// each other's label.
	FieldManager string
}

// Set makes the label value, or removes it where value is "" and this field manager set it;
// it returns the label's value on the Node afterwards ("" for none), which differs from value
// where another writer holds the key. An apply of the value the label has already changes
// nothing on the server (no new resourceVersion), so a restart causes no churn; a removal with
// no label there is skipped, so a node without a fabric costs one read.
func (l Labeler) Set(ctx context.Context, value string) (string, error) {
	node, err := l.Client.CoreV1().Nodes().Get(ctx, l.NodeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading Node %s: %w", l.NodeName, err)
	}
	if _, has := node.Labels[l.Key]; value == "" && !has {
		return "", nil
	}
	// Server-side apply of a Node that does not exist would create one; the plugin's RBAC
	// (nodes get and patch, no create) refuses that, so a Node deleted since the read stays
	// deleted.
	ac := corev1ac.Node(l.NodeName)
	if value != "" {
		ac.WithLabels(map[string]string{l.Key: value})
	}
	// Forced: the plugin reads the fabric itself and is the authority on its key; an older
	// value another writer set is replaced rather than left to conflict.
	node, err = l.Client.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: l.FieldManager, Force: true})
	if err != nil {
		return "", fmt.Errorf("applying label %s=%q to Node %s: %w", l.Key, value, l.NodeName, err)
	}
	return node.Labels[l.Key], nil
}
