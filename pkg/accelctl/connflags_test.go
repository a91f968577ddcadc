package accelctl

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDoesNotLinkGoPlugins: Go's plugin package makes the linker bind every symbol at start-up
// (-z now). The e2e test binaries link accelctl beside go-nvml, whose NVML symbols must stay
// lazy on machines without NVML: with cli-runtime's ConfigFlags (through kustomize) they died
// at start with "undefined symbol: nvmlDeviceGetDramEncryptionMode".
func TestDoesNotLinkGoPlugins(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if deps := strings.Fields(string(out)); slices.Contains(deps, "plugin") {
		t.Error("accelctl links Go's plugin package; binaries that also link go-nvml fail to start without NVML")
	}
}
