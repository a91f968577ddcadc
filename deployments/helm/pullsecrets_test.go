package helm

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
)

// TestImagePullSecrets: with imagePullSecrets (a private registry), every pod the chart
// creates, hooks included, and every pod the plugin creates (the MPS daemons, through
// --mps-daemon-image-pull-secrets) pulls with them.
func TestImagePullSecrets(t *testing.T) {
	secrets := []any{map[string]any{"name": "regcred"}, map[string]any{"name": "mirror"}}
	want := []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}}
	values := mergeValues(valueSets["publisher-seeds"].userValues(t), map[string]any{
		"imagePullSecrets": secrets,
		"plugin":           map[string]any{"sharing": map[string]any{"mpsDaemons": "pod"}},
	})
	r, err := render(Options{Values: values})
	if err != nil {
		t.Fatal(err)
	}
	pods := 0
	for _, o := range slices.Concat(r.Objects, r.Hooks) {
		var spec *corev1.PodSpec
		switch o.GetKind() {
		case "DaemonSet":
			spec = &toTyped[appsv1.DaemonSet](t, o).Spec.Template.Spec
		case "Deployment":
			spec = &toTyped[appsv1.Deployment](t, o).Spec.Template.Spec
		case "Job":
			spec = &toTyped[batchv1.Job](t, o).Spec.Template.Spec
		default:
			continue
		}
		pods++
		if !slices.Equal(spec.ImagePullSecrets, want) {
			t.Errorf("%s %s: imagePullSecrets %+v, want %+v", o.GetKind(), o.GetName(), spec.ImagePullSecrets, want)
		}
	}
	if pods < 5 {
		t.Errorf("only %d pod templates rendered", pods)
	}
	for _, driver := range []string{"gpu.accel-dra.io"} {
		ds, err := r.PluginDaemonSet(driver)
		if err != nil {
			t.Fatal(err)
		}
		args, err := ContainerArgs(ds, PluginContainer)
		if err != nil {
			t.Fatal(err)
		}
		o := nodeplugin.NewOptions()
		if err := o.NewFlagSet().Parse(args); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(o.MPSDaemonImagePullSecrets, []string{"regcred", "mirror"}) {
			t.Errorf("%s: the plugin's MPS daemons pull with %q, want regcred and mirror (args %q)", driver, o.MPSDaemonImagePullSecrets, args)
		}
	}
}
