package accelctl

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestOutputFormats: every command that prints objects takes kubectl's -o jsonpath= and
// go-template= (applied to what -o json prints) and --allow-missing-template-keys (true by
// default, as kubectl's); a template that does not parse is refused with the parser's message
// before accelctl connects or reads its files, and one that fails on the object prints nothing.
func TestOutputFormats(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	annJSON, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": h100Annotations(t)}})
	if err != nil {
		t.Fatal(err)
	}
	simulate := []string{"simulate", "--annotations", write("md.json", string(annJSON)),
		"--device-classes", write("classes.yaml", `apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.accel-dra.io}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.accel-dra.io"'}
`), "-f", write("claim.yaml", claimYAML("c", 1, celH100, false))}
	list := []string{"template", "list"}
	show := []string{"template", "show", "gpu"}
	version := []string{"version"}
	args := func(cmd []string, more ...string) []string { return append(append([]string{}, cmd...), more...) }

	for _, tc := range []struct {
		name string
		args []string
		want string
		// wantErr is a part of the error; nothing may be printed then.
		wantErr string
	}{
		{name: "list jsonpath", args: args(list, "-o", "jsonpath={.items[*].metadata.name}"), want: "empty gpu"},
		{name: "list go-template", args: args(list, "-o", "go-template={{range .items}}{{.metadata.name}};{{end}}"), want: "empty;gpu;"},
		{name: "show jsonpath", args: args(show, "-o", "jsonpath={.items[0].spec.nodeName}"), want: TemplateNodeName},
		{name: "simulate jsonpath", args: args(simulate, "-o", "jsonpath={.template.fits} {.builtin.fits}"), want: "true false"},
		{name: "simulate go-template", args: args(simulate, "-o", "go-template={{.template.fits}}"), want: "true"},
		{name: "version jsonpath", args: args(version, "-o", "jsonpath={.clientVersion.platform}"), want: runtime.GOOS + "/" + runtime.GOARCH},

		// A field the object lacks: nothing (jsonpath) or <no value> (go-template) by default,
		// an error with --allow-missing-template-keys=false; kubectl does the same.
		{name: "missing key allowed", args: args(list, "-o", "jsonpath={.items[*].spec.nosuch}"), want: ""},
		{name: "missing key allowed, go-template", args: args(version, "-o", "go-template={{.clientVersion.nosuch}}"), want: "<no value>"},
		{name: "missing key refused", args: args(list, "-o", "jsonpath={.items[0].nosuch}", "--allow-missing-template-keys=false"), wantErr: `error executing jsonpath "{.items[0].nosuch}": Error executing template: nosuch is not found`},
		{name: "missing key refused, go-template", args: args(version, "-o", "go-template={{.clientVersion.nosuch}}", "--allow-missing-template-keys=false"), wantErr: `map has no entry for key "nosuch"`},
		{name: "missing key refused, simulate", args: args(simulate, "-o", "jsonpath={.nosuch}", "--allow-missing-template-keys=false"), wantErr: "nosuch is not found"},

		// Templates that do not parse.
		{name: "list bad jsonpath", args: args(list, "-o", "jsonpath={.items["), wantErr: "-o jsonpath={.items[: unterminated array"},
		{name: "show bad jsonpath", args: args(show, "-o", "jsonpath={.items[0]"), wantErr: "-o jsonpath={.items[0]: unclosed action"},
		{name: "simulate bad jsonpath", args: args(simulate, "-o", "jsonpath={.template.fits"), wantErr: "-o jsonpath={.template.fits: unclosed action"},
		{name: "version bad go-template", args: args(version, "-o", "go-template={{.clientVersion"), wantErr: "-o go-template={{.clientVersion: template: output:1: unclosed action"},
		{name: "empty jsonpath", args: args(list, "-o", "jsonpath="), wantErr: "-o jsonpath=: template format specified but no template given"},
		{name: "empty go-template", args: args(simulate, "-o", "go-template="), wantErr: "-o go-template=: template format specified but no template given"},
		{name: "format without expression", args: args(show, "-o", "jsonpath"), wantErr: `unknown output format "jsonpath"`},
		{name: "format of another command", args: args(version, "-o", "wide"), wantErr: `unknown output format "wide"`},
		{name: "bad selector", args: args(list, "-l", "pool in (a"), wantErr: `-l "pool in (a": `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := gpuAndEmptyCluster(t)
			f.groups["clusters/empty"].Annotations = h100Annotations(t)
			var out, errOut bytes.Buffer
			cmd := NewCommand(IOStreams{Out: &out, ErrOut: &errOut}, func(ClientGetter) (Cluster, string, error) {
				if tc.wantErr != "" && !strings.Contains(tc.wantErr, "not found") && !strings.Contains(tc.wantErr, "no entry") {
					t.Error("connected before checking the flags")
				}
				return f, "clusters", nil
			})
			cmd.SetArgs(tc.args)
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				if ExitCode(err) != ExitError {
					t.Errorf("exit code %d, want %d", ExitCode(err), ExitError)
				}
				if out.Len() != 0 {
					t.Errorf("printed %q before failing", out.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut.String())
			}
			if out.String() != tc.want {
				t.Errorf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}

// TestNoHeaders: --no-headers leaves out the table's header line, with -A's NAMESPACE column
// too, and is ignored by the formats that have no header, as kubectl's.
func TestNoHeaders(t *testing.T) {
	f := listCluster(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"table", nil},
		{"wide", []string{"-o", "wide"}},
		{"all namespaces", []string{"-A"}},
		{"name", []string{"-o", "name"}},
		{"json", []string{"-o", "json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			with, err := run(t, f, append([]string{"template", "list"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			without, err := run(t, f, append([]string{"template", "list", "--no-headers"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			// The columns' widths follow the header too: compare the fields of each line.
			fields := func(s string) []string {
				var l []string
				for _, line := range strings.Split(s, "\n") {
					l = append(l, strings.Join(strings.Fields(line), " "))
				}
				return l
			}
			want := fields(with)
			if h := want[0]; strings.HasPrefix(h, "KIND ") || strings.HasPrefix(h, "NAMESPACE ") {
				want = want[1:]
			} else if tc.name == "table" || tc.name == "wide" || tc.name == "all namespaces" {
				t.Fatalf("the table has no header line: %q", with)
			}
			if strings.Join(fields(without), "\n") != strings.Join(want, "\n") {
				t.Errorf("--no-headers printed\n%s\nwant\n%s", without, want)
			}
		})
	}
}
