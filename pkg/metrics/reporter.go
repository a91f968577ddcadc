package metrics

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// ReporterFile is the reporter lock's name in the plugin data directory, which every plugin
// process of a driver on the node shares (a host path).
const ReporterFile = "metrics-reporter.lock"

// Reporter elects, among the plugin processes of one driver on a node, the one that counts the
// node's hardware events: the holder of an exclusive flock(2) on a file they share. The first
// process to ask gets it and keeps it for its life; the kernel releases it when the process
// exits (kill -9 included), and the other process takes it at its next Active. During a
// rolling update with surge the old pod thus keeps counting until it stops, and the new one
// counts from then on: every event is counted once, by one of them, and no event is missed
// while both run. (Electing the newest process instead would leave a gap: the new pod starts
// watching health well after it starts.)
type Reporter struct {
	path string

	mu   sync.Mutex
	file *os.File // held lock; nil until acquired
}

// NewReporter returns the reporter election on the lock file at path; it takes nothing yet.
func NewReporter(path string) *Reporter { return &Reporter{path: path} }

// Active reports whether this process is the node's reporter, taking the lock if it is free.
// A lock that cannot be tried (the file cannot be opened) makes this process count: a double
// count is better than none.
func (r *Reporter) Active() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file != nil {
		return true
	}
	held, err := r.try()
	return held || err != nil
}

func (r *Reporter) try() (bool, error) {
	if err := os.MkdirAll(filepath.Dir(r.path), 0o750); err != nil {
		return false, fmt.Errorf("metrics reporter lock: %w", err)
	}
	f, err := os.OpenFile(r.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, fmt.Errorf("metrics reporter lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("metrics reporter lock %s: %w", r.path, err)
	}
	r.file = f
	return true, nil
}

// Close gives the lock up, so that the other process becomes the reporter at once.
func (r *Reporter) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file != nil {
		_ = r.file.Close()
		r.file = nil
	}
}
