package accelctl

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSimulateExitCode: simulate is scriptable in CI; its exit code says whether the claims fit
// the verdict --verdict chooses (the accel-dra template's by default).
func TestSimulateExitCode(t *testing.T) {
	f := gpuAndEmptyCluster(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	four := write("four.yaml", claimYAML("c", 4, "", true))
	nine := write("nine.yaml", claimYAML("c", 9, "", false))
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{name: "fits the template", args: []string{"--node-group", "gpu", "-f", four}, code: 0},
		{name: "does not fit the template", args: []string{"--node-group", "gpu", "-f", nine}, code: 2},
		{name: "fits the template, not the built-in", args: []string{"--node-group", "gpu", "-f", four, "--verdict", "builtin"}, code: 2},
		{name: "group without template", args: []string{"--node-group", "empty", "-f", four}, code: 2},
		{name: "does not fit, json", args: []string{"--node-group", "gpu", "-f", nine, "-o", "json"}, code: 2},
		{name: "unknown verdict", args: []string{"--node-group", "gpu", "-f", four, "--verdict", "best"}, code: 1},
		{name: "unknown output", args: []string{"--node-group", "gpu", "-f", four, "-o", "table"}, code: 1},
		{name: "missing claims file", args: []string{"--node-group", "gpu", "-f", filepath.Join(dir, "none.yaml")}, code: 1},
		{name: "unknown group", args: []string{"--node-group", "nope", "-f", four}, code: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, f, append([]string{"simulate"}, tc.args...)...)
			code := 0
			if err != nil {
				code = 1
				var c interface{ ExitCode() int }
				if errors.As(err, &c) {
					code = c.ExitCode()
				}
			}
			if code != tc.code {
				t.Errorf("exit code %d (err %v), want %d\n%s", code, err, tc.code, out)
			}
		})
	}
}
