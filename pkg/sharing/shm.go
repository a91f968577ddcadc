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
// claim's, or those of every MPS share of one GPU. The daemon gets it from its runner
// (mpsdaemon.go), which bind-mounts the directory over /dev/shm in a mount namespace of its
// own (a new one, or its pod's container's) before it starts the daemon.

// DefaultShmSize is the size limit of a daemon's /dev/shm tmpfs: half of the node's memory,
// which is tmpfs's own default and what NVIDIA's driver uses. tmpfs takes memory only for what
// is stored in it; the limit caps what one daemon's MPS clients can pin there.
const DefaultShmSize = "50%"

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

// UnmountShm is unmountShm for the uninstall clean-up (pkg/cleanup), which removes the MPS
// mounts a plugin left behind.
func UnmountShm(dir string) error { return unmountShm(dir) }

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
