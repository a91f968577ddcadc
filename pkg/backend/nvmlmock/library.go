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

// useDriverRoot loads NVML from the driver installed under root (WithDriverRoot).
func (s *Server) useDriverRoot(root string) error {
	lib, err := nvmlbackend.FindLibrary(root)
	if err != nil {
		return err
	}
	m := driverVersionOf.FindStringSubmatch(filepath.Base(lib))
	if m == nil {
		return fmt.Errorf("the mock NVML reads the driver's version from the name of the library it finds, libnvidia-ml.so.<version>, and %s has none", lib)
	}
	version := m[1]
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return version, nvml.SUCCESS }
	s.SystemGetNVMLVersionFunc = func() (string, nvml.Return) { return "12." + version, nvml.SUCCESS }
	s.InitFunc = func() nvml.Return {
		d := dl.New(lib, dl.RTLD_LAZY|dl.RTLD_LOCAL)
		if err := d.Open(); err != nil {
			return nvml.ERROR_LIBRARY_NOT_FOUND
		}
		_ = d.Close()
		return s.checkModule(version)
	}
	return nil
}
