package nvml

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// NewFromSystem returns the backend for a real node: NVML from library (FindLibrary's path
// under the driver root; empty: libnvidia-ml.so.1 by the loader's search), sysfs at sysRoot and
// device nodes under devRoot (usually "/sys" and "/dev"). It initialises NVML at once so that a
// missing library or driver is reported at start-up, as an error wrapping ErrLibraryNotFound
// where the library cannot be loaded (with the loader's reason), never as a panic.
func NewFromSystem(ctx context.Context, library, sysRoot, devRoot string, opts ...Option) (*Backend, error) {
	sysfs, ok := os.DirFS(sysRoot).(fs.ReadLinkFS)
	if !ok {
		// os.DirFS implements ReadLinkFS since Go 1.25; this guards a future change.
		return nil, fmt.Errorf("sysfs root %s: os.DirFS does not support symlinks", sysRoot)
	}
	if library != "" {
		if err := checkLibrary(library); err != nil {
			return nil, err
		}
	}
	lib, err := newLibrary(library)
	if err != nil {
		return nil, err
	}
	opts = append([]Option{WithProc(os.DirFS(DefaultProcRoot)), WithLibrary("", library)}, opts...)
	b := New(lib, sysfs, devRoot, opts...)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initLocked(ctx); err != nil {
		if library != "" && errors.Is(err, ErrLibraryNotFound) {
			err = loadError(library)
		}
		return nil, err
	}
	return b, nil
}
