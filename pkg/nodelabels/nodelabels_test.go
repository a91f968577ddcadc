package nodelabels

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

const (
	rack1 = "7a1d3c52-9e04-4b8f-a16e-2d905bc37701.32766"
	rack2 = "7a1d3c52-9e04-4b8f-a16e-2d905bc37702.32766"
)

func TestClique(t *testing.T) {
	for name, tc := range map[string]struct {
		gpus     map[string]string
		want     string
		disagree map[string][]string
	}{
		"no GPUs":            {},
		"no GPU in a fabric": {gpus: map[string]string{"gpu-0": "", "gpu-1": ""}},
		"all in one clique":  {gpus: map[string]string{"gpu-0": rack1, "gpu-1": rack1, "gpu-2": rack1, "gpu-3": rack1}, want: rack1},
		// A registration still in progress on one GPU leaves the label to the others, as in
		// NVIDIA's feature discovery, which skips GPUs not attached to the fabric.
		"one not registered": {gpus: map[string]string{"gpu-0": rack1, "gpu-1": "", "gpu-2": rack1}, want: rack1},
		"two cliques": {
			gpus:     map[string]string{"gpu-0": rack1, "gpu-3": rack2, "gpu-1": rack2, "gpu-2": ""},
			disagree: map[string][]string{rack1: {"gpu-0"}, rack2: {"gpu-1", "gpu-3"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Clique(tc.gpus)
			if got != tc.want {
				t.Errorf("Clique = %q, want %q", got, tc.want)
			}
			var d *Disagreement
			switch {
			case tc.disagree == nil && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.disagree != nil && !errors.As(err, &d):
				t.Errorf("error %v, want a *Disagreement", err)
			case tc.disagree != nil && !maps.EqualFunc(d.Devices, tc.disagree, slices.Equal):
				t.Errorf("Disagreement.Devices = %v, want %v", d.Devices, tc.disagree)
			}
		})
	}
}

// The message names every clique and its GPUs in one order, so that a log line or event of
// two restarts reads the same.
func TestDisagreementMessage(t *testing.T) {
	_, err := Clique(map[string]string{"gpu-2": rack2, "gpu-0": rack1, "gpu-1": rack2})
	want := "the GPUs are in more than one NVLink fabric clique: " + rack1 + " (gpu-0); " + rack2 + " (gpu-1, gpu-2)"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestSet(t *testing.T) {
	const manager = "accel-dra-kubelet-plugin/gpu.accel-dra.io"
	others := map[string]string{"kubernetes.io/hostname": "n1", "team": "a"}
	for name, tc := range map[string]struct {
		// before is the label's value set by the plugin's manager ("" for none); foreign the
		// value another writer set (an operator, NVIDIA's feature discovery).
		before, foreign string
		value           string
		want            string
	}{
		"set":                             {value: rack1, want: rack1},
		"unchanged":                       {before: rack1, value: rack1, want: rack1},
		"changed (fabric re-registered)":  {before: rack1, value: rack2, want: rack2},
		"removed (clique gone)":           {before: rack1, value: "", want: ""},
		"nothing to remove":               {value: "", want: ""},
		"another writer's value replaced": {foreign: rack2, value: rack1, want: rack1},
		// An apply without the key drops only what this manager alone owns.
		"another writer's label kept": {foreign: rack2, value: "", want: rack2},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: maps.Clone(others)}}
			client := fake.NewClientset(node)
			if tc.foreign != "" {
				// A plain update, as kubectl label or NFD's master writes a label.
				n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				n.Labels[CliqueLabel] = tc.foreign
				if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: "kubectl-label"}); err != nil {
					t.Fatal(err)
				}
			}
			l := Labeler{Client: client, NodeName: "n1", Key: CliqueLabel, FieldManager: manager}
			if tc.before != "" {
				if _, err := l.Set(ctx, tc.before); err != nil {
					t.Fatal(err)
				}
			}
			got, err := l.Set(ctx, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Set returned %q, want %q", got, tc.want)
			}
			n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := maps.Clone(others)
			if tc.want != "" {
				want[CliqueLabel] = tc.want
			}
			if !maps.Equal(n.Labels, want) {
				t.Errorf("labels %v, want %v", n.Labels, want)
			}
		})
	}
}

// A Node that is gone is an error, and the plugin's apply does not bring it back.
func TestSetNodeGone(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	l := Labeler{Client: client, NodeName: "n1", Key: CliqueLabel, FieldManager: "m"}
	if _, err := l.Set(ctx, rack1); err == nil {
		t.Fatal("Set on a missing Node: no error")
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err == nil {
		t.Error("Set created the Node")
	}
}
