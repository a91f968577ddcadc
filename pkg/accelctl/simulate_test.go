package accelctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

const gpuDriver = "gpu.accel-dra.io"

// h100Annotations are what the publisher writes for an 8-GPU H100 node like the mock profile
// h100-8x-2numa: GPUs 0-3 on NUMA node 0, 4-7 on 1.
func h100Annotations(t *testing.T) map[string]string {
	t.Helper()
	var devices []resourceapi.Device
	for i := range 8 {
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":                            {StringValue: new("gpu")},
				"uuid":                            {StringValue: new(fmt.Sprintf("GPU-%d", i))},
				"productName":                     {StringValue: new("NVIDIA H100 80GB HBM3")},
				"resource.kubernetes.io/numaNode": {IntValue: new(int64(i / 4))},
				"resource.kubernetes.io/pcieRoot": {StringValue: new(fmt.Sprintf("pci0000:%02x", i/2))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		})
	}
	tmpl, err := template.Build([]resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: "n1-gpu"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: gpuDriver, NodeName: new("n1"), Devices: devices,
			Pool: resourceapi.ResourcePool{Name: "n1", Generation: 1, ResourceSliceCount: 1},
		},
	}}, template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann := groupAnnotations(t, tmpl, "96", "1000Gi")
	ann[nodegroup.LabelsKey] = "gpu=h100"
	return ann
}

// groupAnnotations are what the publisher writes on a group whose template is tmpl: the
// template, the autoscaler's DRA keys, and the node's CPU and memory.
func groupAnnotations(t testing.TB, tmpl *template.Template, cpu, memory string) map[string]string {
	t.Helper()
	ann, err := tmpl.Encode(0)
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(ann, nodegroup.DRA(tmpl, gpuDriver))
	ann[nodegroup.CPUKey], ann[nodegroup.MemoryKey] = cpu, memory
	return ann
}

func gpuClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: gpuDriver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.accel-dra.io"`},
		}}},
	}
}

// claimYAML is a ResourceClaim asking count GPUs matching a CEL expression ("" for any),
// optionally all on one NUMA node.
func claimYAML(name string, count int, cel string, sameNUMA bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: %s
spec:
  devices:
    requests:
    - name: gpus
      exactly:
        deviceClassName: gpu.accel-dra.io
        count: %d
`, name, count)
	if cel != "" {
		fmt.Fprintf(&b, "        selectors:\n        - cel:\n            expression: %q\n", cel)
	}
	if sameNUMA {
		b.WriteString("    constraints:\n    - requests: [gpus]\n      matchAttribute: resource.kubernetes.io/numaNode\n")
	}
	return b.String()
}

// claimTemplateYAML is claimYAML as a ResourceClaimTemplate.
func claimTemplateYAML(name string, count int, cel string) string {
	claim := claimYAML(name, count, cel, false)
	head, spec, _ := strings.Cut(claim, "spec:\n")
	var b strings.Builder
	b.WriteString(strings.Replace(head, "kind: ResourceClaim", "kind: ResourceClaimTemplate", 1))
	b.WriteString("spec:\n  spec:\n")
	for _, line := range strings.SplitAfter(spec, "\n") {
		if line != "" {
			b.WriteString("  " + line)
		}
	}
	return b.String()
}

const (
	celH100    = `device.attributes["gpu.accel-dra.io"].productName.startsWith("NVIDIA H100")`
	celA100    = `device.attributes["gpu.accel-dra.io"].productName.startsWith("NVIDIA A100")`
	celMem80   = `device.capacity["gpu.accel-dra.io"].memory.compareTo(quantity("80Gi")) >= 0`
	celMem100  = `device.capacity["gpu.accel-dra.io"].memory.compareTo(quantity("100Gi")) >= 0`
	celTypeGPU = `device.attributes["gpu.accel-dra.io"].type == "gpu"`
)

func TestSimulate(t *testing.T) {
	ann := h100Annotations(t)
	for name, tc := range map[string]struct {
		file                  string
		template, builtin     bool
		builtinAvailableFalse bool
		annotations           map[string]string
	}{
		"any GPU":                         {file: claimYAML("c", 1, "", false), template: true, builtin: true},
		"type == gpu":                     {file: claimYAML("c", 2, celTypeGPU, false), template: true, builtin: true},
		"productName H100":                {file: claimYAML("c", 1, celH100, false), template: true, builtin: false},
		"productName A100 must not fit":   {file: claimYAML("c", 1, celA100, false)},
		"memory >= 80Gi, all 8":           {file: claimYAML("c", 8, celMem80, false), template: true},
		"memory >= 100Gi must not fit":    {file: claimYAML("c", 1, celMem100, false)},
		"4 GPUs on one NUMA node":         {file: claimYAML("c", 4, "", true), template: true},
		"5 GPUs on one NUMA node: no fit": {file: claimYAML("c", 5, "", true)},
		"9 GPUs: no fit":                  {file: claimYAML("c", 9, "", false)},
		"two claims that fit together":    {file: claimYAML("a", 4, "", false) + "---\n" + claimYAML("b", 4, "", false), template: true, builtin: true},
		"two claims that do not fit together": {
			file: claimYAML("a", 5, "", false) + "---\n" + claimYAML("b", 4, "", false),
		},
		"a ResourceClaimTemplate":     {file: claimTemplateYAML("c", 2, celH100), template: true},
		"a group without annotations": {file: claimYAML("c", 1, "", false), annotations: map[string]string{}},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := ParseObjects([]byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			claims, err := objs.ClaimsToAllocate()
			if err != nil {
				t.Fatal(err)
			}
			a := ann
			if tc.annotations != nil {
				a = tc.annotations
			}
			rep, err := Simulate(context.Background(), SimulateInput{Group: "g", Annotations: a, Classes: []*resourceapi.DeviceClass{gpuClass()}, Claims: claims})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Template.Fits != tc.template || rep.Builtin.Fits != tc.builtin {
				var b bytes.Buffer
				_ = rep.WriteText(&b)
				t.Errorf("fits: template %v builtin %v, want %v %v\n%s", rep.Template.Fits, rep.Builtin.Fits, tc.template, tc.builtin, b.String())
			}
			if !rep.Template.Fits && rep.Template.Available && rep.Template.Reason == "" {
				t.Error("no reason why the claims do not fit")
			}
			// The provider without the slice-count fix announces a pool without slices: the
			// allocator never uses it, whatever the claim asks.
			if rep.Pinned.Available != rep.Builtin.Available || rep.Pinned.Fits || rep.Pinned.Available && rep.Pinned.Reason == "" {
				t.Errorf("pinned provider: available %v fits %v reason %q; want available like the fixed one (%v), no fit, a reason",
					rep.Pinned.Available, rep.Pinned.Fits, rep.Pinned.Reason, rep.Builtin.Available)
			}
			// A selector on an attribute the built-in devices lack is an allocator error
			// there (the scheduler rejects the node), never on the full template.
			wantErr := strings.Contains(tc.file, "productName") || strings.Contains(tc.file, "memory.compareTo")
			if rep.Builtin.Error != wantErr || rep.Template.Error {
				t.Errorf("allocator errors: built-in %v (%s), template %v; want %v, false", rep.Builtin.Error, rep.Builtin.Reason, rep.Template.Error, wantErr)
			}
		})
	}
}

func TestSimulateFitsWithNUMAOnOneNode(t *testing.T) {
	objs, err := ParseObjects([]byte(claimYAML("c", 4, "", true)))
	if err != nil {
		t.Fatal(err)
	}
	claims, _ := objs.ClaimsToAllocate()
	rep, err := Simulate(context.Background(), SimulateInput{Group: "g", Annotations: h100Annotations(t), Classes: []*resourceapi.DeviceClass{gpuClass()}, Claims: claims})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Template.Allocations) != 1 || len(rep.Template.Allocations[0].Devices) != 4 {
		t.Fatalf("allocations = %+v", rep.Template.Allocations)
	}
	got := strings.Join(rep.Template.Allocations[0].Devices, ",")
	if got != "gpus: gpu.accel-dra.io/gpu-0,gpus: gpu.accel-dra.io/gpu-1,gpus: gpu.accel-dra.io/gpu-2,gpus: gpu.accel-dra.io/gpu-3" {
		t.Errorf("devices %s, want gpu-0..3 (one NUMA node)", got)
	}
}

func TestClaimsToAllocate(t *testing.T) {
	pod := `apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  containers: [{name: c, image: x}]
  resourceClaims:
  - name: gpus
    resourceClaimTemplateName: two-gpus
  - name: shared
    resourceClaimName: shared-gpu
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-gpus}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.accel-dra.io, count: 2}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-gpu}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.accel-dra.io}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: unrelated}
spec: {}
`
	claims := parseClaims(t, pod)
	var names []string
	for _, c := range claims {
		names = append(names, c.Namespace+"/"+c.Name)
		if c.UID == "" {
			t.Errorf("claim %s without UID", c.Name)
		}
	}
	if strings.Join(names, ",") != "default/p-gpus,default/shared-gpu" {
		t.Errorf("claims = %v, want the pod's two", names)
	}

	for name, bad := range map[string]string{
		"unknown kind":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
		"missing template":     strings.SplitN(pod, "---", 2)[0],
		"nothing to allocate":  "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: x}\nspec: {}\n",
		"pod without claims":   "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\n",
		"two pods":             "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: q}\n",
		"not YAML of a kind":   "hello: world\n",
		"broken YAML document": "apiVersion: v1\nkind: [\n",
	} {
		objs, err := ParseObjects([]byte(bad))
		if err == nil {
			_, err = objs.ClaimsToAllocate()
		}
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSimulateCommandOffline(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	annJSON, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": h100Annotations(t)}})
	annFile := write("md.json", string(annJSON))
	classes := write("classes.yaml", `apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.accel-dra.io}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.accel-dra.io"'}
`)
	claim := write("claim.yaml", claimYAML("c", 1, celH100, false))

	var out bytes.Buffer
	cmd := NewCommand(IOStreams{Out: &out, ErrOut: &out}, func(ClientGetter) (Cluster, string, error) {
		t.Fatal("the offline simulation connected to a cluster")
		return nil, "", nil
	})
	cmd.SetArgs([]string{"simulate", "--annotations", annFile, "--device-classes", classes, "-f", claim, "-o", "json"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !rep.Template.Fits || rep.Builtin.Fits || !rep.Builtin.Available {
		t.Errorf("report = %+v, want template yes, builtin no", rep)
	}
}

// TestSimulateIsBounded: annotations of a dynamic-MIG 8×H100 group as publishers before the
// whole-device count wrote them (gpu-count 208) and a claim for 8 whole GPUs and one MIG device
// made the built-in verdict search 8 of 208 identical devices for minutes (the MIG request
// matches none). Each verdict is bounded as the scheduler's DRA filter is, and says so.
func TestSimulateIsBounded(t *testing.T) {
	ann := map[string]string{nodegroup.DRADriverKey: gpuDriver, nodegroup.GPUCountKey: "208", nodegroup.CPUKey: "96", nodegroup.MemoryKey: "1000Gi"}
	claim := `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: c
spec:
  devices:
    requests:
    - name: gpus
      exactly:
        deviceClassName: gpu.accel-dra.io
        count: 8
    - name: mig
      exactly:
        deviceClassName: gpu.accel-dra.io
        selectors:
        - cel:
            expression: 'device.attributes["gpu.accel-dra.io"].type == "mig"'
`
	claims := parseClaims(t, claim)
	const bound = 300 * time.Millisecond
	rep, err := Simulate(context.Background(), SimulateInput{Group: "g", Annotations: ann, Classes: []*resourceapi.DeviceClass{gpuClass()}, Claims: claims, Timeout: bound})
	if err != nil {
		t.Fatal(err)
	}
	b := rep.Builtin
	if !b.Available || b.Fits || !b.Undecided || b.Error || !strings.Contains(b.Reason, "undecided") || !strings.Contains(b.Reason, bound.String()) {
		t.Errorf("built-in verdict %+v; want available, undecided, no fit, a reason naming the bound %v", b, bound)
	}
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "UNDECIDED") {
		t.Errorf("the text report does not say UNDECIDED:\n%s", out.String())
	}
	// The caller's own cancellation is the caller's error, not a verdict.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Simulate(ctx, SimulateInput{Group: "g", Annotations: ann, Classes: []*resourceapi.DeviceClass{gpuClass()}, Claims: claims}); !errors.Is(err, context.Canceled) {
		t.Errorf("Simulate with a cancelled context = %v, want context.Canceled", err)
	}
}

// parseClaims returns the claims to allocate of a file's text.
func parseClaims(t *testing.T, text string) []*resourceapi.ResourceClaim {
	t.Helper()
	objs, err := ParseObjects([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	claims, err := objs.ClaimsToAllocate()
	if err != nil {
		t.Fatal(err)
	}
	return claims
}
