package nvmlmock

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
)

// WithDriverRoot makes the mock's NVML the library of the driver installed under root (by
// WriteDriver, or anything that lays out a driver's libraries as it does), as the real backend
// loads the root's libnvidia-ml: found as nvml.FindLibrary finds it, its driver version that of
// the file found (libnvidia-ml.so.<version>), and Init fails as a real one does where the
// loader refuses the file. New fails, as the real backend does, where the root has no
// libnvidia-ml.so.1. So a driver root replaced by another version's gives a new backend of
// that version, and the plugin's edits and files follow it.
func WithDriverRoot(root string) Option {
	return func(o *options) { o.driverRoot = root }
}

// driverVersionOf is the version in a driver library's file name, libnvidia-ml.so.570.124.06.
var driverVersionOf = regexp.MustCompile(`^` + regexp.QuoteMeta(strings.TrimSuffix(nvmlbackend.LibraryName, ".1")) + `\.([0-9]+(\.[0-9]+)+)$`)

// useDriverRoot loads NVML from the driver installed under root (WithDriverRoot). The library
// is bound as go-nvml binds a real one (nvmlbackend.BindLibrary): the first library a process
// calls is the one all its later NVML instances call, whatever path they load, so an instance
// of a root replaced under a process that called the old library answers with the old one's
// version (and is refused by a module of the new version). The mock machine's process is its
// state directory (or, without one, the driver root): one plugin process per machine.
func (s *Server) useDriverRoot(root string) (string, error) {
	lib, err := nvmlbackend.FindLibrary(root)
	if err != nil {
		return "", err
	}
	if _, err := libraryVersion(lib); err != nil {
		return "", err
	}
	var version string
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) {
		if version == "" {
			return "", nvml.ERROR_UNINITIALIZED
		}
		return version, nvml.SUCCESS
	}
	s.SystemGetNVMLVersionFunc = func() (string, nvml.Return) {
		if version == "" {
			return "", nvml.ERROR_UNINITIALIZED
		}
		return "12." + version, nvml.SUCCESS
	}
	s.InitFunc = func() nvml.Return {
		d := dl.New(lib, dl.RTLD_LAZY|dl.RTLD_LOCAL)
		if err := d.Open(); err != nil {
			return nvml.ERROR_LIBRARY_NOT_FOUND
		}
		_ = d.Close()
		v, err := libraryVersion(nvmlbackend.BindLibrary(s.process(root), lib))
		if err != nil {
			return nvml.ERROR_UNKNOWN
		}
		version = v
		return s.checkModule(version)
	}
	return lib, nil
}

// process names the mock machine's plugin process for nvmlbackend.BindLibrary.
func (s *Server) process(root string) string {
	if s.moduleFile != "" {
		return Process(filepath.Dir(s.moduleFile))
	}
	return Process(root)
}

// Process is the name, for nvmlbackend.BindLibrary and BoundLibrary, of the plugin process of
// the mock machine whose state is in stateDir (WithStateDir; without one, its driver root's).
func Process(stateDir string) string { return "nvmlmock:" + stateDir }

// Exec is what exec(2) does to the plugin process of the mock machine whose state is in
// stateDir: the process image, and with it the library its NVML calls, is gone, and its next
// NVML call binds the library it loads then. (A real process that execs gets this from the
// kernel; the mock's processes are not processes.)
func Exec(stateDir string) { nvmlbackend.UnbindLibrary(Process(stateDir)) }

// libraryVersion is the driver version in the name of a driver's library.
func libraryVersion(lib string) (string, error) {
	m := driverVersionOf.FindStringSubmatch(filepath.Base(lib))
	if m == nil {
		return "", fmt.Errorf("the mock NVML reads the driver's version from the name of the library it finds, libnvidia-ml.so.<version>, and %s has none", lib)
	}
	return m[1], nil
}
