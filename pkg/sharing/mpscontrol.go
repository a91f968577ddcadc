package sharing

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultControlPath is where the driver installs nvidia-cuda-mps-control, under its root.
const DefaultControlPath = "/usr/bin/nvidia-cuda-mps-control"

// commandTimeout bounds one command to a daemon: a daemon that accepts a client and never
// answers must not hold a probe, or the plugin, forever.
const commandTimeout = 10 * time.Second

// PipeDir and LogDir are where the daemon, and the containers it serves, see its pipe and log
// directories (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY): MPS's own defaults, where
// NVIDIA's DRA driver mounts them too (its MPS daemon template mounts them at
// /driver-root/tmp/nvidia-mps and /driver-root/var/log/nvidia-mps and runs chrooted into
// /driver-root; a claim's containers get the pipe directory at /tmp/nvidia-mps). The daemon
// starts its server for a client as the client's user, and the server opens the pipe directory
// by path as that user: the directories stay under the plugin's data directory on the host,
// whose parents (/var/lib/kubelet, its plugins directory: mode 0750, the kubelet's) no user but
// root may traverse, and are bind-mounted where every user reaches them.
const (
	PipeDir = "/tmp/nvidia-mps"
	LogDir  = "/var/log/nvidia-mps"
)

// MPSControl says how nvidia-cuda-mps-control is run, as a daemon and as the client that sends
// it commands. With a driver root it runs chrooted into it, as NVIDIA's DRA driver runs it: the
// binary then finds the driver's own libraries and the server binary beside it, whatever the
// plugin's image has, and needs no LD_LIBRARY_PATH pointing into a mount. The daemon's pipe
// and log directories are bind-mounted into the root at PipeDir and LogDir (prepareRoot).
type MPSControl struct {
	// Root is the driver root as the runner sees it; "" runs Path on the runner's own
	// filesystem (a stand-in built for tests, or a binary that needs nothing of a root).
	Root string
	// Path is nvidia-cuda-mps-control inside Root, or on the runner's filesystem without one.
	Path string
}

// dirs are the daemon's pipe and log directories as it sees them. Without a root the log
// directory stays at its own path, which the runner (root) reaches: only the server, as the
// client's user, must reach the pipe directory, and it logs through the daemon (its log pipe
// is in the pipe directory, bottlerocket-os/bottlerocket#4673), while binding /var/log on the
// runner's own filesystem would need root of the machine where tests run without it.
func (c MPSControl) dirs(dir string) (pipe, log string) {
	if c.Root == "" {
		return PipeDir, filepath.Join(dir, "log")
	}
	return PipeDir, LogDir
}

// env is the environment of the control binary for the daemon in dir: only what MPS reads, so
// that nothing of the runner's environment (a PATH or library path of the plugin's image) leaks
// into the driver root.
func (c MPSControl) env(dir string, devices []string) []string {
	pipe, log := c.dirs(dir)
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_MPS_LOG_DIRECTORY=" + log}
	if len(devices) > 0 {
		env = append(env, "CUDA_VISIBLE_DEVICES="+strings.Join(devices, ","))
	}
	return env
}

// cmd is the control binary with args for the daemon in dir, chrooted when there is a root.
func (c MPSControl) cmd(ctx context.Context, dir string, devices []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Path, args...)
	cmd.Env = c.env(dir, devices)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if c.Root != "" {
		cmd.SysProcAttr.Chroot = c.Root
		cmd.Dir = "/"
	}
	return cmd
}

// Command sends one command to the daemon in dir, as `echo <c> | nvidia-cuda-mps-control`,
// and returns its answer. The caller has made dir visible in the root (prepareRoot).
func (c MPSControl) Command(ctx context.Context, dir, command string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := c.cmd(ctx, dir, nil)
	cmd.Stdin = strings.NewReader(command + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("MPS control %q: %w: %s", command, err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Answering reports whether a daemon answers on dir's control pipe: `get_server_list`
// succeeds, NVIDIA's DRA driver's check. It needs no PID, so it holds in any PID namespace, and
// a pipe that a killed daemon left behind does not answer.
func (c MPSControl) Answering(ctx context.Context, dir string) bool {
	_, err := c.Command(ctx, dir, "get_server_list")
	return err == nil
}

// prepareRoot makes the daemon's pipe directory visible at PipeDir in the root (the runner's
// own / without one) and its log directory at LogDir (with a root), and, for the daemon itself
// (shm), its shm/ tmpfs the /dev/shm there. It mounts in the caller's mount namespace, which
// must be its own (a daemon pod's container, or a process started with a new mount namespace,
// whose / is private): nothing reaches the host. What is mounted already (a probe after the
// runner) is left as it is, so that probes do not stack mounts.
func (c MPSControl) prepareRoot(dir string, shm bool) error {
	root := cmp.Or(c.Root, "/")
	pipe, log := c.dirs(dir)
	binds := [][2]string{{filepath.Join(dir, "pipe"), pipe}}
	if c.Root != "" {
		binds = append(binds, [2]string{filepath.Join(dir, "log"), log})
	}
	for _, b := range binds {
		if err := bindOnce(b[0], filepath.Join(root, b[1]), 0); err != nil {
			return fmt.Errorf("making the MPS directory %s visible at %s in the root %s: %w", b[0], b[1], root, err)
		}
	}
	if !shm {
		return nil
	}
	devShm := filepath.Join(root, "dev/shm")
	if err := bindOnce(filepath.Join(dir, "shm"), devShm, 0); err != nil {
		return fmt.Errorf("mounting the MPS daemon's /dev/shm: %w", err)
	}
	// Per-mount flags are not inherited by a bind mount; /dev/shm has these.
	if err := unix.Mount("", devShm, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remounting %s nosuid,nodev,noexec: %w", devShm, err)
	}
	return nil
}

// bindOnce bind-mounts src at target (created if missing) unless target is src already.
func bindOnce(src, target string, flags uintptr) error {
	if same, err := sameFile(src, target); err != nil && !os.IsNotExist(err) {
		return err
	} else if same {
		return nil
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND|flags, ""); err != nil {
		return fmt.Errorf("bind-mounting %s at %s: %w", src, target, err)
	}
	return nil
}

// sameFile reports whether a and b are one directory (device and inode).
func sameFile(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, err
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, err
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino, nil
}
