package helm

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestNoArchitecturePinned checks that no install of the chart keeps its pods off arm64 nodes
// (Grace Hopper, Grace Blackwell): the images are built for linux/amd64 and linux/arm64, so no
// workload may select or require kubernetes.io/arch.
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
		})
	}
}

// TestNoLibraryPathIntoTheHost: no container of the chart gets an environment that makes the
// dynamic loader take libraries from the host. The plugin's image brings its own C library; a
// host's driver root holds the host's (libc.so.6 lies beside libnvidia-ml.so.1), and a loader
// that took it would fail the cgo plugin and every program it runs at exec on any host whose
// glibc is not the image's. The plugin loads NVML by its full path and preloads only
// libnvidia-ml for nvidia-smi (pkg/nodeplugin).
func TestNoLibraryPathIntoTheHost(t *testing.T) {
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
			for _, s := range specs {
				for _, c := range append(s.InitContainers, s.Containers...) {
					for _, e := range c.Env {
						// LD_LIBRARY_PATH, LD_PRELOAD, LD_AUDIT...: what glibc's loader reads.
						if strings.HasPrefix(e.Name, "LD_") {
							t.Errorf("container %s sets %s=%q: the loader would take the host's libraries, its C library among them", c.Name, e.Name, e.Value)
						}
					}
				}
			}
		})
	}
}
