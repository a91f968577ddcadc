package helm

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestNoArchitecturePinned checks that no install of the chart keeps its pods off arm64 nodes
// (Grace Hopper, Grace Blackwell): the images are built for linux/amd64 and linux/arm64, so no
// workload may select or require kubernetes.io/arch, and the plugin's library path covers both
// architectures' Debian and RPM layouts of the host driver.
func TestNoArchitecturePinned(t *testing.T) {
	for name, vs := range valueSets {
		t.Run(name, func(t *testing.T) {
			r := renderSet(t, vs)
			var specs []corev1.PodSpec
			for _, o := range r.OfKind("DaemonSet") {
				specs = append(specs, toTyped[appsv1.DaemonSet](t, o).Spec.Template.Spec)
			}
			for _, o := range r.OfKind("Deployment") {
				specs = append(specs, toTyped[appsv1.Deployment](t, o).Spec.Template.Spec)
			}
			if len(specs) == 0 {
				t.Fatal("no workloads rendered")
			}
			for _, s := range specs {
				if v, ok := s.NodeSelector[corev1.LabelArchStable]; ok {
					t.Errorf("a workload selects %s=%s", corev1.LabelArchStable, v)
				}
				if a := s.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
					for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
						for _, e := range term.MatchExpressions {
							if e.Key == corev1.LabelArchStable {
								t.Errorf("a workload requires %s %s %v", e.Key, e.Operator, e.Values)
							}
						}
					}
				}
			}
			for _, o := range r.OfKind("DaemonSet") {
				ds := toTyped[appsv1.DaemonSet](t, o)
				for _, c := range ds.Spec.Template.Spec.Containers {
					for _, e := range c.Env {
						if e.Name != "LD_LIBRARY_PATH" {
							continue
						}
						for _, dir := range []string{"x86_64-linux-gnu", "aarch64-linux-gnu", "lib64"} {
							if !strings.Contains(e.Value, dir) {
								t.Errorf("%s: LD_LIBRARY_PATH %q lacks the driver's %s directory", ds.Name, e.Value, dir)
							}
						}
					}
				}
			}
		})
	}
}
