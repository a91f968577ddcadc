package helm

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/accel-dra/accel-dra/pkg/publisher"
)

// TestStaleTemplatePolicyValue: publisher.staleTemplatePolicy reaches the publisher as
// --stale-template-policy, and a release whose values lack it (helm upgrade --reuse-values
// from a chart before the value, which keeps the old values without the new defaults; null
// is how helm drops a key) still renders, with the publisher's own default.
func TestStaleTemplatePolicyValue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
		want  string
	}{
		{"default", "", publisher.StaleWithdraw},
		{"absent (reuse-values from an older release)", nil, publisher.StaleWithdraw},
		{"reseed", publisher.StaleReseed, publisher.StaleReseed},
		{"keep", publisher.StaleKeep, publisher.StaleKeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := map[string]any{"enabled": true}
			if tc.value != "" {
				p["staleTemplatePolicy"] = tc.value
			}
			r, err := render(Options{Values: map[string]any{"publisher": p}})
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			u, err := r.PublisherDeployment()
			if err != nil {
				t.Fatal(err)
			}
			o := publisher.NewOptions()
			args := toTyped[appsv1.Deployment](t, u).Spec.Template.Spec.Containers[0].Args
			if err := o.NewFlagSet().Parse(args); err != nil {
				t.Fatalf("the publisher refuses the chart's args %q: %v", args, err)
			}
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			if o.StaleTemplatePolicy != tc.want {
				t.Errorf("--stale-template-policy %q, want %q", o.StaleTemplatePolicy, tc.want)
			}
		})
	}
	if _, err := render(Options{Values: map[string]any{"publisher": map[string]any{"enabled": true, "staleTemplatePolicy": "drop"}}}); err == nil {
		t.Error("publisher.staleTemplatePolicy=drop rendered, want a schema error")
	}
}
