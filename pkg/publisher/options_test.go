package publisher

import (
	"os"
	"regexp"
	"slices"
	"strings"
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
	for _, bad := range [][]string{{"--template-budget-bytes=0"}, {"--template-budget-bytes=196609"}, {"--drivers="}, {"--workers=0"}} {
		o := NewOptions()
		if err := o.NewFlagSet().Parse(bad); err != nil {
			continue
		}
		if err := o.Validate(); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestFlagDefaultsInDocs: every default that docs/template-publisher.md's flag table gives as a
// literal is the flag set's own, so the table cannot go stale as a default changes.
func TestFlagDefaultsInDocs(t *testing.T) {
	data, err := os.ReadFile("../../docs/template-publisher.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := NewOptions().NewFlagSet()
	row := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `([^`]*)` \\|")
	rows := row.FindAllStringSubmatch(string(data), -1)
	if len(rows) < 10 {
		t.Fatalf("found %d flag rows with a literal default in the docs; the table's format changed", len(rows))
	}
	for _, r := range rows {
		name, doc := r[1], r[2]
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("the docs list --%s, which the publisher has no more", name)
			continue
		}
		// pflag prints slices as [a,b].
		if got := strings.TrimSuffix(strings.TrimPrefix(f.DefValue, "["), "]"); got != doc {
			t.Errorf("--%s: the docs say the default is %q, the flag's is %q", name, doc, got)
		}
	}
}
