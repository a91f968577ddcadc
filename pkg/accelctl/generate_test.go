package accelctl

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
)

func TestGenerateSeedErrors(t *testing.T) {
	capacity := seedv1alpha1.Capacity{CPU: new(resource.MustParse("96")), Memory: new(resource.MustParse("1000Gi"))}
	doc := func(context.Context, []string) ([]byte, error) {
		return []byte(`{"apiVersion":"template.accel-dra.io/v1alpha1","kind":"NodeGroupTemplate","drivers":[{"name":"gpu.accel-dra.io","devices":[{"name":"gpu-0"}]}]}`), nil
	}
	for name, tc := range map[string]struct {
		shape Shape
		seed  seedv1alpha1.NodeGroupSeed
		run   RunPlugin
		want  string
	}{
		"no profile":     {seed: seedv1alpha1.NodeGroupSeed{Capacity: capacity}, run: doc, want: "mock profile is required"},
		"no capacity":    {shape: Shape{Profile: "h100-8x-2numa"}, run: doc, want: "capacity.cpu: Required"},
		"plugin fails":   {shape: Shape{Profile: "nope"}, seed: seedv1alpha1.NodeGroupSeed{Capacity: capacity}, run: func(context.Context, []string) ([]byte, error) { return nil, errors.New("unknown NVML mock profile") }, want: "unknown NVML mock profile"},
		"not a template": {shape: Shape{Profile: "h100-8x-2numa"}, seed: seedv1alpha1.NodeGroupSeed{Capacity: capacity}, run: func(context.Context, []string) ([]byte, error) { return []byte(`{"kind":"Other"}`), nil }, want: "template of profile h100-8x-2numa"},
		"no plugin binary": {shape: Shape{Profile: "h100-8x-2numa"}, seed: seedv1alpha1.NodeGroupSeed{Capacity: capacity},
			run: ExecPlugin(filepath.Join(t.TempDir(), "missing")), want: "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := GenerateSeed(context.Background(), tc.shape, tc.seed, tc.run)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	seed, err := GenerateSeed(context.Background(), Shape{Profile: "h100-8x-2numa"}, seedv1alpha1.NodeGroupSeed{Capacity: capacity}, doc)
	if err != nil {
		t.Fatal(err)
	}
	if seed.APIVersion != seedv1alpha1.APIVersion || seed.Template == nil {
		t.Errorf("seed %+v", seed)
	}
}

func TestShapePluginArgs(t *testing.T) {
	got := strings.Join(Shape{Profile: "a100-8x-mig", DynamicMIG: true, MIGProfiles: []string{"1g.10gb", "3g.40gb"}, ConsumableMemory: true, DriverName: "gpu.example.com", IdentityAttributes: []string{"uuid", "mac"}}.PluginArgs(), " ")
	want := "generate-template --mock-profile=a100-8x-mig --driver-name=gpu.example.com --dynamic-mig --mig-profiles=1g.10gb,3g.40gb --consumable-memory --identity-attributes=uuid,mac"
	if got != want {
		t.Errorf("args %q, want %q", got, want)
	}
}
