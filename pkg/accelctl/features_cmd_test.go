package accelctl

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/accel-dra/accel-dra/pkg/slices/slicestest"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// TestSimulateCommandFeatureGates: the pairwise-list topology claim of docs/examples matches on
// the nvlinkCliques list attribute, which kube-scheduler 1.37 compares only with the alpha gate
// DRAListTypeAttributes. A group at zero whose template came from a V100 cube-mesh node (the
// plugin publishing lists) therefore does not fit it with the default gates and does with
// --feature-gates=DRAListTypeAttributes=true, as the scheduler with that gate would place it.
func TestSimulateCommandFeatureGates(t *testing.T) {
	dir := t.TempDir()
	inv, _, err := slicestest.MockInventory("v100-8x-cube-mesh", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	real, err := slicestest.NodeSlices(inv, gpuDriver, "node-a", true)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.Build(real, template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	annJSON, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": groupAnnotations(t, tmpl, "96", "1000Gi")}})
	if err != nil {
		t.Fatal(err)
	}
	annFile := filepath.Join(dir, "md.json")
	classYAML, err := yaml.Marshal(gpuClass())
	if err != nil {
		t.Fatal(err)
	}
	classFile := filepath.Join(dir, "classes.yaml")
	for name, data := range map[string][]byte{annFile: annJSON, classFile: append([]byte("apiVersion: resource.k8s.io/v1\nkind: DeviceClass\n"), classYAML...)} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	claimFile := filepath.Join("..", "..", "docs", "examples", "topology-pairwise-list.yaml")

	simulate := func(t *testing.T, flags ...string) (string, error) {
		var out bytes.Buffer
		cmd := NewCommand(IOStreams{Out: &out, ErrOut: &out}, func(ClientGetter) (Cluster, string, error) {
			t.Fatal("the offline simulation connected to a cluster")
			return nil, "", nil
		})
		cmd.SetArgs(append([]string{"simulate", "--annotations", annFile, "--device-classes", classFile, "-f", claimFile, "-o", "json"}, flags...))
		err := cmd.Execute()
		return out.String(), err
	}
	for _, tc := range []struct {
		name  string
		flags []string
		fits  bool
	}{
		{name: "default gates", fits: false},
		{name: "DRAListTypeAttributes on", flags: []string{"--feature-gates=DRAListTypeAttributes=true"}, fits: true},
		{name: "explicitly off", flags: []string{"--feature-gates", "DRAListTypeAttributes=false"}, fits: false},
		// The flag may be repeated, as kube-scheduler's: later pairs are added to earlier ones.
		{name: "repeated flag", flags: []string{"--feature-gates=DRADeviceTaints=true", "--feature-gates=DRAListTypeAttributes=true"}, fits: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := simulate(t, tc.flags...)
			want := ExitFits
			if !tc.fits {
				want = ExitNotFit
			}
			if got := ExitCode(err); got != want {
				t.Fatalf("exit code %d (%v), want %d\n%s", got, err, want, out)
			}
			var rep Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !rep.Template.Available || rep.Template.Fits != tc.fits || rep.Template.Error {
				t.Errorf("template verdict %+v, want fits %v", rep.Template, tc.fits)
			}
		})
	}

	// A refused value fails the command as a bad flag (exit 1) with kube-scheduler's words,
	// before anything is simulated: no report.
	for _, tc := range []struct {
		name, value, wantErr string
	}{
		{name: "unknown gate", value: "DRAListTypeAttributes=true,DRAListAttributes=true", wantErr: "unrecognized feature gate: DRAListAttributes"},
		{name: "not a bool", value: "DRAListTypeAttributes=on", wantErr: "invalid value of DRAListTypeAttributes=on"},
		{name: "locked gate", value: "DRAAdminAccess=false", wantErr: "cannot set feature gate DRAAdminAccess to false, feature is locked to true"},
	} {
		t.Run("refused "+tc.name, func(t *testing.T) {
			out, err := simulate(t, "--feature-gates="+tc.value)
			if ExitCode(err) != ExitError || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--feature-gates") {
				t.Fatalf("error %v (exit %d), want exit %d naming --feature-gates and %q", err, ExitCode(err), ExitError, tc.wantErr)
			}
			if strings.Contains(out, `"group"`) {
				t.Errorf("a report was printed:\n%s", out)
			}
		})
	}
}
