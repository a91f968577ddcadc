package accelctl

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/accel-dra/accel-dra/pkg/buildinfo"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// twoClusters is a kubeconfig with a workload and a management cluster, as the publisher's
// management mode has them.
const twoClusters = `apiVersion: v1
kind: Config
current-context: workload
clusters:
- name: workload
  cluster: {server: "https://workload.example:6443"}
- name: management
  cluster: {server: "https://management.example:6443"}
users:
- name: admin
  user: {token: workload-token}
- name: capi-admin
  user: {token: management-token}
contexts:
- name: workload
  context: {cluster: workload, user: admin, namespace: apps}
- name: management
  context: {cluster: management, user: capi-admin, namespace: capi-clusters}
`

// TestConnectionFlags: kubectl's connection flags build the REST configuration, above all
// --context, which picks one of the two clusters of a management-mode setup.
func TestConnectionFlags(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, []byte(twoClusters), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	for _, tc := range []struct {
		name            string
		args            []string
		host, token, ns string
		timeout         time.Duration
		err             string
	}{
		{name: "current context", args: []string{"--kubeconfig", kubeconfig}, host: "https://workload.example:6443", token: "workload-token", ns: "apps"},
		{name: "--context", args: []string{"--kubeconfig", kubeconfig, "--context", "management"}, host: "https://management.example:6443", token: "management-token", ns: "capi-clusters"},
		{name: "--context and -n", args: []string{"--kubeconfig=" + kubeconfig, "--context=management", "-n", "other"}, host: "https://management.example:6443", token: "management-token", ns: "other"},
		{name: "--namespace", args: []string{"--kubeconfig", kubeconfig, "--namespace", "other"}, host: "https://workload.example:6443", token: "workload-token", ns: "other"},
		{name: "--cluster and --user", args: []string{"--kubeconfig", kubeconfig, "--cluster", "management", "--user", "capi-admin"}, host: "https://management.example:6443", token: "management-token", ns: "apps"},
		{name: "--request-timeout", args: []string{"--kubeconfig", kubeconfig, "--request-timeout", "5s"}, host: "https://workload.example:6443", token: "workload-token", ns: "apps", timeout: 5 * time.Second},
		{name: "--server", args: []string{"--kubeconfig", kubeconfig, "--server", "https://elsewhere.example"}, host: "https://elsewhere.example", token: "workload-token", ns: "apps"},
		{name: "$KUBECONFIG", args: nil, host: "https://workload.example:6443", token: "workload-token", ns: "apps"},
		{name: "unknown context", args: []string{"--kubeconfig", kubeconfig, "--context", "nope"}, err: `context "nope"`},
		{name: "unknown cluster", args: []string{"--kubeconfig", kubeconfig, "--cluster", "nope"}, err: `cluster "nope"`},
		{name: "missing kubeconfig", args: []string{"--kubeconfig", filepath.Join(t.TempDir(), "none")}, err: "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "$KUBECONFIG" {
				t.Setenv("KUBECONFIG", kubeconfig)
			}
			var cfg *rest.Config
			var ns string
			var out bytes.Buffer
			cmd := NewCommand(IOStreams{Out: &out, ErrOut: &out}, func(flags ClientGetter) (Cluster, string, error) {
				var err error
				if cfg, ns, err = RESTConfig(flags); err != nil {
					return nil, "", err
				}
				return &fakeCluster{}, ns, nil
			})
			cmd.SetArgs(append([]string{"template", "list"}, tc.args...))
			err := cmd.Execute()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one that says %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if cfg.Host != tc.host || cfg.BearerToken != tc.token || ns != tc.ns || cfg.Timeout != tc.timeout || cfg.UserAgent != "accelctl" {
				t.Errorf("host %q token %q namespace %q timeout %v agent %q; want %q %q %q %v accelctl", cfg.Host, cfg.BearerToken, ns, cfg.Timeout, cfg.UserAgent, tc.host, tc.token, tc.ns, tc.timeout)
			}
		})
	}
}

// listCluster has groups in two namespaces, one without a template, one with a broken one.
func listCluster(t *testing.T) *fakeCluster {
	h100 := h100Annotations(t)
	return &fakeCluster{groups: map[string]*Group{
		"clusters/gpu":      {Kind: "MachineDeployment", Namespace: "clusters", Name: "gpu", Labels: map[string]string{"pool": "h100"}, Annotations: with(h100, nodegroup.SourceAnnotation, nodegroup.SourceNodes)},
		"clusters/gpu-abc":  {Kind: "MachineSet", Namespace: "clusters", Name: "gpu-abc", Annotations: with(h100, nodegroup.SourceAnnotation, nodegroup.SourceNodes)},
		"clusters/cpu":      {Kind: "MachineDeployment", Namespace: "clusters", Name: "cpu", Annotations: map[string]string{nodegroup.CPUKey: "8"}},
		"clusters/broken":   {Kind: "MachineDeployment", Namespace: "clusters", Name: "broken", Annotations: with(h100, template.ResourceSlicesAnnotation, "not a template")},
		"other/a100":        {Kind: "MachineDeployment", Namespace: "other", Name: "a100", Annotations: with(h100, nodegroup.SourceAnnotation, nodegroup.SourceSeed)},
		"other/no-template": {Kind: "MachineSet", Namespace: "other", Name: "no-template"},
	}}
}

func TestTemplateList(t *testing.T) {
	f := listCluster(t)
	hash := f.groups["clusters/gpu"].Annotations[template.HashAnnotation]
	if len(hash) <= shortHash {
		t.Fatalf("hash %q is too short for the test", hash)
	}
	rows := func(out string) [][]string {
		var r [][]string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			r = append(r, strings.Fields(l))
		}
		return r
	}
	t.Run("table", func(t *testing.T) {
		out, err := run(t, f, "template", "list")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		want := [][]string{
			{"KIND", "NAME", "SOURCE", "DEVICES", "GPU-COUNT", "HASH"},
			{"MachineDeployment", "broken", "<none>", "<invalid>", "8", hash[:shortHash]},
			{"MachineDeployment", "gpu", "nodes", "gpu.accel-dra.io=8", "8", hash[:shortHash]},
			{"MachineSet", "gpu-abc", "nodes", "gpu.accel-dra.io=8", "8", hash[:shortHash]},
		}
		if got := rows(out); !equalRows(got, want) {
			t.Errorf("got\n%s\nwant rows %q", out, want)
		}
	})
	t.Run("all namespaces, wide", func(t *testing.T) {
		out, err := run(t, f, "template", "list", "-A", "-o", "wide")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		got := rows(out)
		if len(got) != 5 || strings.Join(got[0], " ") != "NAMESPACE KIND NAME SOURCE DEVICES GPU-COUNT HASH DRA-DRIVER CPU MEMORY" {
			t.Fatalf("got\n%s", out)
		}
		if last := got[4]; last[0] != "other" || last[2] != "a100" || last[6] != hash || last[7] != nodegroup.DefaultGPUDriver {
			t.Errorf("last row %q, want other/a100 with the full hash and the dra-driver", last)
		}
	})
	t.Run("name", func(t *testing.T) {
		out, err := run(t, f, "template", "list", "-o", "name")
		if want := "machinedeployment/broken\nmachinedeployment/gpu\nmachineset/gpu-abc\n"; err != nil || out != want {
			t.Errorf("got %v\n%s\nwant\n%s", err, out, want)
		}
	})
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			out, err := run(t, f, "template", "list", "-A", "-o", format)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var l struct {
				APIVersion, Kind string
				Items            []metav1.PartialObjectMetadata
			}
			if err := yaml.UnmarshalStrict([]byte(out), &l); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var names []string
			for _, it := range l.Items {
				names = append(names, it.APIVersion+" "+it.Kind+" "+it.Namespace+"/"+it.Name)
			}
			want := "cluster.x-k8s.io/v1beta2 MachineDeployment clusters/broken,cluster.x-k8s.io/v1beta2 MachineDeployment clusters/gpu,cluster.x-k8s.io/v1beta2 MachineSet clusters/gpu-abc,cluster.x-k8s.io/v1beta2 MachineDeployment other/a100"
			if l.APIVersion != "v1" || l.Kind != "List" || strings.Join(names, ",") != want {
				t.Errorf("%s %s %q, want v1 List %s", l.APIVersion, l.Kind, names, want)
			}
			if l.Items[1].Annotations[template.HashAnnotation] != hash {
				t.Errorf("items carry no annotations: %+v", l.Items[1])
			}
		})
	}
	// What kubectl users type: one field or a template of the List, labels, no header.
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"jsonpath", []string{"-o", "jsonpath={.items[*].metadata.name}"}, "broken gpu gpu-abc"},
		{"relaxed jsonpath", []string{"-o", "jsonpath=.items[1].metadata.annotations.capacity\\.cluster-autoscaler\\.kubernetes\\.io/gpu-count"}, "8"},
		{"go-template", []string{"-o", `go-template={{range .items}}{{.kind}}/{{.metadata.name}} {{end}}`}, "MachineDeployment/broken MachineDeployment/gpu MachineSet/gpu-abc "},
		{"selector", []string{"-l", "pool=h100", "-o", "name"}, "machinedeployment/gpu\n"},
		{"selector, none", []string{"-l", "pool in (a100)", "-o", "name"}, ""},
		{"no headers", []string{"--no-headers", "-l", "pool", "-o", "wide"}, "MachineDeployment gpu nodes gpu.accel-dra.io=8 8 " + hash + " " + nodegroup.DefaultGPUDriver + " 96 1000Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, f, append([]string{"template", "list"}, tc.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if tc.name == "no headers" {
				out = strings.Join(strings.Fields(out), " ")
			}
			if out != tc.want {
				t.Errorf("got %q, want %q", out, tc.want)
			}
		})
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"-o", "jsonpath={.items["}},
		{[]string{"-o", "go-template={{.items"}},
		{[]string{"-l", "pool in (a"}},
	} {
		t.Run("refused "+strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			cmd := NewCommand(IOStreams{Out: &out, ErrOut: &out}, func(ClientGetter) (Cluster, string, error) {
				t.Error("connected before checking the flags")
				return f, "clusters", nil
			})
			cmd.SetArgs(append([]string{"template", "list"}, tc.args...))
			if err := cmd.Execute(); err == nil {
				t.Errorf("%q accepted", tc.args)
			}
		})
	}
	t.Run("unknown output", func(t *testing.T) {
		var out bytes.Buffer
		cmd := NewCommand(IOStreams{Out: &out, ErrOut: &out}, func(ClientGetter) (Cluster, string, error) {
			t.Error("connected before checking -o")
			return f, "clusters", nil
		})
		cmd.SetArgs([]string{"template", "list", "-o", "jsonpath"})
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `unknown output format "jsonpath"`) {
			t.Errorf("error %v, want unknown output format", err)
		}
	})
}

func equalRows(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], "\t") != strings.Join(b[i], "\t") {
			return false
		}
	}
	return true
}

func TestShowJSONIsAList(t *testing.T) {
	f := listCluster(t)
	out, err := run(t, f, "template", "show", "gpu", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var l struct {
		APIVersion, Kind string
		Items            []resourceapi.ResourceSlice
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if l.APIVersion != "v1" || l.Kind != "List" || len(l.Items) != 1 || l.Items[0].Kind != "ResourceSlice" || l.Items[0].APIVersion != "resource.k8s.io/v1" || len(l.Items[0].Spec.Devices) != 8 {
		t.Errorf("show -o json:\n%s", out)
	}
	if out, err := run(t, f, "template", "show", "gpu", "-o", "wide"); err == nil || !strings.Contains(err.Error(), `unknown output format "wide"`) {
		t.Errorf("show -o wide: %v\n%s", err, out)
	}
}

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want version.Info
	}{
		{name: "no build info", want: version.Info{GitVersion: "(devel)"}},
		{name: "module version", bi: &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v0.3.0"}}, want: version.Info{GitVersion: "v0.3.0", GoVersion: "go1.99"}},
		{name: "clean checkout", bi: &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-24T12:00:00Z"}, {Key: "vcs.modified", Value: "false"},
		}}, want: version.Info{GitVersion: "(devel)", GitCommit: "0123abcd", GitTreeState: "clean", BuildDate: "2026-11-24T12:00:00Z", GoVersion: "go1.99"}},
		{name: "dirty checkout", bi: &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}},
			want: version.Info{GitVersion: "(devel)", GitCommit: "0123abcd", GitTreeState: "dirty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Version(tc.bi)
			if got.Platform == "" || got.Compiler == "" || got.GoVersion == "" {
				t.Errorf("platform, compiler and Go version are always known: %+v", got)
			}
			got.Platform, got.Compiler = "", ""
			if tc.want.GoVersion == "" {
				got.GoVersion = ""
			}
			if got != tc.want {
				t.Errorf("Version = %+v, want %+v", got, tc.want)
			}
		})
	}

	t.Run("stamped by hack/build.sh", func(t *testing.T) {
		v, r := buildinfo.Version, buildinfo.Revision
		defer func() { buildinfo.Version, buildinfo.Revision = v, r }()
		buildinfo.Version, buildinfo.Revision = "v0.4.0-3-gfeed", "feedbeef"
		// -buildvcs=false: no vcs settings, the module version "(devel)".
		got := Version(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}})
		if got.GitVersion != "v0.4.0-3-gfeed" || got.GitCommit != "feedbeef" {
			t.Errorf("Version = %+v, want hack/build.sh's stamp", got)
		}
	})

	var line bytes.Buffer
	if err := WriteVersion(&line, version.Info{GitVersion: "v0.3.0", GitCommit: "0123abcd", GitTreeState: "dirty", GoVersion: "go1.99", Platform: "linux/amd64"}, Output{}); err != nil {
		t.Fatal(err)
	}
	if want := "accelctl v0.3.0 (revision 0123abcd-dirty, go1.99, linux/amd64)\n"; line.String() != want {
		t.Errorf("version line %q, want %q", line.String(), want)
	}

	out, err := run(t, &fakeCluster{}, "version", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var v struct{ ClientVersion version.Info }
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.ClientVersion.GoVersion == "" || v.ClientVersion.GitVersion == "" {
		t.Errorf("version -o json: %v\n%s", err, out)
	}
	if out, err := run(t, &fakeCluster{}, "version", "-o", "wide"); err == nil || !strings.Contains(err.Error(), "unknown output format") {
		t.Errorf("version -o wide: %v\n%s", err, out)
	}
}

func TestReportOutcome(t *testing.T) {
	fits := Verdict{Available: true, Fits: true}
	no := Verdict{Available: true}
	undecided := Verdict{Available: true, Undecided: true}
	allocErr := Verdict{Available: true, Error: true, Reason: "CEL"}
	for _, tc := range []struct {
		name    string
		rep     Report
		verdict string
		code    int
	}{
		{"template fits", Report{Template: fits, Builtin: no}, "template", ExitFits},
		{"template does not fit", Report{Template: no, Builtin: fits}, "template", ExitNotFit},
		{"template undecided", Report{Template: undecided}, "template", ExitUndecided},
		{"allocator error rejects the node", Report{Template: allocErr}, "template", ExitNotFit},
		{"no template", Report{Template: Verdict{}}, "template", ExitNotFit},
		{"builtin fits", Report{Template: no, Builtin: fits}, "builtin", ExitFits},
		{"builtin undecided", Report{Template: fits, Builtin: undecided}, "builtin", ExitUndecided},
		{"builtin does not fit", Report{Template: fits, Builtin: no}, "builtin", ExitNotFit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExitCode(tc.rep.outcome(tc.verdict)); got != tc.code {
				t.Errorf("exit code %d, want %d", got, tc.code)
			}
		})
	}
}

// TestShowJSONPath: show -o jsonpath= and go-template= apply to the List of ResourceSlices that
// -o json prints.
func TestShowJSONPath(t *testing.T) {
	f := gpuAndEmptyCluster(t)
	for _, tc := range []struct{ output, want string }{
		{"jsonpath={.items[0].spec.driver}", "gpu.accel-dra.io"},
		{"jsonpath={.items[*].kind}", "ResourceSlice"},
		{`go-template={{len (index .items 0).spec.devices}}`, "8"},
	} {
		out, err := run(t, f, "template", "show", "gpu", "-o", tc.output)
		if err != nil || out != tc.want {
			t.Errorf("-o %s: %q (%v), want %q", tc.output, out, err, tc.want)
		}
	}
}
