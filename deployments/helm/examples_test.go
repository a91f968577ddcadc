package helm

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// TestExamples checks every docs/examples/*.yaml a user applies after installing the chart:
// each object decodes strictly, every claim asks for a DeviceClass the chart creates (with
// values-mock.yaml, which enables both drivers), and every pod whose claims ask for GPUs
// tolerates the nvidia.com/gpu taint that GPU nodes carry (GKE, the GPU operator's guides)
// and proves the GPU works with nvidia-smi -L.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../docs/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	r := renderSet(t, valueSets["mock-file"])
	chartClasses := map[string]string{} // name -> driver
	for _, o := range r.OfKind("DeviceClass") {
		dc := toTyped[resourceapi.DeviceClass](t, o)
		chartClasses[dc.Name] = dc.Name
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			claimClasses := map[string][]string{} // template or claim name -> classes
			var pods []corev1.Pod
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
				var spec *resourceapi.ResourceClaimSpec
				var name string
				switch head.Kind {
				case "":
					continue
				case "ResourceClaimTemplate":
					var o resourceapi.ResourceClaimTemplate
					strict(t, doc, &o)
					spec, name = &o.Spec.Spec, o.Name
				case "ResourceClaim":
					var o resourceapi.ResourceClaim
					strict(t, doc, &o)
					spec, name = &o.Spec, o.Name
				case "Pod":
					var o corev1.Pod
					strict(t, doc, &o)
					pods = append(pods, o)
				default:
					t.Errorf("unexpected kind %s", head.Kind)
				}
				if spec == nil {
					continue
				}
				for _, req := range spec.Devices.Requests {
					var cls []string
					if req.Exactly != nil {
						cls = append(cls, req.Exactly.DeviceClassName)
					}
					for _, s := range req.FirstAvailable {
						cls = append(cls, s.DeviceClassName)
					}
					for _, c := range cls {
						if _, ok := chartClasses[c]; !ok {
							t.Errorf("%s: DeviceClass %s is not one the chart creates (%v)", name, c, chartClasses)
						}
					}
					claimClasses[name] = append(claimClasses[name], cls...)
				}
			}
			if len(pods) == 0 {
				t.Fatal("no pods")
			}
			for _, p := range pods {
				var classes []string
				for _, rc := range p.Spec.ResourceClaims {
					n := ptrString(rc.ResourceClaimTemplateName) + ptrString(rc.ResourceClaimName)
					cls, ok := claimClasses[n]
					if !ok {
						t.Errorf("pod %s: claim %s is not in the file", p.Name, n)
					}
					classes = append(classes, cls...)
				}
				gpu := slices.ContainsFunc(classes, func(c string) bool { return strings.Contains(c, "gpu.") })
				if !gpu {
					continue
				}
				if !slices.ContainsFunc(p.Spec.Tolerations, func(tol corev1.Toleration) bool {
					return tol.ToleratesTaint(klog.Background(), &corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}, false)
				}) {
					t.Errorf("pod %s does not tolerate the taint nvidia.com/gpu=present:NoSchedule", p.Name)
				}
				for _, c := range p.Spec.Containers {
					if len(c.Resources.Claims) > 0 && !strings.Contains(strings.Join(append(c.Command, c.Args...), " "), "nvidia-smi -L") {
						t.Errorf("pod %s container %s runs %q; want nvidia-smi -L, which fails without the GPU", p.Name, c.Name, c.Command)
					}
				}
			}
		})
	}
}

func strict(t *testing.T, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatal(err)
	}
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
