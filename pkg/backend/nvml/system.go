package nvml

import (
	"context"
	"fmt"
	"io/fs"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NewFromSystem returns the backend for a real node: libnvidia-ml.so.1 from the library path,
// sysfs at sysRoot and device nodes under devRoot (usually "/sys" and "/dev"). It initialises
// NVML at once so that a missing library or driver is reported at start-up, as an error wrapping
// ErrLibraryNotFound where the library is missing, never as a panic.
func NewFromSystem(ctx context.Context, sysRoot, devRoot string, opts ...Option) (*Backend, error) {
	sysfs, ok := os.DirFS(sysRoot).(fs.ReadLinkFS)
	if !ok {
		// os.DirFS implements ReadLinkFS since Go 1.25; this guards a future change.
		return nil, fmt.Errorf("sysfs root %s: os.DirFS does not support symlinks", sysRoot)
	}
	lib, err := newLibrary()
	if err != nil {
		return nil, err
	}
	opts = append([]Option{WithCapabilities(os.DirFS(DefaultCapabilitiesDir)), WithProcDevices(ReadProcDevices)}, opts...)
	b := New(lib, sysfs, devRoot, opts...)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initLocked(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// newLibrary wraps nvml.New, which only records the library name today, against a panic in a
// future version that loads eagerly.
func newLibrary() (lib nvml.Interface, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w (loading it panicked: %v)", ErrLibraryNotFound, r)
		}
	}()
	return nvml.New(), nil
}
