package helm

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestImageTagsFollowTheRelease: a release is one number. The chart's version and appVersion
// are the same, and the images the chart installs by default are tagged as `make image`
// tags them: "v" and that number (the Makefile reads it from Chart.yaml).
func TestImageTagsFollowTheRelease(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.Version != c.Metadata.AppVersion {
		t.Errorf("chart version %q and appVersion %q differ; the images and the chart are released together", c.Metadata.Version, c.Metadata.AppVersion)
	}
	if strings.HasPrefix(c.Metadata.AppVersion, "v") {
		t.Errorf("appVersion %q: a chart's versions are SemVer without a leading v; the image tags add it", c.Metadata.AppVersion)
	}
	want := "v" + c.Metadata.AppVersion
	r := renderSet(t, valueSets["publisher"])
	for _, kind := range []string{"DaemonSet", "Deployment"} {
		for _, o := range r.OfKind(kind) {
			for _, img := range images(t, o.Object) {
				if _, tag, _ := strings.Cut(img, ":"); tag != want {
					t.Errorf("%s %s: image %s, want tag %s", kind, o.GetName(), img, want)
				}
			}
		}
	}
	// An explicit tag is used as it is.
	vals := mergeValues(map[string]any{"plugin": map[string]any{"image": map[string]any{"tag": "e2e"}}}, valueSets["mock-flag"].values)
	ds, err := mustRender(t, vals).PluginDaemonSet("gpu.accel-dra.io")
	if err != nil {
		t.Fatal(err)
	}
	if img := images(t, ds.Object); len(img) == 0 || !strings.HasSuffix(img[0], ":e2e") {
		t.Errorf("plugin.image.tag=e2e: images %v", img)
	}
}

func mustRender(t *testing.T, vals map[string]any) *Rendered {
	t.Helper()
	r, err := Render(Options{Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// images are the images of a workload's containers and init containers.
func images(t *testing.T, obj map[string]any) []string {
	t.Helper()
	var out []string
	for _, field := range []string{"initContainers", "containers"} {
		cs, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", field)
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				out = append(out, m["image"].(string))
			}
		}
	}
	return out
}
