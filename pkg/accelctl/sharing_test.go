package accelctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/slices"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// consumableAnnotations are what the publisher writes for a node of n 80 GiB GPUs whose plugin
// runs with --consumable-memory: the devices as the plugin publishes them.
func consumableAnnotations(t *testing.T, n int) map[string]string {
	t.Helper()
	inv := &device.Inventory{Kind: device.KindGPU}
	for i := range n {
		inv.Devices = append(inv.Devices, device.Device{
			Name: device.NameFor(device.KindGPU, i), Kind: device.KindGPU, Number: i, Index: i,
			UUID: fmt.Sprintf("GPU-%d", i), ProductName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30,
		})
	}
	res := slices.Build(inv, "n1", slices.WithConsumableMemory())
	tmpl, err := template.Build([]resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: "n1-gpu"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: gpuDriver, NodeName: new("n1"), Devices: res.Resources.Pools["n1"].Slices[0].Devices,
			Pool: resourceapi.ResourcePool{Name: "n1", Generation: 1, ResourceSliceCount: 1},
		},
	}}, template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann := groupAnnotations(t, tmpl, "96", "1000Gi")
	return ann
}

// memoryClaimYAML asks for one GPU with memory of it.
func memoryClaimYAML(name, memory string) string {
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: %s
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.accel-dra.io
        capacity:
          requests:
            memory: %s
`, name, memory)
}

// TestSimulateConsumableMemory: the template carries allowMultipleAllocations and the request
// policy, and the allocator fits shares by memory as the scheduler does (e2e/sharing checks the
// same numbers on real kubelets).
func TestSimulateConsumableMemory(t *testing.T) {
	for name, tc := range map[string]struct {
		gpus   int
		claims []string
		fits   bool
	}{
		"20+20+40 Gi on one GPU":              {gpus: 1, claims: []string{"20Gi", "20Gi", "40Gi"}, fits: true},
		"20+20+40+10 Gi on one GPU":           {gpus: 1, claims: []string{"20Gi", "20Gi", "40Gi", "10Gi"}},
		"20+20+40+10 Gi on two GPUs":          {gpus: 2, claims: []string{"20Gi", "20Gi", "40Gi", "10Gi"}, fits: true},
		"81 Gi on an 80 Gi GPU":               {gpus: 1, claims: []string{"81Gi"}},
		"512 Mi rounds up to 1 Gi: 80 fit":    {gpus: 1, claims: repeat("512Mi", 80), fits: true},
		"512 Mi rounds up to 1 Gi: 81 do not": {gpus: 1, claims: repeat("512Mi", 81)},
	} {
		t.Run(name, func(t *testing.T) {
			var docs []string
			for i, m := range tc.claims {
				docs = append(docs, memoryClaimYAML(fmt.Sprintf("c%d", i), m))
			}
			objs, err := ParseObjects([]byte(strings.Join(docs, "---\n")))
			if err != nil {
				t.Fatal(err)
			}
			claims, err := objs.ClaimsToAllocate()
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Simulate(context.Background(), SimulateInput{Group: "g", Annotations: consumableAnnotations(t, tc.gpus), Classes: []*resourceapi.DeviceClass{gpuClass()}, Claims: claims})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Template.Fits != tc.fits || rep.Template.Error {
				var b bytes.Buffer
				_ = rep.WriteText(&b)
				t.Fatalf("fits %v (error %v), want %v\n%s", rep.Template.Fits, rep.Template.Error, tc.fits, b.String())
			}
			if tc.fits && tc.gpus == 1 {
				for _, a := range rep.Template.Allocations {
					if len(a.Devices) != 1 || !strings.HasSuffix(a.Devices[0], "/gpu-0") {
						t.Errorf("claim %s got %v, want a share of gpu-0", a.Claim, a.Devices)
					}
				}
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestSharingExample: docs/examples/gpu-sharing.yaml parses, its sharing configs (time-slicing
// and MPS) are valid, and both of its memory-share pods fit a template of shared GPUs.
func TestSharingExample(t *testing.T) {
	data, err := os.ReadFile("../../docs/examples/gpu-sharing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := ParseObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.Claims) != 1 || len(objs.Pods) != 4 || len(objs.Templates) != 2 {
		t.Fatalf("example has %d claims, %d pods, %d templates; want 1, 4, 2", len(objs.Claims), len(objs.Pods), len(objs.Templates))
	}
	configs := objs.Claims[0].Spec.Devices.Config
	for _, tmpl := range objs.Templates {
		configs = append(configs, tmpl.Spec.Spec.Devices.Config...)
	}
	strategies := map[string]bool{}
	for _, c := range configs {
		cfg, err := configapi.Decode(c.Opaque.Parameters.Raw)
		if err != nil {
			t.Errorf("example config: %v", err)
			continue
		}
		if g, ok := cfg.(*configapi.GpuConfig); ok && g.Sharing != nil {
			strategies[string(g.Sharing.Strategy)] = true
		}
	}
	if !strategies["TimeSlicing"] || !strategies["MPS"] {
		t.Errorf("example sharing strategies %v, want TimeSlicing and MPS", strategies)
	}
	for _, name := range []string{"memory-share", "mps-memory-share"} {
		var pod *corev1.Pod
		for _, p := range objs.Pods {
			if p.Name == name {
				pod = p
			}
		}
		if pod == nil {
			t.Fatalf("example has no pod %s", name)
		}
		shares := &Objects{Templates: objs.Templates, Pods: []*corev1.Pod{pod}}
		claims, err := shares.ClaimsToAllocate()
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Simulate(context.Background(), SimulateInput{Group: "g", Annotations: consumableAnnotations(t, 1), Classes: []*resourceapi.DeviceClass{gpuClass()}, Claims: claims})
		if err != nil || !rep.Template.Fits {
			t.Fatalf("%s pod does not fit one shared GPU: %v %+v", name, err, rep)
		}
	}
}
