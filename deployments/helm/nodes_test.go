package helm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// pluginDaemonSet renders values and returns driverName's plugin DaemonSet.
func pluginDaemonSet(t *testing.T, values map[string]any, driverName string) *appsv1.DaemonSet {
	t.Helper()
	r, err := render(Options{Values: values})
	if err != nil {
		t.Fatal(err)
	}
	u, err := r.PluginDaemonSet(driverName)
	if err != nil {
		t.Fatal(err)
	}
	return toTyped[appsv1.DaemonSet](t, u)
}

// exists and in are one-label node selector terms.
func exists(key string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpExists}}}
}

func in(key string, values ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}}}
}

func requiredTerms(terms ...corev1.NodeSelectorTerm) *corev1.NodeAffinity {
	return &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}
}

// notPaused is the GPU plugin's requirement that the GPU operator's driver manager has not
// paused the DRA driver on the node for a driver upgrade (drivers.gpu.pauseLabel).
var notPaused = corev1.NodeSelectorRequirement{Key: "nvidia.com/gpu.deploy.dra-driver", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"paused-for-driver-upgrade"}}

// paused returns a with notPaused added to every term, as the chart adds it to the GPU plugin's.
func paused(a *corev1.NodeAffinity) *corev1.NodeAffinity {
	out := requiredTerms()
	for _, t := range a.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		t.MatchExpressions = append(append([]corev1.NodeSelectorRequirement(nil), t.MatchExpressions...), notPaused)
		out.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(out.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, t)
	}
	return out
}

// onlyNotPaused is the GPU plugin's node affinity where nothing else selects nodes.
var onlyNotPaused = requiredTerms(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{notPaused}})

var (
	// Any one of the labels that NFD, the GPU operator or GKE put on an NVIDIA GPU node.
	gpuNodes = requiredTerms(
		exists("feature.node.kubernetes.io/pci-0302_10de.present"),
		exists("feature.node.kubernetes.io/pci-0300_10de.present"),
		exists("feature.node.kubernetes.io/pci-10de.present"),
		in("nvidia.com/gpu.present", "true"),
		exists("cloud.google.com/gke-accelerator"),
	)
	npuNodes = requiredTerms(
		exists("feature.node.kubernetes.io/pci-1200_19e5.present"),
		exists("feature.node.kubernetes.io/pci-19e5.present"),
	)
	antiAffinity = map[string]any{"podAntiAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": []any{
		map[string]any{"topologyKey": "kubernetes.io/hostname", "labelSelector": map[string]any{"matchLabels": map[string]any{"app": "other"}}},
	}}}
	ownNodeAffinity = map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{"gpu"}}}}},
	}}}
)

// TestNodeSelection: each driver's plugin runs on nodes with any of its labels, a user's node
// selector or node affinity replaces those, and mock devices run wherever mock.nodeSelector says.
func TestNodeSelection(t *testing.T) {
	bothDrivers := map[string]any{"npu": map[string]any{"enabled": true}}
	for _, tc := range []struct {
		name         string
		values       map[string]any
		driver       string
		nodeSelector map[string]string
		nodeAffinity *corev1.NodeAffinity
		podAnti      bool // the user's podAntiAffinity is kept
	}{
		{name: "gpu default", driver: "gpu.accel-dra.io", nodeAffinity: paused(gpuNodes)},
		{
			name:   "gpu without a pause label",
			values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"pauseLabel": ""}}},
			driver: "gpu.accel-dra.io", nodeAffinity: gpuNodes,
		},
		{name: "npu default", values: map[string]any{"drivers": bothDrivers}, driver: "npu.accel-dra.io", nodeAffinity: npuNodes},
		{
			name:   "own nodeSelector replaces the labels",
			values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nodeSelector": map[string]any{"pool": "gpu"}}}},
			driver: "gpu.accel-dra.io", nodeSelector: map[string]string{"pool": "gpu"}, nodeAffinity: onlyNotPaused,
		},
		{
			name:   "own labels, with values",
			values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nodeAffinityLabels": []any{map[string]any{"key": "accelerator", "values": []any{"nvidia-h100", "nvidia-a100"}}, map[string]any{"key": "gpu"}}}}},
			driver: "gpu.accel-dra.io", nodeAffinity: paused(requiredTerms(in("accelerator", "nvidia-h100", "nvidia-a100"), exists("gpu"))),
		},
		{
			name:   "no labels: every node",
			values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nodeAffinityLabels": []any{}}}},
			driver: "gpu.accel-dra.io", nodeAffinity: onlyNotPaused,
		},
		{
			name:   "shared affinity without nodeAffinity keeps the labels",
			values: map[string]any{"plugin": map[string]any{"affinity": antiAffinity}},
			driver: "gpu.accel-dra.io", nodeAffinity: paused(gpuNodes), podAnti: true,
		},
		{
			name:   "shared nodeAffinity replaces the labels",
			values: map[string]any{"plugin": map[string]any{"affinity": ownNodeAffinity}, "drivers": bothDrivers},
			driver: "npu.accel-dra.io", nodeAffinity: requiredTerms(in("pool", "gpu")),
		},
		{
			name: "driver affinity replaces the shared one",
			values: map[string]any{
				"plugin":  map[string]any{"affinity": ownNodeAffinity},
				"drivers": map[string]any{"npu": map[string]any{"enabled": true, "affinity": antiAffinity}},
			},
			driver: "npu.accel-dra.io", nodeAffinity: npuNodes, podAnti: true,
		},
		{
			name: "the other driver keeps the shared affinity",
			values: map[string]any{
				"plugin":  map[string]any{"affinity": ownNodeAffinity},
				"drivers": map[string]any{"npu": map[string]any{"enabled": true, "affinity": antiAffinity}},
			},
			driver: "gpu.accel-dra.io", nodeAffinity: requiredTerms(in("pool", "gpu")),
		},
		{
			name: "mock replaces node selection",
			values: map[string]any{
				"mock":    map[string]any{"enabled": true, "nodeSelector": map[string]any{"fake": "true"}},
				"drivers": map[string]any{"gpu": map[string]any{"nodeSelector": map[string]any{"pool": "gpu"}}},
			},
			driver: "gpu.accel-dra.io", nodeSelector: map[string]string{"fake": "true"}, nodeAffinity: onlyNotPaused,
		},
		{
			name:   "mock keeps an affinity the user set",
			values: map[string]any{"mock": map[string]any{"enabled": true}, "plugin": map[string]any{"affinity": antiAffinity}},
			driver: "gpu.accel-dra.io", nodeAffinity: onlyNotPaused, podAnti: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := pluginDaemonSet(t, tc.values, tc.driver).Spec.Template.Spec
			if diff := cmp.Diff(tc.nodeSelector, spec.NodeSelector); diff != "" {
				t.Errorf("nodeSelector (-want +got):\n%s", diff)
			}
			var got *corev1.NodeAffinity
			if spec.Affinity != nil {
				got = spec.Affinity.NodeAffinity
			}
			if diff := cmp.Diff(tc.nodeAffinity, got); diff != "" {
				t.Errorf("nodeAffinity (-want +got):\n%s", diff)
			}
			if gotAnti := spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil; gotAnti != tc.podAnti {
				t.Errorf("podAntiAffinity kept: %v, want %v", gotAnti, tc.podAnti)
			}
		})
	}
}

// TestPerDriverContainerSettings: a driver's resources and securityContext are merged over the
// shared ones, for that driver only.
func TestPerDriverContainerSettings(t *testing.T) {
	values := map[string]any{"drivers": map[string]any{"npu": map[string]any{
		"enabled":         true,
		"resources":       map[string]any{"limits": map[string]any{"memory": "1Gi"}},
		"securityContext": map[string]any{"privileged": false, "capabilities": map[string]any{"add": []any{"SYS_ADMIN"}}},
	}}}
	for _, tc := range []struct {
		driver      string
		memoryLimit string
		privileged  bool
		caps        bool
	}{
		{driver: "gpu.accel-dra.io", memoryLimit: "256Mi", privileged: true},
		{driver: "npu.accel-dra.io", memoryLimit: "1Gi", caps: true},
	} {
		t.Run(tc.driver, func(t *testing.T) {
			c := pluginDaemonSet(t, values, tc.driver).Spec.Template.Spec.Containers[0]
			if got := c.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse(tc.memoryLimit)) != 0 {
				t.Errorf("memory limit %s, want %s", &got, tc.memoryLimit)
			}
			if got := c.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("10m")) != 0 {
				t.Errorf("cpu request %s, want the shared 10m", &got)
			}
			sc := c.SecurityContext
			if sc == nil || sc.Privileged == nil || *sc.Privileged != tc.privileged {
				t.Fatalf("securityContext %+v, want privileged %v", sc, tc.privileged)
			}
			if gotCaps := sc.Capabilities != nil && len(sc.Capabilities.Add) == 1; gotCaps != tc.caps {
				t.Errorf("capabilities %+v, want added: %v", sc.Capabilities, tc.caps)
			}
		})
	}
	gpu := pluginDaemonSet(t, map[string]any{"drivers": map[string]any{"gpu": map[string]any{"securityContext": map[string]any{"privileged": false}}}}, "gpu.accel-dra.io")
	if p := gpu.Spec.Template.Spec.Containers[0].VolumeMounts[0].MountPropagation; p != nil {
		t.Errorf("unprivileged GPU plugin (drivers.gpu.securityContext) has mount propagation %s; only a privileged container may", *p)
	}
}

// TestDevicePluginCoexistence: the nvml backend renders only when the user says no NVIDIA device
// plugin runs beside it, since both would hand out the same GPUs.
func TestDevicePluginCoexistence(t *testing.T) {
	for _, tc := range []struct {
		name    string
		values  map[string]any
		refused bool
	}{
		{name: "nvml without the statement", values: map[string]any{}, refused: true},
		{name: "nvml, device plugin stated on", values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaDevicePluginDisabled": false}}}, refused: true},
		{name: "nvml, device plugin off", values: devicePluginOff},
		{name: "mock.enabled", values: map[string]any{"mock": map[string]any{"enabled": true}}},
		{name: "mock backend", values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"backend": "mock"}}}},
		{name: "GPU driver disabled", values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"enabled": false}, "npu": map[string]any{"enabled": true}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(Options{Values: tc.values})
			switch {
			case tc.refused && err == nil:
				t.Fatal("rendered; want a refusal naming drivers.gpu.nvidiaDevicePluginDisabled")
			case tc.refused && !strings.Contains(err.Error(), "drivers.gpu.nvidiaDevicePluginDisabled must be true"):
				t.Fatalf("error %q does not name drivers.gpu.nvidiaDevicePluginDisabled", err)
			case !tc.refused && err != nil:
				t.Fatal(err)
			}
		})
	}
}

// TestUpdateStrategy: the rolling update numbers per driver, their defaults, and the
// combinations Kubernetes or the plugin cannot take.
func TestUpdateStrategy(t *testing.T) {
	n := intstr.FromInt32
	s := intstr.FromString
	strategy := func(v map[string]any) map[string]any {
		return map[string]any{"drivers": map[string]any{"gpu": map[string]any{"updateStrategy": v}}}
	}
	for _, tc := range []struct {
		name               string
		values             map[string]any
		driver             string
		surge, unavailable intstr.IntOrString
		err                string // a substring of the refusal
	}{
		{name: "default: surge", values: nil, surge: n(1), unavailable: n(0)},
		{name: "no surge", values: map[string]any{"plugin": map[string]any{"rollingUpdateWithSurge": false}}, surge: n(0), unavailable: n(1)},
		{name: "surge percentage", values: strategy(map[string]any{"maxSurge": "10%"}), surge: s("10%"), unavailable: n(0)},
		{name: "surge number", values: strategy(map[string]any{"maxSurge": 20}), surge: n(20), unavailable: n(0)},
		{name: "unavailable percentage alone", values: strategy(map[string]any{"maxUnavailable": "25%"}), surge: n(0), unavailable: s("25%")},
		{name: "surge 0 alone", values: strategy(map[string]any{"maxSurge": 0}), surge: n(0), unavailable: n(1)},
		{
			name:   "per driver",
			values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"updateStrategy": map[string]any{"maxSurge": "5%"}}, "npu": map[string]any{"enabled": true}}},
			driver: "npu.accel-dra.io", surge: n(1), unavailable: n(0),
		},
		{name: "both non-zero", values: strategy(map[string]any{"maxSurge": 1, "maxUnavailable": "10%"}), err: "Kubernetes allows only one"},
		{name: "both zero", values: strategy(map[string]any{"maxSurge": "0%", "maxUnavailable": 0}), err: "both 0"},
		{
			name:   "surge without the kubelet's rolling update",
			values: mergeValues(strategy(map[string]any{"maxSurge": "10%"}), map[string]any{"plugin": map[string]any{"rollingUpdateWithSurge": false}}),
			err:    "plugin.rollingUpdateWithSurge is false",
		},
		{name: "over 100%", values: strategy(map[string]any{"maxSurge": "150%"}), err: "/updateStrategy/maxSurge"},
		{name: "negative", values: strategy(map[string]any{"maxUnavailable": -1}), err: "/updateStrategy/maxUnavailable"},
		{name: "not a number", values: strategy(map[string]any{"maxSurge": "ten"}), err: "/updateStrategy/maxSurge"},
		{name: "unknown key", values: strategy(map[string]any{"partition": 1}), err: "'partition' not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err != "" {
				_, err := render(Options{Values: tc.values})
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			driver := tc.driver
			if driver == "" {
				driver = "gpu.accel-dra.io"
			}
			ds := pluginDaemonSet(t, tc.values, driver)
			ru := ds.Spec.UpdateStrategy.RollingUpdate
			if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil || ru.MaxUnavailable == nil {
				t.Fatalf("update strategy %+v, want a rolling update with both numbers", ds.Spec.UpdateStrategy)
			}
			if *ru.MaxSurge != tc.surge || *ru.MaxUnavailable != tc.unavailable {
				t.Errorf("maxSurge %s, maxUnavailable %s; want %s, %s", ru.MaxSurge, ru.MaxUnavailable, &tc.surge, &tc.unavailable)
			}
		})
	}
}

// TestNodeAffinityLabelsSchema: a label without a key, or with an empty value list, is refused
// before anything renders.
func TestNodeAffinityLabelsSchema(t *testing.T) {
	for name, label := range map[string]map[string]any{
		"no key":       {"values": []any{"true"}},
		"empty key":    {"key": ""},
		"empty values": {"key": "gpu", "values": []any{}},
		"unknown key":  {"key": "gpu", "operator": "NotIn"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := render(Options{Values: map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nodeAffinityLabels": []any{label}}}}})
			if err == nil || !strings.Contains(err.Error(), "/drivers/gpu/nodeAffinityLabels/0") {
				t.Fatalf("error %v, want one about the label at /drivers/gpu/nodeAffinityLabels/0", err)
			}
		})
	}
}
