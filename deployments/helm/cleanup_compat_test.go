package helm

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// pathFlags are the flags of the hooks' commands that name a directory on the node.
var pathFlags = []string{"plugin-data-dir", "checkpoint-dir", "registrar-dir", "cdi-root"}

// hookPaths is every node path a hook names: its hostPath volumes, and the path flags of its
// containers, by where they appear.
func hookPaths(t *testing.T, h *unstructured.Unstructured) map[string]string {
	t.Helper()
	var spec corev1.PodSpec
	switch h.GetKind() {
	case "DaemonSet":
		spec = toTyped[appsv1.DaemonSet](t, h).Spec.Template.Spec
	case "Job":
		spec = toTyped[batchv1.Job](t, h).Spec.Template.Spec
	default:
		return nil
	}
	out := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			out["volume "+v.Name] = path.Clean(v.HostPath.Path)
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, f := range pathFlags {
			if v, ok := FlagValue(c.Args, f); ok {
				out[c.Name+" --"+f] = path.Clean(v)
			}
		}
	}
	return out
}

// modes are the chart's ways of running the plugins whose uninstall hooks must keep to what the
// mode owns: every value set of TestGolden, and NVIDIA's compatibility mode in its forms.
func modes(t *testing.T) map[string]map[string]any {
	out := map[string]map[string]any{}
	for name, vs := range valueSets {
		out[name] = vs.userValues(t)
	}
	compat := map[string]map[string]any{
		"nvidia-compat":                   nil,
		"nvidia-compat-forced":            {"cleanup": map[string]any{"force": true}},
		"nvidia-compat-no-label":          {"drivers": map[string]any{"gpu": map[string]any{"compat": map[string]any{"nodeLabel": ""}}}},
		"nvidia-compat-npu":               {"drivers": map[string]any{"npu": map[string]any{"enabled": true}}},
		"nvidia-compat-kubelet-elsewhere": {"plugin": map[string]any{"kubeletRootDir": "/var/lib/k0s/kubelet/"}},
		"nvidia-compat-mock": mergeValues(func() map[string]any {
			v, err := ValuesFile("values-mock.yaml")
			if err != nil {
				t.Fatal(err)
			}
			return v
		}(), map[string]any{"drivers": map[string]any{"npu": map[string]any{"enabled": false}}}),
	}
	for name, v := range compat {
		out[name] = mergeValues(mergeValues(devicePluginOff, nvidiaCompat), v)
	}
	return out
}

// TestHooksOwnPaths renders every hook in every mode: the node paths they name are the
// plugins' own, and in NVIDIA's compatibility mode none is NVIDIA's driver's
// (<kubelet>/plugins/gpu.nvidia.com, which keeps NVIDIA's checkpoint for a rollback) or under it.
// The node clean-up's data directory is exactly its plugin's.
func TestHooksOwnPaths(t *testing.T) {
	for name, values := range modes(t) {
		t.Run(name, func(t *testing.T) {
			r, err := Render(Options{Values: values})
			if err != nil {
				t.Fatal(err)
			}
			kubelet := "/var/lib/kubelet"
			if plugin, ok := values["plugin"].(map[string]any); !ok {
			} else if d, ok := plugin["kubeletRootDir"].(string); ok {
				kubelet = path.Clean(d)
			}
			// Whose directories the mode must leave alone.
			var foreign []string
			if strings.HasPrefix(name, "nvidia-compat") {
				foreign = append(foreign, kubelet+"/plugins/gpu.nvidia.com")
			}
			own := map[string]string{} // plugin DaemonSet name -> its data directory
			for _, ds := range r.OfKind("DaemonSet") {
				args, err := ContainerArgs(ds, PluginContainer)
				if err != nil {
					continue
				}
				if d, ok := FlagValue(args, "plugin-data-dir"); ok {
					own[ds.GetName()] = path.Clean(d)
				}
			}
			if len(own) == 0 {
				t.Fatal("no plugin DaemonSet")
			}
			for _, h := range r.Hooks {
				for where, p := range hookPaths(t, h) {
					for _, f := range foreign {
						if p == f || strings.HasPrefix(p, f+"/") {
							t.Errorf("%s %s: %s is %s, which this mode does not own", h.GetKind(), h.GetName(), where, p)
						}
					}
					if strings.HasSuffix(where, "--plugin-data-dir") || strings.HasSuffix(where, "--checkpoint-dir") {
						plugin := strings.TrimSuffix(h.GetName(), "-cleanup")
						if d, ok := own[plugin]; !ok || !(p == d || strings.HasPrefix(p, d+"/")) {
							t.Errorf("%s %s: %s is %s, not under its plugin %s's data directory %q", h.GetKind(), h.GetName(), where, p, plugin, d)
						}
					}
				}
			}
		})
	}
}

// TestCleanupHooksNVIDIACompat: in NVIDIA's compatibility mode the release shares the driver
// name gpu.nvidia.com with NVIDIA's driver, node by node. The uninstall's check counts only
// claims on the nodes handed over (and may list Nodes for that), the node clean-up runs on the
// plugin's nodes only, with the plugin's own data directory, and knows the name is shared.
func TestCleanupHooksNVIDIACompat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]any
		scope string // the check's --driver-on-nodes, "" for none
	}{
		{name: "handed over by label", scope: "gpu.nvidia.com=accel-dra.io/nvidia-compat=true"},
		{name: "another label", extra: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"compat": map[string]any{"nodeLabel": "example.com/moved"}}}}, scope: "gpu.nvidia.com=example.com/moved=true"},
		// No label: accel-dra serves the name on every node it runs on (a cluster that never ran
		// NVIDIA's driver), so every claim of it is the release's.
		{name: "no label", extra: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"compat": map[string]any{"nodeLabel": ""}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := render(Options{Values: mergeValues(nvidiaCompat, tc.extra)})
			if err != nil {
				t.Fatal(err)
			}
			h := hooks(r)
			job := toTyped[batchv1.Job](t, hookOf(t, h, "Job/accel-dra-cleanup-check", "pre-delete"))
			args := job.Spec.Template.Spec.Containers[0].Args
			var scopes, drivers []string
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, "--driver-on-nodes="); ok {
					scopes = append(scopes, v)
				}
				if v, ok := strings.CutPrefix(a, "--driver-name="); ok {
					drivers = append(drivers, v)
				}
			}
			if !slices.Equal(drivers, []string{"gpu.nvidia.com"}) {
				t.Errorf("the check's drivers %v, want gpu.nvidia.com", drivers)
			}
			var want []string
			if tc.scope != "" {
				want = []string{tc.scope}
			}
			if !slices.Equal(scopes, want) {
				t.Errorf("the check's scopes %v, want %v", scopes, want)
			}
			cr := toTyped[rbacv1.ClusterRole](t, hookOf(t, h, "ClusterRole/accel-dra-cleanup", "pre-delete"))
			canListNodes := slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Contains(r.Resources, "nodes") && slices.Equal(r.Verbs, []string{"list"})
			})
			if canListNodes != (tc.scope != "") {
				t.Errorf("the check may list nodes: %v, want %v (rules %+v)", canListNodes, tc.scope != "", cr.Rules)
			}

			plugin := toTyped[appsv1.DaemonSet](t, mustPluginDS(t, r, "gpu.nvidia.com"))
			name := plugin.Name + "-cleanup"
			ds := toTyped[appsv1.DaemonSet](t, hookOf(t, h, "DaemonSet/"+name, "post-delete"))
			ps, cs := plugin.Spec.Template.Spec, ds.Spec.Template.Spec
			if !cmp.Equal(ps.Affinity, cs.Affinity) || !cmp.Equal(ps.NodeSelector, cs.NodeSelector) || !cmp.Equal(ps.Tolerations, cs.Tolerations) {
				t.Errorf("%s: the clean-up's nodes differ from the plugin's:\n%s", name, cmp.Diff(
					[]any{ps.Affinity, ps.NodeSelector, ps.Tolerations}, []any{cs.Affinity, cs.NodeSelector, cs.Tolerations}))
			}
			init := cs.InitContainers[0]
			for _, flag := range []string{"driver-name", "plugin-data-dir", "registrar-dir", "cdi-root"} {
				if got, want := flagOf(init.Args, flag), flagOf(ps.Containers[0].Args, flag); got != want {
					t.Errorf("%s: --%s=%q, want the plugin's %q", name, flag, got, want)
				}
			}
			if !slices.Contains(init.Args, "--nvidia-compat") {
				t.Errorf("%s: args %q, want --nvidia-compat", name, init.Args)
			}
			waited := flagOf(toTyped[batchv1.Job](t, hookOf(t, h, "Job/accel-dra-cleanup-wait", "post-delete")).Spec.Template.Spec.Containers[0].Args, "daemonset")
			if waited != name {
				t.Errorf("the wait Job waits for %q, want %q", waited, name)
			}
		})
	}
	// The mode's names reach the hooks whatever order Helm renders the templates in: the
	// same values render the same hooks twice.
	a, err := render(Options{Values: nvidiaCompat})
	if err != nil {
		t.Fatal(err)
	}
	b, err := render(Options{Values: nvidiaCompat})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(hooks(a))), slices.Sorted(maps.Keys(hooks(b)))); diff != "" {
		t.Errorf("two renders differ:\n%s", diff)
	}
}
