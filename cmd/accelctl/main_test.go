package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runMainEnv makes the test binary run main() instead of the tests, so that the tests run the
// command as a user does: by an executable name (a link to this binary), with an exit code.
const runMainEnv = "ACCELCTL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestExecutableName: kubectl runs `kubectl accel ARGS` as the executable kubectl-accel it finds
// on $PATH; under that name accelctl's help and errors say "kubectl accel", under its own they
// say "accelctl". A bad -o exits 1 with the parser's message and prints nothing on stdout, before
// any connection (there is no kubeconfig here).
func TestExecutableName(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"kubectl-accel", "accelctl"} {
		if err := os.Symlink(self, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		exe      string
		args     []string
		code     int
		stdout   string // a part of stdout
		stderr   string // a part of stderr
		noStdout bool
	}{
		{exe: "kubectl-accel", args: []string{"--help"}, stdout: `Use "kubectl accel [command] --help"`},
		{exe: "accelctl", args: []string{"--help"}, stdout: `Use "accelctl [command] --help"`},
		{exe: "kubectl-accel", args: []string{"template", "list", "--help"}, stdout: "kubectl accel template list [flags]"},
		{exe: "kubectl-accel", args: []string{"version"}, stdout: "accelctl "},
		{exe: "kubectl-accel", args: []string{"nosuch"}, code: 1, stderr: `kubectl accel: unknown command "nosuch" for "kubectl accel"`, noStdout: true},
		{exe: "kubectl-accel", args: []string{"template", "list", "-o", "jsonpath={.items["}, code: 1, stderr: "kubectl accel: -o jsonpath={.items[: unterminated array", noStdout: true},
		{exe: "accelctl", args: []string{"template", "show", "gpu", "-o", "go-template={{.items"}, code: 1, stderr: "accelctl: -o go-template={{.items: template: output:1: unclosed action", noStdout: true},
		{exe: "kubectl-accel", args: []string{"template", "list", "-l", "a in (b"}, code: 1, stderr: `kubectl accel: -l "a in (b": `, noStdout: true},
		{exe: "kubectl-accel", args: []string{"version", "-o", "jsonpath={.clientVersion.nosuch}", "--allow-missing-template-keys=false"}, code: 1, stderr: "nosuch is not found", noStdout: true},
	} {
		t.Run(tc.exe+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.Command(filepath.Join(dir, tc.exe), tc.args...)
			cmd.Env = append(os.Environ(), runMainEnv+"=1", "KUBECONFIG="+filepath.Join(dir, "no-kubeconfig"), "KUBERNETES_SERVICE_HOST=")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, stdout.String())
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr.String())
			}
			if tc.noStdout && stdout.Len() != 0 {
				t.Errorf("printed on stdout: %q", stdout.String())
			}
		})
	}
}
