package nvml

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/lookup"
)

// LibraryName is NVML's soname.
const LibraryName = "libnvidia-ml.so.1"

// ErrNoDriverLibrary is returned (wrapped) by FindLibrary when the driver root has no
// libnvidia-ml.so.1: the driver is not installed there, or not yet (the GPU operator's driver
// container mounts its root only once it has installed the driver).
var ErrNoDriverLibrary = errors.New("no " + LibraryName)

// searched describes FindLibrary's search, for its error.
const searched = "usr/lib64, usr/lib/<arch>-linux-gnu, lib64, lib/<arch>-linux-gnu (and their nvidia/current) and the ld cache etc/ld.so.cache"

// FindLibrary returns the driver root's libnvidia-ml.so.1 as this process sees it, its
// symlinks resolved (the versioned file), found as the NVIDIA container toolkit finds a
// driver's libraries under a root: in the directories distributions and the .run installer
// put them, then through the root's ld cache. The plugin loads NVML by this full path and hands
// it to nvidia-smi in LD_PRELOAD, never through a library path into the root: the root's
// library directories hold the host's C library too, of another build than the plugin image's
// loader, with which neither the plugin nor any program it runs would start. It looks again at
// each call (a few stat calls and a read of the ld cache), as an upgrade replaces the file.
func FindLibrary(root string) (string, error) {
	found, err := lookup.NewLibraryLocator(lookup.WithRoot(root), lookup.WithLogger(quiet{}), lookup.WithCount(1)).Locate(LibraryName)
	if err != nil || len(found) == 0 {
		return "", fmt.Errorf("%w under the NVIDIA driver root %s (searched %s under it)", ErrNoDriverLibrary, root, searched)
	}
	return found[0], nil
}

// quiet drops the toolkit locator's messages: a root without an ld cache is normal, and
// FindLibrary's error says what was searched.
type quiet struct{}

func (quiet) Debugf(string, ...any)   {}
func (quiet) Errorf(string, ...any)   {}
func (quiet) Infof(string, ...any)    {}
func (quiet) Warningf(string, ...any) {}
func (quiet) Tracef(string, ...any)   {}

// newLibrary returns NVML from path, or by its soname through the loader's search where path
// is empty (a library the container runtime put into the container). It wraps nvml.New, which
// only records the library today, against a panic in a future version that loads eagerly.
func newLibrary(path string) (lib nvml.Interface, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w (loading it panicked: %v)", ErrLibraryNotFound, r)
		}
	}()
	if path == "" {
		return nvml.New(), nil
	}
	return nvml.New(nvml.WithLibraryPath(path)), nil
}

// libraryError says why the loader refuses the library at path, which go-nvml's Init reduces
// to ERROR_LIBRARY_NOT_FOUND. It is ErrLibraryNotFound for errors.Is.
type libraryError struct {
	path   string
	reason string
}

func (e libraryError) Error() string {
	return fmt.Sprintf("loading NVML from %s: %s", e.path, e.reason)
}

func (e libraryError) Is(target error) bool { return target == ErrLibraryNotFound }

// initSymbols are NVML's initialisation functions, one of which go-nvml's Init calls: the
// newest it finds, else nvmlInit, whose absence the loader reports by ending the process
// ("symbol lookup error"), not by an error go-nvml could return.
var initSymbols = []string{"nvmlInit_v2", "nvmlInit"}

// checkLibrary loads path as go-nvml's Init will and refuses, with the loader's reason, a
// library the loader refuses or one without NVML's initialisation (a file that is not NVML),
// before go-nvml's Init would call a function it does not have.
func checkLibrary(path string) error {
	d := dl.New(path, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := d.Open(); err != nil {
		// dlerror's message starts with the path.
		return libraryError{path: path, reason: strings.TrimPrefix(err.Error(), path+": ")}
	}
	defer func() { _ = d.Close() }()
	for _, sym := range initSymbols {
		if d.Lookup(sym) == nil {
			return nil
		}
	}
	return libraryError{path: path, reason: fmt.Sprintf("it has none of NVML's %s: not NVML", strings.Join(initSymbols, ", "))}
}

// loadError asks the loader itself why it refuses path.
func loadError(path string) error {
	d := dl.New(path, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := d.Open(); err != nil {
		// dlerror's message starts with the path.
		return libraryError{path: path, reason: strings.TrimPrefix(err.Error(), path+": ")}
	}
	_ = d.Close()
	return libraryError{path: path, reason: "NVML's initialisation found no library, but it loads now"}
}

// Library is the NVML library the backend enumerates with, for the NVIDIA toolkit's CDI
// generator (pkg/cdi/nvidia), which asks it for the driver version: the same library, real or
// mock, so the driver it describes is the one whose devices were enumerated.
func (b *Backend) Library() nvml.Interface { return b.lib }

// A process calls the first libnvidia-ml it loads, for good. go-nvml loads the library with
// RTLD_GLOBAL and calls NVML's functions as C functions of the executable (cgo: C.nvmlInit_v2,
// go-nvml pkg/nvml/lib.go's defaultNvmlLibraryLoadFlags), which the dynamic loader binds to the
// first definition in the process's global scope, at the first call; and it never unloads a
// library whose symbols the executable bound (glibc marks it NODELETE), so nvmlShutdown and
// go-nvml's dlclose do not undo it. A library loaded later from another path, by a backend of
// its own (nvml.New(nvml.WithLibraryPath(...))), is opened, and every call still runs the first
// one's code. Measured: two stand-ins for libnvidia-ml.so.1 that report driver versions 570.1.1
// and 580.2.2, loaded in turn by go-nvml in one process, each after the previous one's Shutdown,
// both report 570.1.1. So a process follows a driver whose library was replaced only by
// starting again (exec).

// ErrLibraryBound is returned (wrapped) by a backend whose library is not the one its process
// already calls: the new library's NVML would answer with the old one's code. Only a new
// process loads it.
var ErrLibraryBound = errors.New("this process already calls another libnvidia-ml (go-nvml binds NVML's functions to the first library a process loads, for the life of the process): only a new process loads the driver's current library")

var processLibraries struct {
	sync.Mutex
	bound map[string]string
}

// BindLibrary records path as the library whose code the process calls, unless one is already,
// and returns the one that is. process is "" for this process; the mock (pkg/backend/nvmlmock)
// names its machines' processes, as one test process runs many.
func BindLibrary(process, path string) string {
	processLibraries.Lock()
	defer processLibraries.Unlock()
	if processLibraries.bound == nil {
		processLibraries.bound = map[string]string{}
	}
	if bound, ok := processLibraries.bound[process]; ok {
		return bound
	}
	processLibraries.bound[process] = path
	return path
}

// BoundLibrary is the library whose code process calls; "" before its first NVML call.
func BoundLibrary(process string) string {
	processLibraries.Lock()
	defer processLibraries.Unlock()
	return processLibraries.bound[process]
}

// UnbindLibrary forgets the library process calls: for the mock's processes (nvmlmock.Exec),
// which are not processes; a real one is unbound by exec(2) alone.
func UnbindLibrary(process string) {
	processLibraries.Lock()
	defer processLibraries.Unlock()
	delete(processLibraries.bound, process)
}

// WithLibrary tells the backend that its NVML was loaded from path by process (BindLibrary's),
// so that its Init fails with ErrLibraryBound where the process already calls another library
// rather than answer with that library's code. NewFromSystem sets it for this process.
func WithLibrary(process, path string) Option {
	return func(b *Backend) { b.process, b.libraryPath = process, path }
}

// bindLibrary is Init's check of the library against the one the process calls.
func (b *Backend) bindLibrary() error {
	if b.libraryPath == "" {
		return nil
	}
	if bound := BindLibrary(b.process, b.libraryPath); bound != b.libraryPath {
		return fmt.Errorf("loading NVML from %s: %w (it calls %s)", b.libraryPath, ErrLibraryBound, bound)
	}
	return nil
}
