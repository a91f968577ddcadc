package mig

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"sigs.k8s.io/yaml"

	kslices "github.com/accel-dra/accel-dra/pkg/slices"
)

// TestExamples checks docs/examples/mig-workloads.yaml: every claim template decodes strictly,
// its selectors compile, and on the mixed node in dynamic-MIG mode each request finds at least
// as many devices as it asks for among those of its class, so the examples say what the
// published attributes support.
func TestExamples(t *testing.T) {
	data, err := os.ReadFile("../../docs/examples/mig-workloads.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, inv := enumerate(t, "mig-mixed")
	dyn, err := Dynamic(inv)
	if err != nil {
		t.Fatal(err)
	}
	var devs []resourceapi.Device
	for _, sl := range kslices.Build(dyn, "node-a").Resources.Pools["node-a"].Slices {
		devs = append(devs, sl.Devices...)
	}
	classes := map[string]string{
		"mig.gpu.accel-dra.io": `device.attributes["gpu.accel-dra.io"].type == "mig"`,
		"gpu.accel-dra.io":     `device.attributes["gpu.accel-dra.io"].type == "gpu"`,
	}
	compiler := dracel.GetCompiler(dracel.Features{})
	matches := func(expr string, d resourceapi.Device) bool {
		r := compiler.CompileCELExpression(expr, dracel.Options{})
		if r.Error != nil {
			t.Fatalf("%s: %v", expr, r.Error)
		}
		ok, _, err := r.DeviceMatches(context.Background(), dracel.Device{Driver: "gpu.accel-dra.io", Attributes: d.Attributes, Capacity: d.Capacity})
		if err != nil {
			t.Fatalf("%s on %s: %v", expr, d.Name, err)
		}
		return ok
	}
	// The GPU class never selects a GPU in MIG mode (gpu-0, gpu-1, gpu-2), which CUDA cannot use
	// whole, though dynamic MIG publishes each whole beside its partitions.
	var gpus []string
	for _, d := range devs {
		if matches(classes["gpu.accel-dra.io"], d) {
			gpus = append(gpus, d.Name)
		}
	}
	if want := []string{"gpu-3", "gpu-4"}; !slices.Equal(gpus, want) {
		t.Errorf("the GPU class selects %v, want only the GPUs not in MIG mode, %v", gpus, want)
	}
	templates := 0
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := dec.Read()
		if err != nil {
			break
		}
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatal(err)
		}
		if head.Kind != "ResourceClaimTemplate" {
			continue
		}
		var tmpl resourceapi.ResourceClaimTemplate
		if err := yaml.UnmarshalStrict(doc, &tmpl); err != nil {
			t.Fatal(err)
		}
		templates++
		for _, req := range tmpl.Spec.Spec.Devices.Requests {
			class, ok := classes[req.Exactly.DeviceClassName]
			if !ok {
				t.Errorf("%s: class %s is not one of the chart's", tmpl.Name, req.Exactly.DeviceClassName)
				continue
			}
			n := int64(0)
			for _, d := range devs {
				ok := matches(class, d)
				for _, s := range req.Exactly.Selectors {
					ok = ok && matches(s.CEL.Expression, d)
				}
				if ok {
					n++
				}
			}
			if want := max(req.Exactly.Count, 1); n < want {
				t.Errorf("%s: request %s matches %d devices, needs %d", tmpl.Name, req.Name, n, want)
			}
		}
	}
	if templates != 5 {
		t.Errorf("%d claim templates, want 5", templates)
	}
}
