package sharing

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// MPS runs MPS control daemons, each named by a key: a prepared claim's UID for a claim that
// has its GPUs to itself, or a GPU's UUID for the one daemon that serves every MPS share of
// that GPU (consumable memory), since a GPU in EXCLUSIVE_PROCESS mode takes one MPS server.
// Daemons says where a daemon runs and so how long it lives (Processes: a child process of the
// plugin; mpspod.Pods: a pod of its own, which outlives the plugin's pod). The plugin finds a
// daemon again (adoption) by what does not depend on its PID namespace: its control pipe
// answering, and its runner's lock or its pod.
//
// Each daemon has its own directory under Root: pipe/ (CUDA_MPS_PIPE_DIRECTORY), log/
// (CUDA_MPS_LOG_DIRECTORY), shm/ (a tmpfs that is the daemon's and the containers' /dev/shm,
// shm.go) and its runner's files (mpsdaemon.go). The containers it serves get pipe/ and log/
// mounted at the same paths, shm/ at /dev/shm, and the two variables (docs/sharing.md). The
// plugin owns the directory and the tmpfs; the runner owns the daemon process.
type MPS struct {
	// Root holds the daemons' directories; it must be the same path on the host as here (the
	// plugin data directory is).
	Root string
	// ShmSize is the size option of each daemon's /dev/shm tmpfs; default DefaultShmSize.
	ShmSize string
	// Daemons runs the daemons.
	Daemons Daemons
}

// MPSLimits are the daemon's defaults for its clients.
type MPSLimits struct {
	// ActiveThreadPercentage is 0 for none.
	ActiveThreadPercentage int32
	// PinnedMemoryMiB is per GPU UUID.
	PinnedMemoryMiB map[string]int64
}

// Dirs are the pipe and log directories of the daemon key.
func (m MPS) Dirs(key string) (pipe, log string) {
	d := filepath.Join(m.Root, key)
	return filepath.Join(d, "pipe"), filepath.Join(d, "log")
}

func (m MPS) spec(key string) DaemonSpec {
	return DaemonSpec{Key: key, Dir: filepath.Join(m.Root, key)}
}

// Keys are the keys of the daemons that exist, sorted: those with a directory under Root
// (running, or left by a crash) and those Daemons knows of otherwise (a pod whose directory is
// gone).
func (m MPS) Keys(ctx context.Context) ([]string, error) {
	var keys []string
	entries, err := os.ReadDir(m.Root)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("listing MPS daemons: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			keys = append(keys, e.Name())
		}
	}
	more, err := m.Daemons.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing MPS daemons: %w", err)
	}
	keys = append(keys, more...)
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// Running reports whether the daemon key runs and answers.
func (m MPS) Running(ctx context.Context, key string) (bool, error) {
	return m.Daemons.Ready(ctx, m.spec(key))
}

// Ensure starts the daemon key on the GPUs uuids with limits, unless it runs already and
// answers (adopted: it kept the limits it was given). It reports whether it started one.
func (m MPS) Ensure(ctx context.Context, key string, uuids []string, limits MPSLimits) (started bool, err error) {
	s := m.spec(key)
	s.Devices, s.Limits = uuids, limits
	ready, err := m.Daemons.Ready(ctx, s)
	if err != nil {
		return false, err
	}
	// The daemon keeps the tmpfs it was started with; if that is no longer the one at shm/
	// (someone unmounted it), containers prepared from now on would not reach it.
	shm := m.ShmDir(key)
	if mounted, _ := IsMountPoint(shm); ready && mounted {
		return false, nil
	}
	// What is left of a daemon that does not answer, or has lost its tmpfs, goes before a new
	// one starts on its directory; its pipe is never taken from a daemon that answers.
	if err := m.Daemons.Stop(ctx, s); err != nil {
		return false, err
	}
	pipe, log := m.Dirs(key)
	for _, d := range []string{pipe, log} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return false, fmt.Errorf("MPS directories: %w", err)
		}
	}
	if err := mountShm(shm, cmp.Or(m.ShmSize, DefaultShmSize)); err != nil {
		_ = m.remove(key)
		return false, err
	}
	if err := m.Daemons.Start(ctx, s); err != nil {
		if serr := m.Daemons.Stop(ctx, s); serr == nil {
			_ = m.remove(key)
		}
		return false, err
	}
	return true, nil
}

// Stop ends the daemon key, unmounts its /dev/shm and removes its directory. A key without
// daemon is stopped already.
func (m MPS) Stop(ctx context.Context, key string) error {
	if err := m.Daemons.Stop(ctx, m.spec(key)); err != nil {
		return fmt.Errorf("stopping MPS control daemon %s: %w", key, err)
	}
	return m.remove(key)
}

// remove unmounts the daemon's /dev/shm and removes its directory. The tmpfs goes first: removing
// the directory tree would otherwise empty it and then fail on the mount point.
func (m MPS) remove(key string) error {
	if err := unmountShm(m.ShmDir(key)); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(m.Root, key)); err != nil {
		return fmt.Errorf("removing MPS directories: %w", err)
	}
	return nil
}
