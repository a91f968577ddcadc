// Package standin builds the project's stand-ins for the NVIDIA tools (e2e/fakesmi,
// e2e/fakempscontrol) for unit tests.
package standin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Build builds the stand-in at importPath into a temporary directory as name and returns its
// path. It is built for the machine the test runs on, not for the test's GOOS/GOARCH: under
// `make test-arm64` the test runs under qemu-user emulation, whose children are started by the
// host kernel, which runs a host binary and cannot run an arm64 one.
func Build(t testing.TB, importPath, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, importPath)
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "GOOS", "GOARCH", "GOARM64", "CC", "CGO_ENABLED":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", importPath, err, out)
	}
	return bin
}
