package sharing

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MPS runs MPS control daemons, each named by a key: a prepared claim's UID for a claim that
// has its GPUs to itself, or a GPU's UUID for the one daemon that serves every MPS share of
// that GPU (consumable memory), since a GPU in EXCLUSIVE_PROCESS mode takes one MPS server. A
// daemon is a child process of the plugin in its own session, so that it outlives a plugin
// process that is killed or restarted: the plugin finds it again by its pid file (adoption). A
// restart of the plugin's container kills it with the container; the plugin then starts it
// again for every prepared MPS claim.
//
// Each daemon has its own directory under Root: pipe/ (CUDA_MPS_PIPE_DIRECTORY), log/
// (CUDA_MPS_LOG_DIRECTORY), shm/ (a tmpfs that is the daemon's and the containers' /dev/shm,
// shm.go) and pid. The containers it serves get pipe/ and log/ mounted at the same paths, shm/
// at /dev/shm, and the two variables (docs/sharing.md).
type MPS struct {
	// Control is the nvidia-cuda-mps-control binary, normally under the driver root.
	Control string
	// Root holds the daemons' directories; it must be the same path on the host as here (the
	// plugin data directory is).
	Root string
	// LibraryPath is prepended to LD_LIBRARY_PATH, as for NvidiaSMI.
	LibraryPath []string
	// ShmSize is the size option of each daemon's /dev/shm tmpfs; default DefaultShmSize.
	ShmSize string
	// Shim is the binary that runs RunShim; default SelfExe (the plugin, whose main calls it).
	Shim string
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

// Keys are the keys of the daemons that have a directory under Root, sorted: those running and
// those whose directory a crash left behind.
func (m MPS) Keys() ([]string, error) {
	entries, err := os.ReadDir(m.Root)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing MPS daemons: %w", err)
	}
	var keys []string
	for _, e := range entries {
		if e.IsDir() {
			keys = append(keys, e.Name())
		}
	}
	return keys, nil
}

func (m MPS) pidFile(key string) string { return filepath.Join(m.Root, key, "pid") }

// Running returns the pid of the daemon key if it is alive and is that daemon.
func (m MPS) Running(key string) (int, bool) {
	b, err := os.ReadFile(m.pidFile(key))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0, false
	}
	// A zombie (an exited child of this process not yet reaped) is not a daemon.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			return 0, false
		}
	}
	// The pid file may be older than the process that has its pid now (a reboot, a new pid
	// namespace after a container restart): only a process started with this key's pipe
	// directory is its daemon, and only that one may be adopted or stopped.
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return 0, false
	}
	pipe, _ := m.Dirs(key)
	if !bytes.Contains(append([]byte{0}, environ...), []byte("\x00CUDA_MPS_PIPE_DIRECTORY="+pipe+"\x00")) {
		return 0, false
	}
	return pid, true
}

func (m MPS) env(key string, uuids []string) []string {
	pipe, log := m.Dirs(key)
	env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_LOG_DIRECTORY="+log)
	if len(uuids) > 0 {
		env = append(env, "CUDA_VISIBLE_DEVICES="+strings.Join(uuids, ","))
	}
	if len(m.LibraryPath) > 0 {
		lp := strings.Join(m.LibraryPath, ":")
		if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
			lp += ":" + old
		}
		env = append(env, "LD_LIBRARY_PATH="+lp)
	}
	return env
}

// Ensure starts the daemon key on the GPUs uuids and applies limits, unless it is running
// already (adopted: it kept the limits it was given). It reports whether it started one.
func (m MPS) Ensure(ctx context.Context, key string, uuids []string, limits MPSLimits) (started bool, err error) {
	shm := m.ShmDir(key)
	if pid, ok := m.Running(key); ok {
		// The daemon keeps the tmpfs it was started with; if that is no longer the one at
		// shm/ (someone unmounted it), containers prepared from now on would not reach it.
		if mounted, _ := IsMountPoint(shm); mounted {
			return false, nil
		}
		if err := m.kill(ctx, key, pid); err != nil {
			return false, err
		}
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
	// A daemon that was killed leaves its control pipe behind; waiting for it below must see
	// the new daemon's.
	if err := os.Remove(filepath.Join(pipe, "control")); err != nil && !os.IsNotExist(err) {
		return false, fmt.Errorf("MPS control pipe: %w", err)
	}
	outPath := filepath.Join(log, "daemon.out")
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return false, fmt.Errorf("MPS daemon log: %w", err)
	}
	defer out.Close()
	argv := shimCommand(cmp.Or(m.Shim, SelfExe), shm, m.Control, "-f")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = m.env(key, uuids)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own session, to outlive the plugin; its own mount namespace, for its /dev/shm.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Unshareflags: syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		_ = m.remove(key)
		return false, fmt.Errorf("starting %s -f: %w", m.Control, err)
	}
	// Reap it if it ends while this process lives; after a restart init does.
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := os.WriteFile(m.pidFile(key), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		_ = m.remove(key)
		return false, fmt.Errorf("MPS pid file: %w", err)
	}
	// The daemon is ready once its control pipe exists.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(pipe, "control")); err == nil {
			break
		}
		// Not Running: the shim's exec of the control binary replaces its environment, which
		// for a moment reads as empty.
		select {
		case <-exited:
			deadline = time.Time{}
		default:
		}
		if time.Now().After(deadline) {
			tail := lastLine(outPath)
			_ = m.Stop(ctx, key)
			return false, fmt.Errorf("MPS control daemon did not start: %s", tail)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var cmds []string
	if limits.ActiveThreadPercentage > 0 {
		cmds = append(cmds, fmt.Sprintf("set_default_active_thread_percentage %d", limits.ActiveThreadPercentage))
	}
	for _, u := range uuids {
		if mib, ok := limits.PinnedMemoryMiB[u]; ok {
			cmds = append(cmds, fmt.Sprintf("set_default_device_pinned_mem_limit %s %dM", u, mib))
		}
	}
	for _, c := range cmds {
		if err := m.command(ctx, key, c); err != nil {
			_ = m.Stop(ctx, key)
			return false, err
		}
	}
	return true, nil
}

// command sends one command to the daemon key, as `echo <cmd> | nvidia-cuda-mps-control`.
func (m MPS) command(ctx context.Context, key, c string) error {
	cmd := exec.CommandContext(ctx, m.Control)
	cmd.Env = m.env(key, nil)
	cmd.Stdin = strings.NewReader(c + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("MPS control %q: %w: %s", c, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Stop ends the daemon key (quit, then SIGKILL after a grace period), unmounts its /dev/shm
// and removes its directories. A key without daemon is stopped already.
func (m MPS) Stop(ctx context.Context, key string) error {
	if pid, ok := m.Running(key); ok {
		if err := m.kill(ctx, key, pid); err != nil {
			return err
		}
	}
	return m.remove(key)
}

// kill ends the daemon pid of key: quit, then SIGKILL after a grace period.
func (m MPS) kill(ctx context.Context, key string, pid int) error {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = m.command(qctx, key, "quit")
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := m.Running(key); !ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("killing MPS control daemon %d: %w", pid, err)
			}
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// lastLine is the last non-empty line of a daemon's output, for an error that says why it did
// not start without sending the user to a file on the node.
func lastLine(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l + " (" + path + ")"
	}
	return "no output (" + path + ")"
}
