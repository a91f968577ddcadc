package accelctl

import (
	"bytes"
	"strings"
	"testing"
)

func TestCommandName(t *testing.T) {
	for _, tc := range []struct{ argv0, want string }{
		{"accelctl", "accelctl"},
		{"/usr/local/bin/accelctl", "accelctl"},
		// kubectl runs a plugin by the path it found on $PATH; krew's is a link.
		{"/home/u/.krew/bin/kubectl-accel", "kubectl accel"},
		{"kubectl-accel", "kubectl accel"},
		{"kubectl-accel.exe", "kubectl accel"},
		{"kubectl-accel.EXE", "kubectl accel"},
		// Other names are accelctl: only the one kubectl looks for is the plugin.
		{"kubectl-accelctl", "accelctl"},
		{"kubectl-accel-old", "accelctl"},
		{"/opt/kubectl-accel/accelctl", "accelctl"},
		{"", "accelctl"},
	} {
		if got := CommandName(tc.argv0); got != tc.want {
			t.Errorf("CommandName(%q) = %q, want %q", tc.argv0, got, tc.want)
		}
	}
}

// TestPluginHelp: run as the kubectl plugin, every usage line, the hint at the end of the help
// and cobra's errors show "kubectl accel ...", which the user can type; as accelctl, none does.
func TestPluginHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		// want are parts of the output (help) or of the error.
		want []string
		err  bool
	}{
		{args: []string{"--help"}, want: []string{"kubectl accel [command]", `Use "kubectl accel [command] --help" for more information about a command.`}},
		{args: []string{"template", "list", "--help"}, want: []string{"kubectl accel template list [flags]", "--allow-missing-template-keys", "--no-headers", "-l, --selector"}},
		{args: []string{"template", "--help"}, want: []string{"kubectl accel template [command]"}},
		{args: []string{"template", "generate", "--help"}, want: []string{`"kubectl accel template seed GROUP -f -"`}},
		{args: []string{"nosuch"}, err: true, want: []string{`unknown command "nosuch" for "kubectl accel"`}},
		{args: []string{"template", "show"}, err: true, want: []string{"accepts 1 arg(s), received 0"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for _, name := range []string{PluginName, Name} {
				var out bytes.Buffer
				cmd := NewCommandAs(name, IOStreams{Out: &out, ErrOut: &out}, func(ClientGetter) (Cluster, string, error) {
					t.Error("connected")
					return nil, "", nil
				})
				cmd.SetArgs(tc.args)
				err := cmd.Execute()
				if (err != nil) != tc.err {
					t.Fatalf("%s: error %v, want error %v", name, err, tc.err)
				}
				got := out.String()
				if err != nil {
					got = err.Error()
				}
				for _, w := range tc.want {
					if name == Name {
						w = strings.ReplaceAll(w, PluginName, Name)
					}
					if !strings.Contains(got, w) {
						t.Errorf("%s: %q not in\n%s", name, w, got)
					}
				}
				if name == Name && strings.Contains(got, PluginName) {
					t.Errorf("accelctl's output names the plugin:\n%s", got)
				}
			}
		})
	}
}
