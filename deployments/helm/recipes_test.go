package helm

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// recipe is what a platform's values file (recipes/<name>.yaml, docs/recipes.md) must give.
type recipe struct {
	// The driver root on the host (--nvidia-host-driver-root) and what the plugin sees of it.
	hostDriverRoot, driverRoot string
	// The node affinity's required terms.
	terms []corev1.NodeSelectorTerm
	// A ResourceQuota that admits system-node-critical pods in the release namespace (GKE).
	priorityQuota bool
	// --nvidia-smi-path, "" for the driver root's usr/bin/nvidia-smi.
	smi string
}

var recipes = map[string]recipe{
	"gpu-operator": {
		hostDriverRoot: "/run/nvidia/driver", driverRoot: "/driver-root-parent/driver",
		terms: []corev1.NodeSelectorTerm{in("nvidia.com/gpu.present", "true")},
	},
	"gke": {
		hostDriverRoot: "/home/kubernetes/bin/nvidia", driverRoot: "/driver-root-parent/nvidia",
		terms:         []corev1.NodeSelectorTerm{exists("cloud.google.com/gke-accelerator")},
		priorityQuota: true, smi: "/driver-root-parent/nvidia/bin/nvidia-smi",
	},
	"k3s": {
		hostDriverRoot: "/", driverRoot: "/driver-root",
		terms: []corev1.NodeSelectorTerm{exists("feature.node.kubernetes.io/pci-0302_10de.present"), exists("feature.node.kubernetes.io/pci-10de.present")},
	},
	"rke2": {
		hostDriverRoot: "/", driverRoot: "/driver-root",
		terms: []corev1.NodeSelectorTerm{exists("feature.node.kubernetes.io/pci-0302_10de.present"), exists("feature.node.kubernetes.io/pci-10de.present")},
	},
}

func recipeValues(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("recipes", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.UnmarshalStrict(data, &vals); err != nil {
		t.Fatal(err)
	}
	return vals
}

// TestRecipes renders each platform's values file as `helm install -f` would and checks what
// the platform needs: the nodes it selects, the driver root, the update strategy, the
// priority-class quota, the refusal to run beside the NVIDIA device plugin once the recipe's
// statement is taken back, and the uninstall clean-up hooks.
func TestRecipes(t *testing.T) {
	files, _ := filepath.Glob("recipes/*.yaml")
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	if want := slices.Sorted(maps.Keys(recipes)); !slices.Equal(names, want) {
		t.Fatalf("recipes/ has %v, the test knows %v", names, want)
	}
	for name, want := range recipes {
		t.Run(name, func(t *testing.T) {
			vals := recipeValues(t, name)
			r, err := Render(Options{Values: vals})
			if err != nil {
				t.Fatal(err)
			}
			u, err := r.PluginDaemonSet("gpu.accel-dra.io")
			if err != nil {
				t.Fatal(err)
			}
			ds := toTyped[appsv1.DaemonSet](t, u)
			checkPluginDaemonSet(t, r, ds, "gpu.accel-dra.io", "nvml", "", true)
			var got []corev1.NodeSelectorTerm
			if a := ds.Spec.Template.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
				got = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			}
			if diff := cmp.Diff(paused(requiredTerms(want.terms...)).RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, got); diff != "" {
				t.Errorf("node affinity terms (-want +got):\n%s", diff)
			}
			args := ds.Spec.Template.Spec.Containers[0].Args
			for flag, v := range map[string]string{"nvidia-host-driver-root": want.hostDriverRoot, "nvidia-driver-root": want.driverRoot, "nvidia-smi-path": want.smi} {
				if got, _ := FlagValue(args, flag); got != v {
					t.Errorf("--%s=%q, want %q", flag, got, v)
				}
			}
			ru := ds.Spec.UpdateStrategy.RollingUpdate
			if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil || *ru.MaxSurge != intstr.FromInt32(1) || ru.MaxUnavailable == nil || *ru.MaxUnavailable != intstr.FromInt32(0) {
				t.Errorf("update strategy %+v, want a rolling update with maxSurge 1, maxUnavailable 0", ds.Spec.UpdateStrategy)
			}
			var quota *corev1.ResourceQuota
			for _, o := range r.OfKind("ResourceQuota") {
				quota = toTyped[corev1.ResourceQuota](t, o)
			}
			switch {
			case want.priorityQuota && quota == nil:
				t.Error("no ResourceQuota for the plugin's priority class")
			case want.priorityQuota:
				sel := quota.Spec.ScopeSelector
				if quota.Namespace != DefaultNamespace || sel == nil || len(sel.MatchExpressions) != 1 ||
					sel.MatchExpressions[0].ScopeName != corev1.ResourceQuotaScopePriorityClass ||
					!slices.Equal(sel.MatchExpressions[0].Values, []string{ds.Spec.Template.Spec.PriorityClassName}) {
					t.Errorf("ResourceQuota %s/%s scope %+v does not cover the plugin's priority class %q", quota.Namespace, quota.Name, sel, ds.Spec.Template.Spec.PriorityClassName)
				}
			case quota != nil:
				t.Errorf("unexpected ResourceQuota %s", quota.Name)
			}
			// The uninstall clean-up runs on the same nodes.
			if c, ok := hooks(r)["DaemonSet/"+ds.Name+"-cleanup"]; !ok {
				t.Error("no clean-up hook DaemonSet")
			} else if cds := toTyped[appsv1.DaemonSet](t, c); !cmp.Equal(cds.Spec.Template.Spec.Affinity, ds.Spec.Template.Spec.Affinity) {
				t.Errorf("the clean-up's affinity differs from the plugin's:\n%s", cmp.Diff(ds.Spec.Template.Spec.Affinity, cds.Spec.Template.Spec.Affinity))
			}
			// The recipe's statement that the NVIDIA device plugin is off is what lets it render.
			back := mergeValues(vals, map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaDevicePluginDisabled": false}}})
			if _, err := Render(Options{Values: back}); err == nil || !strings.Contains(err.Error(), "drivers.gpu.nvidiaDevicePluginDisabled must be true") {
				t.Errorf("with nvidiaDevicePluginDisabled=false: %v, want the coexistence refusal", err)
			}
		})
	}
}
