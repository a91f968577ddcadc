package sharing

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// MPS clients reach their server through POSIX shared memory in /dev/shm as well as through the
// pipe directory, so a daemon and the containers it serves must see one /dev/shm, and no other
// container may see it. Like NVIDIA's DRA driver, the plugin mounts a tmpfs per daemon at
// <Root>/<key>/shm (on the host, through the data directory's bidirectional mount propagation)
// and mounts that directory at /dev/shm in the daemon and in its claims' containers (CDI): one
// claim's, or those of every MPS share of one GPU. The daemon gets it through a shim: the plugin's own binary, started in a new mount
// namespace, bind-mounts the directory over /dev/shm there and then executes the control
// binary (Go cannot mount between fork and exec).

// DefaultShmSize is the size limit of a daemon's /dev/shm tmpfs: half of the node's memory,
// which is tmpfs's own default and what NVIDIA's driver uses. tmpfs takes memory only for what
// is stored in it; the limit caps what one daemon's MPS clients can pin there.
const DefaultShmSize = "50%"

// ShimArg is the hidden first argument that makes the plugin binary the shim (RunShim).
const ShimArg = "__accel-dra-mps-shm-exec"

// SelfExe is the shim binary MPS uses by default: the running plugin itself.
const SelfExe = "/proc/self/exe"

// ShmDir is the host directory whose tmpfs is the /dev/shm of the daemon key and of the
// containers it serves.
func (m MPS) ShmDir(key string) string { return filepath.Join(m.Root, key, "shm") }

// IsMountPoint reports whether dir is the root of a mount: its device differs from its
// parent's. A tmpfs always has a device of its own, so this is exact for the mounts made here,
// and it needs no mount table.
func IsMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev || st.Ino == parent.Ino, nil
}

// mountShm mounts a tmpfs of size on dir (created if needed) unless one is there already: a
// plugin that restarts or adopts a daemon must not stack a second tmpfs over the one its
// daemon and containers use.
func mountShm(dir, size string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("MPS shm directory: %w", err)
	}
	if mounted, err := IsMountPoint(dir); err != nil {
		return fmt.Errorf("MPS shm directory: %w", err)
	} else if mounted {
		return nil
	}
	// mode 1777 as /dev/shm has, so that containers running as any user can use it.
	err := unix.Mount("accel-dra-mps-shm", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size="+size)
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("mounting a tmpfs at %s for an MPS daemon's /dev/shm: %w: the plugin needs CAP_SYS_ADMIN for this (the chart runs it privileged), and the mount reaches the containers only if the plugin data directory is mounted with bidirectional propagation", dir, err)
	}
	if err != nil {
		return fmt.Errorf("mounting a tmpfs at %s for an MPS daemon's /dev/shm: %w", dir, err)
	}
	return nil
}

// unmountShm removes every mount on dir and then dir itself; a dir that does not exist is done.
// A mount still in use (a file open through this path) is detached, which removes it from the
// mount table now and frees it when the last user is gone.
func unmountShm(dir string) error {
	for range 16 {
		mounted, err := IsMountPoint(dir)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("MPS shm directory: %w", err)
		}
		if !mounted {
			break
		}
		err = unix.Unmount(dir, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(dir, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting the MPS shm tmpfs at %s: %w", dir, err)
		}
	}
	if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the MPS shm directory: %w", err)
	}
	return nil
}

// shimCommand is the command line that runs argv (the control binary and its arguments) with
// shmDir as its /dev/shm, through the shim binary self.
func shimCommand(self, shmDir string, argv ...string) []string {
	return append([]string{self, ShimArg, shmDir, "--"}, argv...)
}

// RunShim is the shim's main: when args (os.Args) start with ShimArg it bind-mounts the shm
// directory over /dev/shm and executes the command, and it never returns (it exits 127 with a
// message on stderr if it cannot); otherwise it returns at once. The plugin's main calls it
// before anything else. The caller started it in a new mount namespace whose mounts do not
// propagate back (exec.Cmd with Unshareflags CLONE_NEWNS makes / private), so the bind is seen
// only by the daemon.
func RunShim(args []string) {
	if len(args) < 2 || args[1] != ShimArg {
		return
	}
	if err := shim(args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "accel-dra MPS shim: %v\n", err)
		os.Exit(127)
	}
}

func shim(args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return fmt.Errorf("usage: %s <shm directory> -- <command> [args...], got %q", ShimArg, args)
	}
	shmDir, argv := args[0], args[2:]
	if err := unix.Mount(shmDir, "/dev/shm", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s at /dev/shm: %w", shmDir, err)
	}
	// Per-mount flags are not inherited by a bind mount; /dev/shm has these.
	if err := unix.Mount("", "/dev/shm", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remounting /dev/shm nosuid,nodev,noexec: %w", err)
	}
	if err := unix.Exec(argv[0], argv, os.Environ()); err != nil {
		return fmt.Errorf("executing %s: %w", argv[0], err)
	}
	return nil
}
