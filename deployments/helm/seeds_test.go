package helm

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/publisher"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// h200Shape is docs/examples/shapes/h200-4x-pcie.yaml as a value.
func h200Shape() map[string]any {
	b, err := os.ReadFile("../../docs/examples/shapes/h200-4x-pcie.yaml")
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return m
}

// seedValues are two seeds: a mock profile with the plugin options that change its slices, and
// an inline shape of a GPU the mock does not know.
var seedValues = []any{
	map[string]any{
		"name": "gpu-a100-mig", "profile": "a100-8x-mig", "dynamicMIG": true, "consumableMemory": true,
		"cpu": "96", "memory": "1000Gi", "ephemeralDisk": "500Gi", "maxPods": 110,
		"labels": map[string]any{"node.kubernetes.io/instance-type": "p4d.24xlarge"},
		"taints": []any{map[string]any{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}},
	},
	map[string]any{"name": "gpu-h200", "shape": h200Shape(), "cpu": 64, "memory": "512Gi"},
	// Dynamic MIG with a choice of profiles (drivers.gpu.migProfiles on those nodes).
	map[string]any{"name": "gpu-h100-mig", "profile": "h100-8x-mig", "dynamicMIG": true, "migProfiles": []any{"1g.10gb", "3g.40gb"}, "cpu": "96", "memory": "1000Gi"},
}

func init() {
	valueSets["publisher-seeds"] = valueSet{
		file:      "values-mock.yaml",
		values:    map[string]any{"publisher": map[string]any{"enabled": true, "seeds": seedValues}},
		drivers:   map[string]string{"gpu.accel-dra.io": "mock", "npu.accel-dra.io": "npu-mock"},
		profiles:  map[string]string{"gpu.accel-dra.io": "h100-8x-2numa", "npu.accel-dra.io": "ascend910b-8x"},
		surge:     true,
		publisher: true,
	}
}

// TestPublisherSeeds runs the publisher pod the chart renders, as far as a test can without a
// kubelet: each init container's args go to the plugin's own generate-template with its
// volumes as directories, and the publisher's --seeds-dir and --seed-templates-dir are then read
// by the publisher's own seed loader. Each seed must give the annotations of a NodeGroupSeed
// with the values' capacity, labels and taints and the template the plugin generates for the
// profile or shape, as `accelctl template generate | accelctl template seed` writes them.
// Without seeds, the pod has none of it.
func TestPublisherSeeds(t *testing.T) {
	for name, vs := range valueSets {
		if !vs.publisher || name == "publisher-seeds" {
			continue
		}
		t.Run("none/"+name, func(t *testing.T) {
			r := renderSet(t, vs)
			u, err := r.PublisherDeployment()
			if err != nil {
				t.Fatal(err)
			}
			spec := toTyped[appsv1.Deployment](t, u).Spec.Template.Spec
			args := strings.Join(spec.Containers[0].Args, " ")
			if len(spec.InitContainers) > 0 || len(spec.Volumes) > 0 || strings.Contains(args, "seed") || r.Find("ConfigMap", u.GetName()+"-seeds") != nil {
				t.Errorf("seeds without publisher.seeds: init containers %d, volumes %d, args %q", len(spec.InitContainers), len(spec.Volumes), args)
			}
		})
	}

	vs := valueSets["publisher-seeds"]
	r := renderSet(t, vs)
	u, err := r.PublisherDeployment()
	if err != nil {
		t.Fatal(err)
	}
	spec := toTyped[appsv1.Deployment](t, u).Spec.Template.Spec
	cm := r.Find("ConfigMap", u.GetName()+"-seeds")
	if cm == nil {
		t.Fatal("no seeds ConfigMap")
	}
	data := toTyped[corev1.ConfigMap](t, cm).Data

	// The pod's volumes as directories: the ConfigMap's files, and empty directories.
	dirs := map[string]string{}
	for _, v := range spec.Volumes {
		dir := t.TempDir()
		dirs[v.Name] = dir
		switch {
		case v.ConfigMap != nil:
			if v.ConfigMap.Name != cm.GetName() {
				t.Fatalf("volume %s is ConfigMap %s, want %s", v.Name, v.ConfigMap.Name, cm.GetName())
			}
			for f, d := range data {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(d), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		case v.EmptyDir == nil:
			t.Fatalf("volume %s is neither the seeds ConfigMap nor an emptyDir", v.Name)
		}
	}
	// local maps a container's path to the test's directory of the volume mounted there.
	local := func(c corev1.Container, arg string) string {
		for _, m := range c.VolumeMounts {
			if rest, ok := strings.CutPrefix(arg, m.MountPath+"/"); ok {
				return filepath.Join(dirs[m.Name], rest)
			}
		}
		return arg
	}

	ds := r.OfKind("DaemonSet")
	if len(ds) == 0 {
		t.Fatal("no plugin DaemonSet")
	}
	pluginImage := toTyped[appsv1.DaemonSet](t, ds[0]).Spec.Template.Spec.Containers[0].Image
	if len(spec.InitContainers) != len(seedValues) {
		t.Fatalf("%d init containers, want one per seed (%d)", len(spec.InitContainers), len(seedValues))
	}
	for _, c := range spec.InitContainers {
		if c.Image != pluginImage {
			t.Errorf("init container %s runs image %s, want the plugin image", c.Name, c.Image)
		}
		if len(c.Command) != 1 || c.Command[0] != "/usr/bin/accel-dra-kubelet-plugin" || len(c.Args) == 0 || c.Args[0] != nodeplugin.GenerateCommand {
			t.Fatalf("init container %s runs %q %q, want the plugin's %s", c.Name, c.Command, c.Args, nodeplugin.GenerateCommand)
		}
		var args []string
		for _, a := range c.Args[1:] {
			if flag, v, ok := strings.Cut(a, "="); ok {
				v = local(c, strings.TrimPrefix(v, "shape:"))
				if strings.HasPrefix(a, "--mock-profile=shape:") {
					v = "shape:" + v
				}
				a = flag + "=" + v
			}
			args = append(args, a)
		}
		if err := nodeplugin.RunGenerate(context.Background(), args, &strings.Builder{}); err != nil {
			t.Fatalf("init container %s: generate-template %q: %v", c.Name, args, err)
		}
	}

	o := publisher.NewOptions()
	if err := o.NewFlagSet().Parse(spec.Containers[0].Args); err != nil {
		t.Fatal(err)
	}
	seeds := publisher.Seeds{Dir: local(spec.Containers[0], o.SeedsDir+"/"), TemplatesDir: local(spec.Containers[0], o.SeedTemplatesDir+"/")}
	if o.SeedsDir == "" || o.SeedTemplatesDir == "" || seeds.Dir == o.SeedsDir+"/" || seeds.TemplatesDir == o.SeedTemplatesDir+"/" {
		t.Fatalf("--seeds-dir=%q --seed-templates-dir=%q are not mounted volumes", o.SeedsDir, o.SeedTemplatesDir)
	}
	cfg := publisher.Config{Budget: o.TemplateBudgetBytes, GPUDriver: o.GPUDriver}

	for _, sv := range seedValues {
		s := sv.(map[string]any)
		name := s["name"].(string)
		t.Run(name, func(t *testing.T) {
			got := seeds.Source(name, cfg)
			if got.Err != nil {
				t.Fatal(got.Err)
			}
			// What accelctl template generate | accelctl template seed writes for the seed.
			profile, _ := s["profile"].(string)
			if shape, ok := s["shape"]; ok {
				b, err := yaml.Marshal(shape)
				if err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(t.TempDir(), "shape.yaml")
				if err := os.WriteFile(file, b, 0o644); err != nil {
					t.Fatal(err)
				}
				profile = "shape:" + file
			}
			args := []string{"--mock-profile=" + profile}
			if s["dynamicMIG"] == true {
				args = append(args, "--dynamic-mig")
			}
			if profiles, ok := s["migProfiles"].([]any); ok {
				var names []string
				for _, p := range profiles {
					names = append(names, p.(string))
				}
				args = append(args, "--mig-profiles="+strings.Join(names, ","))
			}
			if s["consumableMemory"] == true {
				args = append(args, "--consumable-memory")
			}
			var doc strings.Builder
			if err := nodeplugin.RunGenerate(context.Background(), args, &doc); err != nil {
				t.Fatal(err)
			}
			seed := &seedv1alpha1.NodeGroupSeed{}
			q := func(v any) *resource.Quantity {
				if v == nil {
					return nil
				}
				r := resource.MustParse(fmt.Sprint(v))
				return &r
			}
			seed.Capacity = seedv1alpha1.Capacity{CPU: q(s["cpu"]), Memory: q(s["memory"]), EphemeralDisk: q(s["ephemeralDisk"])}
			if p, ok := s["maxPods"].(int); ok {
				p32 := int32(p)
				seed.Capacity.MaxPods = &p32
			}
			if l, ok := s["labels"].(map[string]any); ok {
				seed.Labels = map[string]string{}
				for k, v := range l {
					seed.Labels[k] = v.(string)
				}
			}
			if ts, ok := s["taints"].([]any); ok {
				for _, x := range ts {
					m := x.(map[string]any)
					seed.Taints = append(seed.Taints, corev1.Taint{Key: m["key"].(string), Value: m["value"].(string), Effect: corev1.TaintEffect(m["effect"].(string))})
				}
			}
			seed.Template = &runtime.RawExtension{Raw: []byte(doc.String())}
			want, err := nodegroup.SeedAnnotations(seed, cfg.Budget, cfg.GPUDriver)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got.Annotations); diff != "" {
				t.Errorf("annotations of the chart's seed (-accelctl +publisher):\n%s", diff)
			}
		})
	}
}

// TestSeedSchemaRefuses: a seed the publisher or the plugin would refuse at run time is refused
// at install time.
func TestSeedSchemaRefuses(t *testing.T) {
	good := map[string]any{"name": "gpu", "profile": "h100-8x-2numa", "cpu": "96", "memory": "1000Gi"}
	with := func(kv ...any) map[string]any {
		m := maps.Clone(good)
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		return m
	}
	values := func(seed map[string]any) map[string]any {
		return mergeValues(devicePluginOff, map[string]any{"publisher": map[string]any{"enabled": true, "seeds": []any{seed}}})
	}
	if _, err := render(Options{Values: values(good)}); err != nil {
		t.Fatalf("a good seed is refused: %v", err)
	}
	for name, seed := range map[string]map[string]any{
		"profile and shape":   with("shape", h200Shape()),
		"neither":             with("profile", nil),
		"no memory":           with("memory", nil),
		"a name with a dot":   with("name", "gpu.h100"),
		"a name too long":     with("name", strings.Repeat("g", 59)),
		"misspelt option":     with("dynamicMig", true),
		"memory not quantity": with("memory", "lots"),
		"taint effect":        with("taints", []any{map[string]any{"key": "k", "effect": "Never"}}),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(Options{Values: values(seed)}); err == nil {
				t.Errorf("seed %v rendered, want a schema error", seed)
			}
		})
	}
}

// TestSeedsNVIDIACompat: in NVIDIA's compatibility mode the GPU nodes publish as
// gpu.nvidia.com with NVIDIA's attributes, so a seed generated for a group of them must too:
// its init container runs generate-template with --nvidia-compat, unless the seed names its
// driver, and an NPU seed of the same release stays npu.accel-dra.io.
func TestSeedsNVIDIACompat(t *testing.T) {
	seeds := []any{
		map[string]any{"name": "gpu-h100", "profile": "h100-8x-2numa", "cpu": "96", "memory": "1000Gi"},
		map[string]any{"name": "npu-910b", "profile": "ascend910b-8x", "cpu": "96", "memory": "1000Gi"},
		map[string]any{"name": "named", "profile": "h100-8x-2numa", "driverName": "gpu.example.com", "cpu": "96", "memory": "1000Gi"},
	}
	want := map[string]string{"seed-gpu-h100": "gpu.nvidia.com", "seed-npu-910b": nodeplugin.NPUDriverName, "seed-named": "gpu.example.com"}
	r, err := render(Options{Values: mergeValues(nvidiaCompat, map[string]any{"publisher": map[string]any{"enabled": true, "seeds": seeds}})})
	if err != nil {
		t.Fatal(err)
	}
	u, err := r.PublisherDeployment()
	if err != nil {
		t.Fatal(err)
	}
	spec := toTyped[appsv1.Deployment](t, u).Spec.Template.Spec
	if len(spec.InitContainers) != len(seeds) {
		t.Fatalf("%d init containers, want %d", len(spec.InitContainers), len(seeds))
	}
	for _, c := range spec.InitContainers {
		var args []string
		for _, a := range c.Args[1:] {
			if !strings.HasPrefix(a, "--output=") {
				args = append(args, a)
			}
		}
		var doc strings.Builder
		if err := nodeplugin.RunGenerate(context.Background(), args, &doc); err != nil {
			t.Fatalf("%s: generate-template %q: %v", c.Name, args, err)
		}
		var tmpl struct {
			Drivers []struct {
				Name    string `json:"name"`
				Devices []struct {
					Attributes map[string]any `json:"attributes"`
				} `json:"devices"`
			} `json:"drivers"`
		}
		if err := yaml.Unmarshal([]byte(doc.String()), &tmpl); err != nil {
			t.Fatal(err)
		}
		if len(tmpl.Drivers) != 1 || tmpl.Drivers[0].Name != want[c.Name] {
			t.Errorf("%s (args %q): template drivers %+v, want %s", c.Name, args, tmpl.Drivers, want[c.Name])
		}
	}
}
