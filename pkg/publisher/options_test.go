package publisher

import (
	"slices"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/template"
)

// TestFlags parses container args the way the Helm chart test does, with the binary's flag set.
func TestFlags(t *testing.T) {
	o := NewOptions()
	fs := o.NewFlagSet()
	args := []string{
		"--kubeconfig=/etc/kubeconfig",
		"--leader-elect=false",
		"--leader-election-namespace=accel-dra",
		"--metrics-bind-address=:9090",
		"--health-probe-bind-address=:9091",
		"--drivers=gpu.accel-dra.io",
		"--template-budget-bytes=131072",
		"--watch-namespace=clusters",
		"--autoscaler-gpu-driver=",
		"-v=3",
		"--logging-format=json",
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Kube.Kubeconfig != "/etc/kubeconfig" || o.LeaderElect || o.LeaderElectionNamespace != "accel-dra" ||
		o.MetricsBindAddress != ":9090" || o.HealthProbeBindAddress != ":9091" || !slices.Equal(o.Drivers, []string{"gpu.accel-dra.io"}) ||
		o.TemplateBudgetBytes != 131072 || o.WatchNamespace != "clusters" || o.GPUDriver != "" || o.Logging.Format != "json" {
		t.Errorf("options after parsing: %+v", o)
	}

	d := NewOptions()
	if !d.LeaderElect || !slices.Equal(d.Drivers, []string{"gpu.accel-dra.io", "npu.accel-dra.io"}) || d.TemplateBudgetBytes != template.DefaultBudget {
		t.Errorf("defaults: %+v", d)
	}
	for _, bad := range [][]string{{"--template-budget-bytes=0"}, {"--template-budget-bytes=262145"}, {"--drivers="}, {"--workers=0"}} {
		o := NewOptions()
		if err := o.NewFlagSet().Parse(bad); err != nil {
			continue
		}
		if err := o.Validate(); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
