package nvmlmock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
)

// The NVIDIA kernel module outlives every process that uses it: installing a new driver on the
// host (a package upgrade) replaces the user-space libraries at once, but the old module serves
// until the node reboots or the module is reloaded, and NVML refuses to work across the two:
// nvmlInit returns NVML_ERROR_LIB_RM_VERSION_MISMATCH ("RM has detected an NVML/RM version
// mismatch", nvml.h; nvidia-smi prints "Failed to initialize NVML: Driver/library version
// mismatch"). The mock with a driver root and a state directory keeps the loaded module's
// version in the state directory, in /proc/driver/nvidia/version's format, so that a driver root
// replaced under it by another version's is refused as a real node refuses it.

// ModuleFileName is the file in the state directory (WithStateDir) holding the loaded module's
// version, as the host's /proc/driver/nvidia/version does. The first NVML Init of a machine
// without one loads the module of the library's version (the node booted with that driver).
const ModuleFileName = "proc-driver-nvidia-version"

// LoadModule makes version the loaded kernel module of the mock machine whose state is in dir:
// what a reboot after a host driver upgrade does, or the GPU operator's driver container, which
// unloads the old module and loads its own before it mounts its root.
func LoadModule(dir, version string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return replaceFile(filepath.Join(dir, ModuleFileName), []byte(ModuleVersionFile(version)), 0o644)
}

// ModuleVersionFile is what /proc/driver/nvidia/version holds with the module of version loaded,
// for a test that loads the module on a node it reaches only by a shell (kind).
func ModuleVersionFile(version string) string {
	return fmt.Sprintf("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  (accel-dra mock)\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", version)
}

// ModuleVersion is the loaded module's version of the mock machine whose state is in dir; ""
// if none is loaded yet.
func ModuleVersion(dir string) (string, error) {
	return readModule(filepath.Join(dir, ModuleFileName))
}

func readModule(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	v := nvmlbackend.ModuleVersion(b)
	if v == "" {
		return "", fmt.Errorf("%s: no kernel module version in %q", path, b)
	}
	return v, nil
}

// checkModule is nvmlInit's check of the library's version against the loaded module's.
func (s *Server) checkModule(libVersion string) nvml.Return {
	if s.moduleFile == "" {
		return nvml.SUCCESS
	}
	loaded, err := readModule(s.moduleFile)
	switch {
	case err != nil:
		return nvml.ERROR_UNKNOWN
	case loaded == "":
		if LoadModule(filepath.Dir(s.moduleFile), libVersion) != nil {
			return nvml.ERROR_UNKNOWN
		}
		return nvml.SUCCESS
	case loaded != libVersion:
		return nvml.ERROR_LIB_RM_VERSION_MISMATCH
	}
	return nvml.SUCCESS
}
