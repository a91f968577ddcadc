package accelctl

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// gh200Annotations are what the publisher writes for a group of GH200 nodes (mock profile
// gh200-1x): one GPU, and the kubelet's kubernetes.io/arch=arm64 among the group's labels.
func gh200Annotations(t *testing.T) map[string]string {
	t.Helper()
	tmpl, err := template.Build([]resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: "g1-gpu"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: gpuDriver, NodeName: new("g1"),
			Pool: resourceapi.ResourcePool{Name: "g1", Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{
				Name: "gpu-0",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type":                            {StringValue: new("gpu")},
					"uuid":                            {StringValue: new("GPU-0")},
					"productName":                     {StringValue: new("NVIDIA GH200 480GB")},
					"resource.kubernetes.io/numaNode": {IntValue: new(int64(0))},
					"resource.kubernetes.io/pcieRoot": {StringValue: new("pci0009:00")},
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("97871Mi")}},
			}},
		},
	}}, template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann := groupAnnotations(t, tmpl, "72", "450Gi")
	ann[nodegroup.LabelsKey] = "kubernetes.io/arch=arm64,kubernetes.io/os=linux,node.kubernetes.io/instance-type=gh200"
	return ann
}

// archPod is a pod that must run on arm64 (an arm64-only image) and wants one GPU.
const archPod = `apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  nodeSelector:
    kubernetes.io/arch: arm64
  containers:
  - name: c
    image: example.com/trainer:arm64
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: one-gpu
---
`

// TestSimulateArch runs `accelctl simulate` for a pod that selects kubernetes.io/arch=arm64
// against an arm64 GH200 group, which scales up, and against amd64 groups, which do not although
// their devices would fit the claim: the one whose labels say amd64 and the one whose labels do
// not say, which the autoscaler takes for amd64.
func TestSimulateArch(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	classes := write("classes.yaml", `apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.accel-dra.io}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.accel-dra.io"'}
`)
	h100Amd64 := h100Annotations(t)
	h100Amd64[nodegroup.LabelsKey] = "gpu=h100,kubernetes.io/arch=amd64"
	groups := map[string]map[string]string{
		"gh200-arm64":        gh200Annotations(t),
		"h100-amd64":         h100Amd64,
		"h100-no-arch-label": h100Annotations(t),
	}
	for _, tc := range []struct {
		name, group, file string
		fits              bool
	}{
		{name: "arm64 pod on the arm64 group", group: "gh200-arm64", file: archPod + claimTemplateYAML("one-gpu", 1, ""), fits: true},
		{name: "arm64 pod on an amd64 group", group: "h100-amd64", file: archPod + claimTemplateYAML("one-gpu", 1, "")},
		{name: "arm64 pod on a group without arch label", group: "h100-no-arch-label", file: archPod + claimTemplateYAML("one-gpu", 1, "")},
		{name: "pod without node selector on the amd64 group", group: "h100-amd64", file: strings.Replace(archPod, "kubernetes.io/arch: arm64", "{}", 1) + claimTemplateYAML("one-gpu", 1, ""), fits: true},
		{name: "amd64 pod on the arm64 group", group: "gh200-arm64", file: strings.Replace(archPod, "arch: arm64", "arch: amd64", 1) + claimTemplateYAML("one-gpu", 1, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			annJSON, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": groups[tc.group]}})
			if err != nil {
				t.Fatal(err)
			}
			annFile := write(tc.group+".json", string(annJSON))
			podFile := write("pod.yaml", strings.Replace(tc.file, "nodeSelector:\n    {}", "nodeSelector: {}", 1))
			var out bytes.Buffer
			cmd := NewCommand(IOStreams{Out: &out, ErrOut: &out}, func(ClientGetter) (Cluster, string, error) {
				t.Fatal("the offline simulation connected to a cluster")
				return nil, "", nil
			})
			cmd.SetArgs([]string{"simulate", "--annotations", annFile, "--device-classes", classes, "-f", podFile, "-o", "json"})
			want := ExitFits
			if !tc.fits {
				want = ExitNotFit
			}
			if err := cmd.Execute(); ExitCode(err) != want {
				t.Fatalf("exit code %d (%v), want %d\n%s", ExitCode(err), err, want, out.String())
			}
			var rep Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !rep.Template.Available {
				t.Fatalf("no template: %+v", rep)
			}
			if rep.Template.Fits != tc.fits || rep.Builtin.Fits != tc.fits {
				t.Errorf("fits: template %v builtin %v, want %v: %+v", rep.Template.Fits, rep.Builtin.Fits, tc.fits, rep)
			}
			if !tc.fits && !strings.Contains(rep.Template.Reason, "node selector") {
				t.Errorf("reason %q does not say that the pod's node selector does not match", rep.Template.Reason)
			}
		})
	}
}

func TestPodNodeMismatchTaints(t *testing.T) {
	ann := gh200Annotations(t)
	ann[nodegroup.TaintsKey] = "nvidia.com/gpu=present:NoSchedule"
	objs, err := ParseObjects([]byte(archPod + claimTemplateYAML("one-gpu", 1, "")))
	if err != nil {
		t.Fatal(err)
	}
	node, err := nodegroup.TemplateNode(TemplateNodeName, ann)
	if err != nil {
		t.Fatal(err)
	}
	pod := objs.Pods[0]
	if got := podNodeMismatch(pod, node); !strings.Contains(got, "nvidia.com/gpu=present:NoSchedule") {
		t.Errorf("untolerated taint: mismatch %q, want it to name the taint", got)
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1Toleration("nvidia.com/gpu"))
	if got := podNodeMismatch(pod, node); got != "" {
		t.Errorf("tolerated taint: mismatch %q, want none", got)
	}
	if got := podNodeMismatch(nil, node); got != "" {
		t.Errorf("no pod: mismatch %q, want none", got)
	}
}

func corev1Toleration(key string) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists}
}
