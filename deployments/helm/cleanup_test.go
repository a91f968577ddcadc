package helm

import (
	"maps"
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

// hooks returns the rendered hooks by kind and name.
func hooks(r *Rendered) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, h := range r.Hooks {
		out[h.GetKind()+"/"+h.GetName()] = h
	}
	return out
}

func hookOf(t *testing.T, h map[string]*unstructured.Unstructured, key, phase string) *unstructured.Unstructured {
	t.Helper()
	o, ok := h[key]
	if !ok {
		t.Fatalf("no hook %s; hooks: %v", key, slices.Sorted(maps.Keys(h)))
	}
	if got := o.GetAnnotations()[HookAnnotation]; got != phase {
		t.Errorf("%s: hook %q, want %q", key, got, phase)
	}
	if !strings.Contains(o.GetAnnotations()["helm.sh/hook-delete-policy"], "before-hook-creation") {
		t.Errorf("%s: a failed uninstall's hook would block the next one: delete policy %q", key, o.GetAnnotations()["helm.sh/hook-delete-policy"])
	}
	return o
}

// TestCleanupHooks: the uninstall clean-up (docs/uninstall.md). A pre-delete Job checks the
// drivers' claims with a ClusterRole that may only list them; after the release's objects are
// gone, a DaemonSet per driver runs `cleanup node` on exactly the plugin's nodes with the
// plugin's paths, and a Job waits for them all. None of it is part of what install applies.
func TestCleanupHooks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		force  bool
	}{
		{name: "mock, both drivers", values: mergeValues(valueSets["mock-file"].values, nil)},
		{name: "nvml, kubelet elsewhere", values: mergeValues(devicePluginOff, map[string]any{
			"plugin":  map[string]any{"kubeletRootDir": "/var/lib/k0s/kubelet/", "cdiDir": "/etc/cdi"},
			"drivers": map[string]any{"gpu": map[string]any{"nodeSelector": map[string]any{"gpu": "yes"}}, "npu": map[string]any{"enabled": true}},
		})},
		{name: "forced", values: mergeValues(devicePluginOff, map[string]any{"cleanup": map[string]any{"force": true}, "drivers": map[string]any{"npu": map[string]any{"enabled": true}}}), force: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := map[string]any{}
			if tc.name == "mock, both drivers" {
				var err error
				if file, err = ValuesFile("values-mock.yaml"); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Render(Options{Values: mergeValues(file, tc.values)})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range r.Objects {
				if _, ok := o.GetAnnotations()[HookAnnotation]; ok || strings.Contains(o.GetName(), "cleanup") {
					t.Errorf("%s %s is applied at install", o.GetKind(), o.GetName())
				}
			}
			h := hooks(r)
			phases := "pre-delete,post-delete"
			if tc.force {
				phases = "post-delete"
			}
			hookOf(t, h, "ServiceAccount/accel-dra-cleanup", phases)
			drivers := []string{"gpu.accel-dra.io", "npu.accel-dra.io"}

			if tc.force {
				for _, k := range []string{"Job/accel-dra-cleanup-check", "ClusterRole/accel-dra-cleanup"} {
					if _, ok := h[k]; ok {
						t.Errorf("forced, but %s refuses claims in use", k)
					}
				}
			} else {
				cr := toTyped[rbacv1.ClusterRole](t, hookOf(t, h, "ClusterRole/accel-dra-cleanup", "pre-delete"))
				if want := []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"list"}}}; !cmp.Equal(cr.Rules, want) {
					t.Errorf("check ClusterRole rules %+v, want only %+v", cr.Rules, want)
				}
				job := toTyped[batchv1.Job](t, hookOf(t, h, "Job/accel-dra-cleanup-check", "pre-delete"))
				c := job.Spec.Template.Spec.Containers[0]
				var got []string
				for _, a := range c.Args {
					got = append(got, strings.TrimPrefix(a, "--driver-name="))
				}
				if !slices.Equal(c.Command[1:], []string{"cleanup", "check"}) || !slices.Equal(got, drivers) {
					t.Errorf("check runs %v %v, want cleanup check of %v", c.Command, c.Args, drivers)
				}
				if job.Spec.Template.Spec.ServiceAccountName != "accel-dra-cleanup" {
					t.Errorf("check Job runs as %q", job.Spec.Template.Spec.ServiceAccountName)
				}
			}
			role := toTyped[rbacv1.Role](t, hookOf(t, h, "Role/accel-dra-cleanup", "post-delete"))
			if want := []rbacv1.PolicyRule{
				{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
			}; !cmp.Equal(role.Rules, want) {
				t.Errorf("wait Role rules %+v, want %+v", role.Rules, want)
			}

			var dsNames []string
			for _, driver := range drivers {
				plugin := toTyped[appsv1.DaemonSet](t, mustPluginDS(t, r, driver))
				key := strings.TrimSuffix(driver, ".accel-dra.io")
				name := plugin.Name + "-cleanup"
				dsNames = append(dsNames, name)
				ds := toTyped[appsv1.DaemonSet](t, hookOf(t, h, "DaemonSet/"+name, "post-delete"))
				ps, cs := plugin.Spec.Template.Spec, ds.Spec.Template.Spec
				if !cmp.Equal(ps.Affinity, cs.Affinity) || !cmp.Equal(ps.NodeSelector, cs.NodeSelector) || !cmp.Equal(ps.Tolerations, cs.Tolerations) {
					t.Errorf("%s: the clean-up's nodes differ from the plugin's:\n%s", name, cmp.Diff(
						[]any{ps.Affinity, ps.NodeSelector, ps.Tolerations}, []any{cs.Affinity, cs.NodeSelector, cs.Tolerations}))
				}
				if cs.PriorityClassName != "" {
					t.Errorf("%s: priority class %q, whose ResourceQuota is deleted before the hook runs", name, cs.PriorityClassName)
				}
				if len(cs.InitContainers) != 1 || len(cs.Containers) != 1 {
					t.Fatalf("%s: %d init containers and %d containers, want 1 and 1", name, len(cs.InitContainers), len(cs.Containers))
				}
				init := cs.InitContainers[0]
				pargs := ps.Containers[0].Args
				for flag, want := range map[string]string{
					"driver-name":     driver,
					"plugin-data-dir": flagOf(pargs, "plugin-data-dir"),
					"registrar-dir":   flagOf(pargs, "registrar-dir"),
					"cdi-root":        flagOf(pargs, "cdi-root"),
					"device-kind":     key,
				} {
					if got := flagOf(init.Args, flag); got != want {
						t.Errorf("%s: --%s=%q, want %q (the plugin's)", name, flag, got, want)
					}
				}
				if got := slices.Contains(init.Args, "--force"); got != tc.force {
					t.Errorf("%s: --force %v, want %v", name, got, tc.force)
				}
				// The host directories the plugin writes to, mounted where its flags say.
				hostPaths := func(spec corev1.PodSpec, c corev1.Container) map[string]string {
					vols := map[string]string{}
					for _, v := range spec.Volumes {
						if v.HostPath != nil {
							vols[v.Name] = v.HostPath.Path
						}
					}
					out := map[string]string{}
					for _, m := range c.VolumeMounts {
						if p, ok := vols[m.Name]; ok {
							out[m.MountPath] = p
						}
					}
					return out
				}
				cm, pm := hostPaths(cs, init), hostPaths(ps, ps.Containers[0])
				for _, dir := range []string{flagOf(init.Args, "cdi-root"), flagOf(init.Args, "registrar-dir"), strings.TrimSuffix(flagOf(init.Args, "plugin-data-dir"), "/"+driver)} {
					if cm[dir] == "" || cm[dir] != pm[dir] {
						t.Errorf("%s: %s is host %q, the plugin's is %q", name, dir, cm[dir], pm[dir])
					}
				}
			}
			job := toTyped[batchv1.Job](t, hookOf(t, h, "Job/accel-dra-cleanup-wait", "post-delete"))
			var waited []string
			for _, a := range job.Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--daemonset="); ok {
					waited = append(waited, v)
				}
			}
			if !slices.Equal(waited, dsNames) {
				t.Errorf("the wait Job waits for %v, want %v", waited, dsNames)
			}
			// Helm creates hooks by weight: the RBAC, then the DaemonSets, then the Job it waits for.
			w := func(k string) string { return h[k].GetAnnotations()["helm.sh/hook-weight"] }
			if !(w("Role/accel-dra-cleanup") < w("DaemonSet/"+dsNames[0]) && w("DaemonSet/"+dsNames[0]) < w("Job/accel-dra-cleanup-wait")) {
				t.Errorf("hook weights: Role %s, DaemonSet %s, Job %s", w("Role/accel-dra-cleanup"), w("DaemonSet/"+dsNames[0]), w("Job/accel-dra-cleanup-wait"))
			}
		})
	}
	r, err := render(Options{Values: map[string]any{"cleanup": map[string]any{"enabled": false}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Hooks) != 0 {
		t.Errorf("cleanup.enabled=false renders %d hooks", len(r.Hooks))
	}
}

func mustPluginDS(t *testing.T, r *Rendered, driver string) *unstructured.Unstructured {
	t.Helper()
	ds, err := r.PluginDaemonSet(driver)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func flagOf(args []string, name string) string {
	v, _ := FlagValue(args, name)
	return v
}

// TestPublisherCleanupHook: with the publisher, a post-delete Job runs its binary's cleanup,
// which may only list and patch node groups (MachineDeployments, MachineSets, MachinePools),
// where the publisher watched them.
func TestPublisherCleanupHook(t *testing.T) {
	for _, tc := range []struct {
		name      string
		publisher map[string]any
		roleKind  string
		namespace string
	}{
		{name: "all namespaces", publisher: map[string]any{"enabled": true}, roleKind: "ClusterRole"},
		{name: "watch namespace", publisher: map[string]any{"enabled": true, "watchNamespace": "capi"}, roleKind: "Role", namespace: "capi"},
		{name: "no publisher", publisher: map[string]any{"enabled": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := render(Options{Values: map[string]any{"publisher": tc.publisher}})
			if err != nil {
				t.Fatal(err)
			}
			h := hooks(r)
			if tc.roleKind == "" {
				for k := range h {
					if strings.HasSuffix(k, "-annotations") {
						t.Errorf("no publisher, but hook %s", k)
					}
				}
				return
			}
			role := hookOf(t, h, tc.roleKind+"/accel-dra-cleanup-annotations", "post-delete")
			if role.GetNamespace() != tc.namespace {
				t.Errorf("%s in namespace %q, want %q", tc.roleKind, role.GetNamespace(), tc.namespace)
			}
			rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
			want := []any{map[string]any{"apiGroups": []any{"cluster.x-k8s.io"}, "resources": []any{"machinedeployments", "machinesets", "machinepools"}, "verbs": []any{"list", "patch"}}}
			if !cmp.Equal(rules, want) {
				t.Errorf("rules %v, want %v", rules, want)
			}
			hookOf(t, h, tc.roleKind+"Binding/accel-dra-cleanup-annotations", "post-delete")
			job := toTyped[batchv1.Job](t, hookOf(t, h, "Job/accel-dra-cleanup-annotations", "post-delete"))
			c := job.Spec.Template.Spec.Containers[0]
			pub, err := r.PublisherDeployment()
			if err != nil {
				t.Fatal(err)
			}
			if img := images(t, pub.Object); c.Image != img[0] || !slices.Equal(c.Command, []string{"/usr/bin/accel-dra-template-publisher", "cleanup"}) {
				t.Errorf("the Job runs %s %v, want the publisher's image %s and its cleanup", c.Image, c.Command, img[0])
			}
			if got := flagOf(c.Args, "watch-namespace"); got != tc.namespace {
				t.Errorf("--watch-namespace=%q, want %q", got, tc.namespace)
			}
		})
	}
}
