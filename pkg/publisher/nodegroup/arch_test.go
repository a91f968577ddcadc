package nodegroup

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestTemplateNodeArch checks that a node group's architecture reaches its template node: the
// labels of arm64 nodes (as the kubelet sets them) make an arm64 template node, and a group whose
// labels do not say gets the autoscaler's default, amd64.
func TestTemplateNodeArch(t *testing.T) {
	gh200 := func(name string) *corev1.Node {
		return node(name, map[string]string{
			corev1.LabelHostname: name, corev1.LabelArchStable: "arm64", corev1.LabelOSStable: "linux",
			corev1.LabelInstanceTypeStable: "gh200",
		}, nil, resources("72", "450Gi", "100Gi", "110"), nil)
	}
	for name, tc := range map[string]struct {
		annotations map[string]string
		wantArch    string
	}{
		"arm64 nodes":                {annotations: Capacity([]*corev1.Node{gh200("g1"), gh200("g2")}), wantArch: "arm64"},
		"amd64 nodes":                {annotations: map[string]string{LabelsKey: "kubernetes.io/arch=amd64"}, wantArch: "amd64"},
		"no arch label (seeded)":     {annotations: map[string]string{CPUKey: "72"}, wantArch: DefaultArch},
		"labels without arch":        {annotations: map[string]string{LabelsKey: "gpu=gh200"}, wantArch: DefaultArch},
		"explicit arm64 with others": {annotations: map[string]string{LabelsKey: "gpu=gh200,kubernetes.io/arch=arm64"}, wantArch: "arm64"},
	} {
		t.Run(name, func(t *testing.T) {
			n, err := TemplateNode("template-node", tc.annotations)
			if err != nil {
				t.Fatal(err)
			}
			if got := n.Labels[corev1.LabelArchStable]; got != tc.wantArch {
				t.Errorf("template node arch = %q, want %q (labels %v)", got, tc.wantArch, n.Labels)
			}
			if got := n.Labels[corev1.LabelOSStable]; got != "linux" {
				t.Errorf("template node os = %q, want linux", got)
			}
		})
	}
	if got := Capacity([]*corev1.Node{gh200("g1")})[LabelsKey]; got != "kubernetes.io/arch=arm64,kubernetes.io/os=linux,node.kubernetes.io/instance-type=gh200" {
		t.Errorf("labels annotation of an arm64 group = %q; it must carry kubernetes.io/arch=arm64", got)
	}
}
