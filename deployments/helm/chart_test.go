package helm

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/accel-dra/accel-dra/pkg/nodelabels"
	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/publisher"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// valueSet is one way to install the chart, as a user would with -f and --set.
type valueSet struct {
	file   string         // a bundled values file, or ""
	values map[string]any // --set, merged over file
	// What the values enable, checked against the rendered objects.
	drivers   map[string]string // driver name -> backend
	profiles  map[string]string // driver name -> --mock-profile ("" for none)
	surge     bool
	publisher bool
}

// ValueSets are the installations the tests render (and e2e/packaging applies). Keyed by name;
// each has a golden file testdata/<name>.golden.yaml.
var valueSets = map[string]valueSet{
	"default": {
		values:  devicePluginOff,
		drivers: map[string]string{"gpu.accel-dra.io": "nvml"}, surge: true,
	},
	// The GPU operator's driver container: the driver root is mounted through its parent.
	"gpu-operator": {
		values:  map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaDriverRoot": "/run/nvidia/driver", "nvidiaDevicePluginDisabled": true}}},
		drivers: map[string]string{"gpu.accel-dra.io": "nvml"}, surge: true,
	},
	"mock-flag": {
		values:  map[string]any{"mock": map[string]any{"enabled": true}},
		drivers: map[string]string{"gpu.accel-dra.io": "mock"}, surge: true,
	},
	// The GPU mock given a driver root uses it (--mock-driver-root=use), mounted as for nvml.
	"mock-driver-root": {
		values:  map[string]any{"mock": map[string]any{"enabled": true}, "drivers": map[string]any{"gpu": map[string]any{"nvidiaDriverRoot": "/run/nvidia/driver"}}},
		drivers: map[string]string{"gpu.accel-dra.io": "mock"}, surge: true,
	},
	"mock-file": {
		file:     "values-mock.yaml",
		drivers:  map[string]string{"gpu.accel-dra.io": "mock", "npu.accel-dra.io": "npu-mock"},
		profiles: map[string]string{"gpu.accel-dra.io": "h100-8x-2numa", "npu.accel-dra.io": "ascend910b-8x"},
		surge:    true,
	},
	"npu": {
		values: map[string]any{"drivers": map[string]any{
			"gpu": map[string]any{"enabled": false},
			"npu": map[string]any{"enabled": true},
		}},
		drivers: map[string]string{"npu.accel-dra.io": "npu"}, surge: true,
	},
	"publisher": {
		file:      "values-mock.yaml",
		values:    map[string]any{"publisher": map[string]any{"enabled": true}},
		drivers:   map[string]string{"gpu.accel-dra.io": "mock", "npu.accel-dra.io": "npu-mock"},
		profiles:  map[string]string{"gpu.accel-dra.io": "h100-8x-2numa", "npu.accel-dra.io": "ascend910b-8x"},
		surge:     true,
		publisher: true,
	},
	"publisher-watch-namespace-npu": {
		values: map[string]any{
			"drivers":   map[string]any{"gpu": map[string]any{"enabled": false}, "npu": map[string]any{"enabled": true}},
			"publisher": map[string]any{"enabled": true, "watchNamespace": "capi"},
		},
		drivers: map[string]string{"npu.accel-dra.io": "npu"}, surge: true, publisher: true,
	},
	"publisher-management": {
		values: map[string]any{
			"drivers":   devicePluginOff["drivers"],
			"publisher": map[string]any{"enabled": true, "watchNamespace": "capi", "mode": "management"},
		},
		drivers: map[string]string{"gpu.accel-dra.io": "nvml"}, surge: true, publisher: true,
	},
	"no-surge-extended-resource": {
		values: map[string]any{
			"plugin": map[string]any{"rollingUpdateWithSurge": false},
			"drivers": map[string]any{"gpu": map[string]any{
				"backend": "mock", "mockProfile": "a100-8x",
				"deviceClass": map[string]any{"extendedResourceName": "accel-dra.io/gpu"},
			}},
		},
		drivers:  map[string]string{"gpu.accel-dra.io": "mock"},
		profiles: map[string]string{"gpu.accel-dra.io": "a100-8x"},
	},
}

// devicePluginOff is what the chart requires of the nvml backend: the user's word that no NVIDIA
// device plugin runs on its nodes.
var devicePluginOff = map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaDevicePluginDisabled": true}}}

// render and pluginArgs are Render and PluginArgs with the NVIDIA device plugin stated off
// (values may say otherwise), for tests of other values that render the nvml backend.
func render(opts Options) (*Rendered, error) {
	opts.Values = mergeValues(devicePluginOff, opts.Values)
	return Render(opts)
}

func pluginArgs(values map[string]any, driverName string, overrides map[string]string) ([]string, error) {
	return PluginArgs(mergeValues(devicePluginOff, values), driverName, overrides)
}

func (vs valueSet) userValues(t *testing.T) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if vs.file != "" {
		var err error
		if vals, err = ValuesFile(vs.file); err != nil {
			t.Fatal(err)
		}
	}
	return mergeValues(vals, vs.values)
}

// mergeValues merges src over dst, recursively, like repeated helm --set.
func mergeValues(dst, src map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(dm, sm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func renderSet(t *testing.T, vs valueSet) *Rendered {
	t.Helper()
	r, err := Render(Options{Values: vs.userValues(t)})
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	return r
}

// TestGolden compares each value set's rendering with testdata/<name>.golden.yaml.
func TestGolden(t *testing.T) {
	for name, vs := range valueSets {
		t.Run(name, func(t *testing.T) {
			got := renderSet(t, vs).YAML()
			path := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("rendering differs from %s (-want +got; run with -update if intended):\n%s", path, diff)
			}
		})
	}
}

// TestObjectsDecodeStrictly decodes every rendered object into its API type, refusing unknown
// fields, so a misspelt field fails here and not only on a cluster.
func TestObjectsDecodeStrictly(t *testing.T) {
	for name, vs := range valueSets {
		t.Run(name, func(t *testing.T) {
			for _, o := range renderSet(t, vs).Objects {
				typed, err := testScheme.New(o.GroupVersionKind())
				if err != nil {
					t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
					continue
				}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, typed, true); err != nil {
					t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		})
	}
}

func toTyped[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var typed T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &typed); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &typed
}

// TestPluginArgsParse parses every plugin container's args with the plugin's own flag set, in
// the environment the downward API gives the container, and checks what the plugin then does:
// its paths are the mounted host paths, its driver and backend those the values ask for, and
// rolling update with surge is on exactly when the DaemonSet surges.
func TestPluginArgsParse(t *testing.T) {
	for name, vs := range valueSets {
		t.Run(name, func(t *testing.T) {
			r := renderSet(t, vs)
			dss := r.OfKind("DaemonSet")
			if len(dss) != len(vs.drivers) {
				t.Fatalf("%d DaemonSets, want one per driver %v", len(dss), vs.drivers)
			}
			for driver, backend := range vs.drivers {
				u, err := r.PluginDaemonSet(driver)
				if err != nil {
					t.Fatal(err)
				}
				ds := toTyped[appsv1.DaemonSet](t, u)
				checkPluginDaemonSet(t, r, ds, driver, backend, vs.profiles[driver], vs.surge)
			}
		})
	}
}

func checkPluginDaemonSet(t *testing.T, r *Rendered, ds *appsv1.DaemonSet, driver, backend, profile string, surge bool) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == PluginContainer })
	if i < 0 {
		t.Fatalf("DaemonSet %s has no container %q", ds.Name, PluginContainer)
	}
	c := spec.Containers[i]

	// The downward API, as the kubelet resolves it.
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			t.Setenv(e.Name, "node-a")
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.uid":
			t.Setenv(e.Name, "pod-uid-1")
		case e.ValueFrom == nil:
			t.Setenv(e.Name, e.Value)
		default:
			t.Errorf("%s: env %s from %v: not simulated by this test", ds.Name, e.Name, e.ValueFrom)
		}
	}
	if os.Getenv("POD_UID") != "" && !surge {
		t.Errorf("%s: POD_UID is set without surge", ds.Name)
	}
	o := nodeplugin.NewOptions() // reads NODE_NAME and POD_UID
	if err := o.NewFlagSet().Parse(c.Args); err != nil {
		t.Fatalf("%s: the plugin refuses the chart's args %q: %v", ds.Name, c.Args, err)
	}
	if err := o.Complete(); err != nil {
		t.Fatalf("%s: %v", ds.Name, err)
	}
	if o.NodeName != "node-a" {
		t.Errorf("%s: node name %q, want it from the downward API", ds.Name, o.NodeName)
	}
	if o.DriverName != driver || o.Backend != backend || o.MockProfile != profile {
		t.Errorf("%s: driver %q backend %q profile %q, want %q %q %q", ds.Name, o.DriverName, o.Backend, o.MockProfile, driver, backend, profile)
	}

	// Rolling update with surge needs the pod UID, and the kubelet's handover needs it.
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil || ru.MaxUnavailable == nil {
		t.Fatalf("%s: update strategy %+v", ds.Name, ds.Spec.UpdateStrategy)
	}
	if surge {
		if ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable.IntValue() != 0 || o.PodUID != "pod-uid-1" {
			t.Errorf("%s: maxSurge %s maxUnavailable %s pod UID %q, want 1, 0 and the pod's UID", ds.Name, ru.MaxSurge, ru.MaxUnavailable, o.PodUID)
		}
	} else if ru.MaxSurge.IntValue() != 0 || o.PodUID != "" {
		t.Errorf("%s: maxSurge %s pod UID %q, want 0 and none: a kubelet without rolling update would lose the plugin", ds.Name, ru.MaxSurge, o.PodUID)
	}

	// Every directory the plugin uses is a host path mounted at the same path (the kubelet
	// dials the registered socket path on the host; the runtime reads CDI specs there), except
	// /dev, which is only statted.
	mounts := map[string]string{} // mount path -> host path
	vols := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v.HostPath
	}
	for _, m := range c.VolumeMounts {
		hp := vols[m.Name]
		if hp == nil {
			t.Errorf("%s: mount %s is not a hostPath volume", ds.Name, m.Name)
			continue
		}
		mounts[m.MountPath] = hp.Path
	}
	hostPathOf := func(p string) (string, bool) {
		for mp, hp := range mounts {
			if p == mp || strings.HasPrefix(p, mp+"/") {
				return hp + strings.TrimPrefix(p, mp), true
			}
		}
		return "", false
	}
	for flagName, p := range map[string]string{
		"plugin-data-dir": o.PluginDataDir, "registrar-dir": o.RegistrarDir, "cdi-root": o.CDIRoot,
		"checkpoint-dir": o.CheckpointDir, "mock-dir": o.MockDir,
	} {
		hp, ok := hostPathOf(p)
		if !ok {
			t.Errorf("%s: --%s=%s is not on a host path: it would not survive a restart or reach the kubelet", ds.Name, flagName, p)
		} else if hp != p {
			t.Errorf("%s: --%s=%s is host path %s; the plugin must see host paths at their own path", ds.Name, flagName, p, hp)
		}
	}
	// The driver roots: the plugin sees, at the flagged path, the host tree it names as the
	// host's in CDI specs; the mocks bring their own.
	for _, root := range []struct{ flag, seen, host, backend string }{
		{"nvidia-driver-root", o.NVIDIADriverRoot, o.NVIDIAHostDriverRoot, "nvml"},
		{"ascend-driver-root", o.AscendDriverRoot, o.AscendHostDriverRoot, "npu"},
	} {
		if root.backend != backend || root.seen == "" {
			continue
		}
		if hp, ok := hostPathOf(root.seen); !ok || hp != root.host {
			t.Errorf("%s: --%s=%s is host path %q, but the specs would name host path %q", ds.Name, root.flag, root.seen, hp, root.host)
		}
	}
	if hp, ok := hostPathOf(o.DevRoot); !ok || hp != "/dev" {
		t.Errorf("%s: --dev-root=%s is host path %q, want /dev", ds.Name, o.DevRoot, hp)
	}
	if o.PluginDataDir != "/var/lib/kubelet/plugins/"+driver || o.RegistrarDir != "/var/lib/kubelet/plugins_registry" || o.CDIRoot != "/var/run/cdi" {
		t.Errorf("%s: paths %s %s %s, want the kubelet's and the runtime's defaults", ds.Name, o.PluginDataDir, o.RegistrarDir, o.CDIRoot)
	}

	// The probes reach the plugin's HTTP endpoint.
	if !strings.HasSuffix(o.HTTPAddress, ":8080") || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("%s: --http-address %q, ports %+v", ds.Name, o.HTTPAddress, c.Ports)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("%s: readiness probe %+v, want GET /readyz (registered with the kubelet)", ds.Name, c.ReadinessProbe)
	}
	// /healthz answers 503 while the plugin starts: the liveness probe, which would restart it
	// after 30 s, runs only once the startup probe, with minutes for the start-up, succeeded.
	if p := c.StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.PeriodSeconds*p.FailureThreshold < 300 {
		t.Errorf("%s: startup probe %+v, want GET /healthz for at least five minutes", ds.Name, c.StartupProbe)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("%s: liveness probe %+v, want GET /healthz", ds.Name, c.LivenessProbe)
	}

	// Identity: the DaemonSet's own ServiceAccount, bound to the plugin role and named in the
	// admission policy with this driver.
	sa := spec.ServiceAccountName
	if r.Find("ServiceAccount", sa) == nil {
		t.Errorf("%s: ServiceAccount %s is not rendered", ds.Name, sa)
	}
	user := "system:serviceaccount:" + DefaultNamespace + ":" + sa
	vap := r.Find("ValidatingAdmissionPolicy", DefaultReleaseName+"-resourceslices")
	if vap == nil {
		t.Fatalf("no ValidatingAdmissionPolicy")
	}
	policy := toTyped[admissionv1.ValidatingAdmissionPolicy](t, vap)
	if len(policy.Spec.MatchConditions) != 1 || !strings.Contains(policy.Spec.MatchConditions[0].Expression, `"`+user+`"`) {
		t.Errorf("policy match conditions %+v do not name %s", policy.Spec.MatchConditions, user)
	}
	if !slices.ContainsFunc(policy.Spec.Variables, func(v admissionv1.Variable) bool {
		return strings.Contains(v.Expression, `"`+user+`":"`+driver+`"`)
	}) {
		t.Errorf("policy variables %+v do not allow %s only driver %s", policy.Spec.Variables, user, driver)
	}
	crb := toTyped[rbacv1.ClusterRoleBinding](t, r.Find("ClusterRoleBinding", DefaultReleaseName+"-plugin"))
	if !slices.Contains(crb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: DefaultNamespace}) {
		t.Errorf("ClusterRoleBinding subjects %+v lack %s", crb.Subjects, sa)
	}

	// Its DeviceClass.
	dc := r.Find("DeviceClass", driver)
	if dc == nil {
		t.Fatalf("no DeviceClass %s", driver)
	}
	class := toTyped[resourceapi.DeviceClass](t, dc)
	want := `device.driver == "` + driver + `"`
	if driver == "gpu.accel-dra.io" {
		// Whole GPUs in the driver's class, MIG devices in their own (docs/mig.md).
		want += ` && device.attributes["` + driver + `"].type == "gpu"`
		mig := r.Find("DeviceClass", "mig.gpu.accel-dra.io")
		if mig == nil {
			t.Fatal("no DeviceClass mig.gpu.accel-dra.io")
		}
		mc := toTyped[resourceapi.DeviceClass](t, mig)
		if len(mc.Spec.Selectors) != 1 || mc.Spec.Selectors[0].CEL == nil || mc.Spec.Selectors[0].CEL.Expression != `device.driver == "`+driver+`" && device.attributes["`+driver+`"].type == "mig"` {
			t.Errorf("DeviceClass mig.gpu.accel-dra.io selectors %+v", mc.Spec.Selectors)
		}
	}
	if len(class.Spec.Selectors) != 1 || class.Spec.Selectors[0].CEL == nil || class.Spec.Selectors[0].CEL.Expression != want {
		t.Errorf("DeviceClass %s selectors %+v", driver, class.Spec.Selectors)
	}
}

// TestRBACIsMinimal pins the plugin's permissions: adding one must be a deliberate change here,
// with its reason in templates/plugin-rbac.yaml.
func TestRBACIsMinimal(t *testing.T) {
	r := renderSet(t, valueSets["mock-file"])
	cr := toTyped[rbacv1.ClusterRole](t, r.Find("ClusterRole", DefaultReleaseName+"-plugin"))
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
		// patch: the GPU plugin's fabric clique label of its own Node (ValidatingAdmissionPolicy
		// <fullname>-node-label holds it to that one label).
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
	}
	if diff := cmp.Diff(want, cr.Rules); diff != "" {
		t.Errorf("plugin ClusterRole rules (-want +got):\n%s", diff)
	}
	role := toTyped[rbacv1.Role](t, r.Find("Role", DefaultReleaseName+"-plugin-node-events"))
	if role.Namespace != "default" {
		t.Errorf("events Role in namespace %q, want default (where events about Nodes go)", role.Namespace)
	}
	if diff := cmp.Diff([]rbacv1.PolicyRule{{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}, role.Rules); diff != "" {
		t.Errorf("events Role rules (-want +got):\n%s", diff)
	}
	// The GPU plugin's MPS control daemon pods, in the release namespace only, for its own
	// ServiceAccount only.
	mps := toTyped[rbacv1.Role](t, r.Find("Role", DefaultReleaseName+"-plugin-mps-daemons"))
	if mps.Namespace != DefaultNamespace {
		t.Errorf("MPS daemons Role in namespace %q, want the release's", mps.Namespace)
	}
	if diff := cmp.Diff([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "create", "delete"}}}, mps.Rules); diff != "" {
		t.Errorf("MPS daemons Role rules (-want +got):\n%s", diff)
	}
	rb := toTyped[rbacv1.RoleBinding](t, r.Find("RoleBinding", DefaultReleaseName+"-plugin-mps-daemons"))
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: DefaultReleaseName + "-gpu-plugin", Namespace: DefaultNamespace}}; !slices.Equal(rb.Subjects, want) {
		t.Errorf("MPS daemons RoleBinding subjects %+v, want %+v", rb.Subjects, want)
	}
	if n := len(r.OfKind("ClusterRole")) + len(r.OfKind("Role")); n != 3 {
		t.Errorf("%d roles rendered, want the plugin's three", n)
	}
	// Without the GPU plugin, or with daemons as its processes, no pods at all.
	for name, values := range map[string]map[string]any{
		"npu only":        valueSets["npu"].values,
		"process daemons": {"plugin": map[string]any{"sharing": map[string]any{"mpsDaemons": "process"}}},
	} {
		r, err := render(Options{Values: values})
		if err != nil {
			t.Fatal(err)
		}
		if r.Find("Role", DefaultReleaseName+"-plugin-mps-daemons") != nil || r.Find("ValidatingAdmissionPolicy", DefaultReleaseName+"-mps-daemons") != nil {
			t.Errorf("%s: the plugin may manage pods", name)
		}
	}
}

// TestPublisherArgsParse parses the publisher container's args with the publisher's own flag
// set and checks them against the values.
func TestPublisherArgsParse(t *testing.T) {
	for name, vs := range valueSets {
		t.Run(name, func(t *testing.T) {
			r := renderSet(t, vs)
			u, err := r.PublisherDeployment()
			if !vs.publisher {
				if err == nil {
					t.Errorf("publisher Deployment rendered without publisher.enabled")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d := toTyped[appsv1.Deployment](t, u)
			c := d.Spec.Template.Spec.Containers[0]
			o := publisher.NewOptions()
			if err := o.NewFlagSet().Parse(c.Args); err != nil {
				t.Fatalf("the publisher refuses the chart's args %q: %v", c.Args, err)
			}
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			var drivers []string
			for d := range vs.drivers {
				drivers = append(drivers, d)
			}
			slices.Sort(drivers)
			if !slices.Equal(o.Drivers, drivers) {
				t.Errorf("--drivers %v, want the enabled drivers %v", o.Drivers, drivers)
			}
			// The preference between drivers for a group with both (nodegroup.DRA): the GPU
			// driver, or the NPU driver where it is the only one; empty (no legacy keys) only
			// without either.
			wantGPU := ""
			if _, ok := vs.drivers["gpu.accel-dra.io"]; ok {
				wantGPU = "gpu.accel-dra.io"
			} else if _, ok := vs.drivers["npu.accel-dra.io"]; ok {
				wantGPU = "npu.accel-dra.io"
			}
			if o.GPUDriver != wantGPU {
				t.Errorf("--autoscaler-gpu-driver %q, want %q", o.GPUDriver, wantGPU)
			}
			if !o.LeaderElect || o.LeaderElectionNamespace != DefaultNamespace || o.LeaderElectionID != d.Name {
				t.Errorf("leader election %v in %q lease %q, want on, in the release namespace, lease %s", o.LeaderElect, o.LeaderElectionNamespace, o.LeaderElectionID, d.Name)
			}
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port.String() != "health" {
				t.Errorf("readiness probe %+v, want GET /readyz on port health", c.ReadinessProbe)
			}
			for _, p := range c.Ports {
				addr := map[string]string{"metrics": o.MetricsBindAddress, "health": o.HealthProbeBindAddress}[p.Name]
				if addr != ":"+strconv.Itoa(int(p.ContainerPort)) {
					t.Errorf("port %s %d, but the publisher listens on %q", p.Name, p.ContainerPort, addr)
				}
			}
			if sc := d.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Errorf("publisher pod security context %+v, want non-root", sc)
			}

			// Its ServiceAccount is bound to its roles, and the rules are those of
			// docs/template-publisher.md.
			groupRules := []rbacv1.PolicyRule{
				{APIGroups: []string{"cluster.x-k8s.io"}, Resources: []string{"machines"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"cluster.x-k8s.io"}, Resources: []string{"machinesets", "machinedeployments", "machinepools"}, Verbs: []string{"get", "list", "watch", "patch"}},
				{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			}
			var clusterRules []rbacv1.PolicyRule
			if o.Mode == publisher.ModeSelfManaged {
				clusterRules = []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
					{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch"}},
				}
			} else {
				// The kubeconfig Secrets; the nodes are read with those.
				groupRules = append(groupRules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}})
			}
			if o.WatchNamespace == "" {
				clusterRules = append(clusterRules, groupRules...)
			} else {
				role := toTyped[rbacv1.Role](t, r.Find("Role", d.Name+"-groups"))
				if role.Namespace != o.WatchNamespace {
					t.Errorf("group Role in %q, want the watch namespace %q", role.Namespace, o.WatchNamespace)
				}
				if diff := cmp.Diff(groupRules, role.Rules); diff != "" {
					t.Errorf("group Role rules (-want +got):\n%s", diff)
				}
				checkBinding(t, r, "RoleBinding", d.Name+"-groups", d.Spec.Template.Spec.ServiceAccountName)
			}
			if clusterRules == nil {
				if r.Find("ClusterRole", d.Name) != nil {
					t.Errorf("a publisher ClusterRole although it needs nothing cluster-wide")
				}
			} else {
				cr := toTyped[rbacv1.ClusterRole](t, r.Find("ClusterRole", d.Name))
				if diff := cmp.Diff(clusterRules, cr.Rules); diff != "" {
					t.Errorf("publisher ClusterRole rules (-want +got):\n%s", diff)
				}
				checkBinding(t, r, "ClusterRoleBinding", d.Name, d.Spec.Template.Spec.ServiceAccountName)
			}
			le := toTyped[rbacv1.Role](t, r.Find("Role", d.Name+"-leader-election"))
			wantLE := []rbacv1.PolicyRule{
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{o.LeaderElectionID}, Verbs: []string{"get", "update"}},
				{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			}
			if le.Namespace != o.LeaderElectionNamespace {
				t.Errorf("leader election Role in %q, lease in %q", le.Namespace, o.LeaderElectionNamespace)
			}
			if diff := cmp.Diff(wantLE, le.Rules); diff != "" {
				t.Errorf("leader election Role rules (-want +got):\n%s", diff)
			}
			checkBinding(t, r, "RoleBinding", d.Name+"-leader-election", d.Spec.Template.Spec.ServiceAccountName)
		})
	}
}

func checkBinding(t *testing.T, r *Rendered, kind, name, sa string) {
	t.Helper()
	u := r.Find(kind, name)
	if u == nil {
		t.Errorf("no %s %s", kind, name)
		return
	}
	var subjects []rbacv1.Subject
	var roleName string
	if kind == "ClusterRoleBinding" {
		b := toTyped[rbacv1.ClusterRoleBinding](t, u)
		subjects, roleName = b.Subjects, b.RoleRef.Name
	} else {
		b := toTyped[rbacv1.RoleBinding](t, u)
		subjects, roleName = b.Subjects, b.RoleRef.Name
	}
	if roleName != name || !slices.Equal(subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: DefaultNamespace}}) {
		t.Errorf("%s %s binds %s to %+v, want its role to %s", kind, name, roleName, subjects, sa)
	}
}

func TestExtendedResourceName(t *testing.T) {
	r := renderSet(t, valueSets["no-surge-extended-resource"])
	class := toTyped[resourceapi.DeviceClass](t, r.Find("DeviceClass", "gpu.accel-dra.io"))
	if class.Spec.ExtendedResourceName == nil || *class.Spec.ExtendedResourceName != "accel-dra.io/gpu" {
		t.Errorf("extendedResourceName %v, want accel-dra.io/gpu", class.Spec.ExtendedResourceName)
	}
	class = toTyped[resourceapi.DeviceClass](t, renderSet(t, valueSets["default"]).Find("DeviceClass", "gpu.accel-dra.io"))
	if class.Spec.ExtendedResourceName != nil {
		t.Errorf("extendedResourceName %q by default, want none", *class.Spec.ExtendedResourceName)
	}
}

func TestMockSelectsEveryNode(t *testing.T) {
	for _, name := range []string{"mock-flag", "mock-file"} {
		r := renderSet(t, valueSets[name])
		for _, u := range r.OfKind("DaemonSet") {
			spec := toTyped[appsv1.DaemonSet](t, u).Spec.Template.Spec
			// The GPU plugin's only requirement is that no driver upgrade paused it, which a
			// node without the label meets.
			if affinity := spec.Affinity; len(spec.NodeSelector) != 0 || affinity != nil && !cmp.Equal(affinity, &corev1.Affinity{NodeAffinity: onlyNotPaused}) {
				t.Errorf("%s: DaemonSet %s node selector %v, affinity %v; mock devices need no hardware labels", name, u.GetName(), spec.NodeSelector, spec.Affinity)
			}
		}
	}
}

// TestSchemaRefuses checks that values.schema.json catches mistakes before anything renders.
func TestSchemaRefuses(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"unknown key":          {"mok": map[string]any{"enabled": true}},
		"unknown driver key":   {"drivers": map[string]any{"gpu": map[string]any{"backnd": "mock"}}},
		"relative Ascend path": {"drivers": map[string]any{"npu": map[string]any{"ascendExtraDriverPaths": []any{"etc/hccn.conf"}}}},
		"relative hook path":   {"drivers": map[string]any{"gpu": map[string]any{"nvidiaCDIHookPath": "nvidia-cdi-hook"}}},
		"gpu backend for npu":  {"drivers": map[string]any{"npu": map[string]any{"backend": "mock"}}},
		"relative cdi dir":     {"plugin": map[string]any{"cdiDir": "var/run/cdi"}},
		"bad log format":       {"plugin": map[string]any{"logFormat": "xml"}},
		"bad extended name":    {"drivers": map[string]any{"gpu": map[string]any{"deviceClass": map[string]any{"extendedResourceName": "gpu"}}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(Options{Values: vals}); err == nil {
				t.Errorf("values %v rendered, want a schema error", vals)
			}
		})
	}
}

func TestKubeVersionConstraint(t *testing.T) {
	if _, err := render(Options{KubeVersion: "v1.33.0"}); err == nil {
		t.Error("rendered for Kubernetes 1.33, which has no resource.k8s.io/v1")
	}
}

func TestPluginArgsOverrides(t *testing.T) {
	vals, err := ValuesFile("values-mock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	args, err := pluginArgs(vals, "npu.accel-dra.io", map[string]string{
		"cdi-root":   "/tmp/n1/cdi",
		"node-name":  "n1",
		"kubeconfig": "/tmp/kc",
		"v":          "5",
	})
	if err != nil {
		t.Fatal(err)
	}
	o := nodeplugin.NewOptions()
	if err := o.NewFlagSet().Parse(args); err != nil {
		t.Fatal(err)
	}
	if o.CDIRoot != "/tmp/n1/cdi" || o.NodeName != "n1" || o.Kube.Kubeconfig != "/tmp/kc" || o.Backend != "npu-mock" || o.DriverName != "npu.accel-dra.io" {
		t.Errorf("options %+v from %q", o, args)
	}
	if n := strings.Count(strings.Join(args, " "), "cdi-root"); n != 1 {
		t.Errorf("--cdi-root appears %d times in %q, want it replaced in place", n, args)
	}
	if !slices.Contains(args, "-v=5") {
		t.Errorf("args %q: -v not replaced", args)
	}
	if _, err := pluginArgs(nil, "npu.accel-dra.io", nil); err == nil || !strings.Contains(err.Error(), "gpu.accel-dra.io") {
		t.Errorf("PluginArgs for a disabled driver: %v, want an error naming the enabled ones", err)
	}
}

// TestDriverRootValues: the driver-root values become the plugin's flags, and an empty root
// turns the driver's files off instead of leaving the plugin to search its own image.
func TestDriverRootValues(t *testing.T) {
	tests := map[string]struct {
		values          map[string]any
		driver          string
		wantNVIDIA      [3]string // driver root, host driver root, hook path
		wantAscend      [2]string
		wantAscendExtra []string
		// wantMockRoot is --mock-driver-root; "" for the default, generate.
		wantMockRoot string
	}{
		"gpu defaults": {driver: "gpu.accel-dra.io",
			wantNVIDIA: [3]string{"/driver-root", "/", ""}, wantAscend: [2]string{"/", ""}},
		"host's toolkit": {driver: "gpu.accel-dra.io",
			values:     map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaCDIHookPath": "/usr/bin/nvidia-cdi-hook"}}},
			wantNVIDIA: [3]string{"/driver-root", "/", "/usr/bin/nvidia-cdi-hook"}, wantAscend: [2]string{"/", ""}},
		// The driver root is seen through its parent directory (TestDriverRootFollowsTheHost).
		"gpu operator": {driver: "gpu.accel-dra.io",
			values:     map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaDriverRoot": "/run/nvidia/driver", "nvidiaCDIHookPath": "/usr/local/nvidia/toolkit/nvidia-cdi-hook"}}},
			wantNVIDIA: [3]string{"/driver-root-parent/driver", "/run/nvidia/driver", "/usr/local/nvidia/toolkit/nvidia-cdi-hook"}, wantAscend: [2]string{"/", ""}},
		"gpu without driver root": {driver: "gpu.accel-dra.io",
			values:     map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaDriverRoot": ""}}},
			wantNVIDIA: [3]string{"", "", ""}, wantAscend: [2]string{"/", ""}},
		// A mock node's / has no driver: the mock generates its own.
		"mock": {driver: "gpu.accel-dra.io",
			values:     map[string]any{"mock": map[string]any{"enabled": true}},
			wantNVIDIA: [3]string{"/", "", ""}, wantAscend: [2]string{"/", ""}},
		"mock with a driver root": {driver: "gpu.accel-dra.io",
			values:     map[string]any{"mock": map[string]any{"enabled": true}, "drivers": map[string]any{"gpu": map[string]any{"nvidiaDriverRoot": "/opt/driver/"}}},
			wantNVIDIA: [3]string{"/driver-root-parent/driver", "/opt/driver", ""}, wantAscend: [2]string{"/", ""}, wantMockRoot: nodeplugin.MockDriverRootUse},
		"npu with extra paths": {driver: "npu.accel-dra.io",
			values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"enabled": false},
				"npu": map[string]any{"enabled": true, "ascendDriverRoot": "/opt/host", "ascendExtraDriverPaths": []any{"/etc/hccn.conf", "/usr/local/Ascend/driver/tools"}}}},
			wantNVIDIA: [3]string{"/", "", ""}, wantAscend: [2]string{"/ascend-driver-root", "/opt/host"},
			wantAscendExtra: []string{"/etc/hccn.conf", "/usr/local/Ascend/driver/tools"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args, err := pluginArgs(tc.values, tc.driver, nil)
			if err != nil {
				t.Fatal(err)
			}
			o := nodeplugin.NewOptions()
			if err := o.NewFlagSet().Parse(args); err != nil {
				t.Fatal(err)
			}
			if got := [3]string{o.NVIDIADriverRoot, o.NVIDIAHostDriverRoot, o.NVIDIACDIHookPath}; got != tc.wantNVIDIA {
				t.Errorf("NVIDIA driver root, host root, hook %q, want %q (args %q)", got, tc.wantNVIDIA, args)
			}
			want := tc.wantMockRoot
			if want == "" {
				want = nodeplugin.MockDriverRootGenerate
			}
			if o.MockDriverRoot != want {
				t.Errorf("--mock-driver-root=%s, want %s (args %q)", o.MockDriverRoot, want, args)
			}
			if got := [2]string{o.AscendDriverRoot, o.AscendHostDriverRoot}; got != tc.wantAscend {
				t.Errorf("Ascend driver root, host root %q, want %q (args %q)", got, tc.wantAscend, args)
			}
			if diff := cmp.Diff(tc.wantAscendExtra, o.AscendDriverPaths); diff != "" {
				t.Errorf("Ascend extra paths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOverrideFlags(t *testing.T) {
	got := OverrideFlags([]string{"--a=1", "-v=2", "positional", "--b=x=y"}, map[string]string{"b": "3", "z": "4", "c": "5", "v": "0"})
	want := []string{"--a=1", "-v=0", "positional", "--b=3", "--c=5", "--z=4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestPublisherWriteScopePolicy: the policy allows exactly the publisher's own keys
// (nodegroup.ManagedKeys), matches its ServiceAccount, and is bound; it follows its switch.
func TestPublisherWriteScopePolicy(t *testing.T) {
	for name, vs := range valueSets {
		t.Run(name, func(t *testing.T) {
			r := renderSet(t, vs)
			var policy *admissionv1.ValidatingAdmissionPolicy
			for _, u := range r.OfKind("ValidatingAdmissionPolicy") {
				if strings.HasSuffix(u.GetName(), "-publisher-write-scope") {
					policy = toTyped[admissionv1.ValidatingAdmissionPolicy](t, u)
				}
			}
			if !vs.publisher {
				if policy != nil {
					t.Error("write-scope policy rendered without the publisher")
				}
				return
			}
			if policy == nil {
				t.Fatal("no write-scope policy rendered with the publisher")
			}
			if r.Find("ValidatingAdmissionPolicyBinding", policy.Name) == nil {
				t.Errorf("policy %s has no binding", policy.Name)
			}
			keys := policyKeys(t, policy)
			if diff := cmp.Diff(slices.Sorted(slices.Values(nodegroup.ManagedKeys)), slices.Sorted(slices.Values(keys))); diff != "" {
				t.Errorf("policy keys differ from nodegroup.ManagedKeys (-want +got):\n%s", diff)
			}
			d, err := r.PublisherDeployment()
			if err != nil {
				t.Fatal(err)
			}
			sa, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName")
			user := "system:serviceaccount:" + d.GetNamespace() + ":" + sa
			if len(policy.Spec.MatchConditions) != 1 || !strings.Contains(policy.Spec.MatchConditions[0].Expression, strconv.Quote(user)) {
				t.Errorf("policy does not match the publisher's user %s: %+v", user, policy.Spec.MatchConditions)
			}

			off := vs
			off.values = mergeValues(vs.values, map[string]any{"publisher": map[string]any{"writeScopeAdmission": map[string]any{"enabled": false}}})
			if r := renderSet(t, off); r.Find("ValidatingAdmissionPolicy", policy.Name) != nil {
				t.Error("write-scope policy rendered with writeScopeAdmission.enabled=false")
			}
		})
	}
}

// drivers.gpu.dynamicMIG turns on --dynamic-mig, which the plugin's own flag set parses; off by
// default.
func TestDynamicMIGValue(t *testing.T) {
	for _, on := range []bool{false, true} {
		vals := map[string]any{"drivers": map[string]any{"gpu": map[string]any{"dynamicMIG": on}}}
		args, err := pluginArgs(vals, "gpu.accel-dra.io", nil)
		if err != nil {
			t.Fatal(err)
		}
		o := nodeplugin.NewOptions()
		if err := o.NewFlagSet().Parse(args); err != nil {
			t.Fatal(err)
		}
		if o.DynamicMIG != on {
			t.Errorf("dynamicMIG=%v: options say %v (args %q)", on, o.DynamicMIG, args)
		}
	}
	if _, err := render(Options{Values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"dynamicMIG": "yes"}}}}); err == nil {
		t.Error("dynamicMIG: \"yes\" rendered, want a schema error")
	}
}

// drivers.gpu.migProfiles becomes --mig-profiles with dynamicMIG, which the plugin's own options
// accept; the schema refuses a name that is not a MIG profile before the plugin would.
func TestMIGProfilesValue(t *testing.T) {
	for name, tc := range map[string]struct {
		profiles []any
		want     []string
	}{
		"default": {profiles: nil, want: []string{"all"}},
		"chosen":  {profiles: []any{"1g.10gb", "1g.10gb+me", "3g.40gb"}, want: []string{"1g.10gb", "1g.10gb+me", "3g.40gb"}},
	} {
		t.Run(name, func(t *testing.T) {
			gpu := map[string]any{"dynamicMIG": true}
			if tc.profiles != nil {
				gpu["migProfiles"] = tc.profiles
			}
			args, err := pluginArgs(map[string]any{"drivers": map[string]any{"gpu": gpu}}, "gpu.accel-dra.io", nil)
			if err != nil {
				t.Fatal(err)
			}
			o := nodeplugin.NewOptions()
			if err := o.NewFlagSet().Parse(append(args, "--node-name=node-a")); err != nil {
				t.Fatal(err)
			}
			if err := o.Complete(); err != nil {
				t.Fatalf("plugin options from the chart's args %q: %v", args, err)
			}
			if strings.Join(o.MIGProfiles, ",") != strings.Join(tc.want, ",") {
				t.Errorf("options say %q, want %q (args %q)", o.MIGProfiles, tc.want, args)
			}
		})
	}
	for _, bad := range [][]any{{"1g10gb"}, {}, {"all", "1g.10gb"}} {
		vals := map[string]any{"drivers": map[string]any{"gpu": map[string]any{"dynamicMIG": true, "migProfiles": bad}}}
		if _, err := render(Options{Values: vals}); err == nil {
			t.Errorf("migProfiles %q rendered, want a schema error", bad)
		}
	}
}

// TestNodeLabelPolicy: the policy that holds the plugins' nodes patch to one label names the
// keys the plugin writes, and binds every plugin's ServiceAccount.
func TestNodeLabelPolicy(t *testing.T) {
	r := renderSet(t, valueSets["default"])
	u := r.Find("ValidatingAdmissionPolicy", DefaultReleaseName+"-node-label")
	if u == nil {
		t.Fatal("no node-label policy")
	}
	policy := toTyped[admissionv1.ValidatingAdmissionPolicy](t, u)
	if r.Find("ValidatingAdmissionPolicyBinding", policy.Name) == nil {
		t.Errorf("policy %s has no binding", policy.Name)
	}
	keys := policyKeys(t, policy)
	if diff := cmp.Diff([]string{nodelabels.CliqueLabel, nodelabels.NVIDIACliqueLabel}, keys); diff != "" {
		t.Errorf("policy keys differ from pkg/nodelabels' (-want +got):\n%s", diff)
	}
	for _, ds := range r.OfKind("DaemonSet") {
		sa, _, _ := unstructured.NestedString(ds.Object, "spec", "template", "spec", "serviceAccountName")
		if user := "system:serviceaccount:" + ds.GetNamespace() + ":" + sa; !strings.Contains(policy.Spec.MatchConditions[0].Expression, strconv.Quote(user)) {
			t.Errorf("policy does not match %s: %s", user, policy.Spec.MatchConditions[0].Expression)
		}
	}
}

// policyKeys are the label or annotation keys a policy's variable "keys" (a JSON list) names.
func policyKeys(t *testing.T, policy *admissionv1.ValidatingAdmissionPolicy) []string {
	t.Helper()
	var keys []string
	for _, v := range policy.Spec.Variables {
		if v.Name == "keys" {
			if err := json.Unmarshal([]byte(v.Expression), &keys); err != nil {
				t.Fatalf("keys %q: %v", v.Expression, err)
			}
		}
	}
	return keys
}
