// Package devchar keeps /dev/char/<major>:<minor> links for the device nodes the plugin's CDI
// specs give containers.
//
// With the systemd cgroup driver (containerd's SystemdCgroup, the kubelet's cgroupDriver
// systemd), runc hands a container's device rules to systemd as
// DeviceAllow=/dev/char/<major>:<minor>, and skips a rule whose path exists neither there nor
// under /sys/dev/char (runc's libcontainer/cgroups/devices/systemd.go). udev makes those links
// for the nodes it creates; nvidia-modprobe, the GPU operator's driver container and the
// plugin's own /proc/devices nodes are not udev's, so no link exists, runc's rule is dropped,
// and the next `systemctl daemon-reload` rewrites the container's device cgroup without the GPU:
// the running container gets EPERM on its GPU (NVIDIA's container toolkit documents it as
// "Containers losing access to GPUs with error: Failed to initialize NVML: Unknown Error", and
// `nvidia-ctk system create-dev-char-symlinks` as the fix). The links must exist before the
// runtime creates the container, so they are made when a claim's spec is written.
package devchar

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/specs-go"
)

// Linker makes the links. Dir and OwnDir are required; HostDev may be empty.
type Linker struct {
	// Dir is where this process sees the host's /dev/char (read-write).
	Dir string
	// HostDev is where this process sees the host's /dev (read-only is enough): a node whose
	// host path is under /dev and is there, with the same numbers, is what the link names.
	HostDev string
	// OwnDir is a directory this process owns and sees at the same path as the host does (under
	// the kubelet's plugins directory). A node the host has nowhere under /dev (one built from
	// /proc/devices, a MIG capability node, a stand-in) gets a node of its own there for the
	// link to name: systemd only reads the numbers of what the link names.
	OwnDir string

	mu   sync.Mutex
	done map[string]bool // links made or found, by name, so a spec write costs no syscalls
}

// Ensure makes a link for every character device node of spec that has none. It goes on past a
// node it cannot link and returns every failure: a missing link costs the container its device
// only at the next daemon-reload, so the spec is written anyway.
func (l *Linker) Ensure(spec *specs.Spec) error {
	if l == nil || spec == nil {
		return nil
	}
	nodes := spec.ContainerEdits.DeviceNodes
	for _, d := range spec.Devices {
		nodes = append(nodes, d.ContainerEdits.DeviceNodes...)
	}
	var errs []error
	for _, n := range nodes {
		if n == nil || n.Type != "c" {
			continue
		}
		if err := l.ensure(n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *Linker) ensure(n *specs.DeviceNode) error {
	name := strconv.FormatInt(n.Major, 10) + ":" + strconv.FormatInt(n.Minor, 10)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done[name] {
		return nil
	}
	link := filepath.Join(l.Dir, name)
	// A link that is there is udev's, the GPU operator validator's or ours: each names the node
	// its maker knows, and systemd reads only the numbers.
	// Ours is made good again where its node went (a wiped plugin directory): systemd would
	// drop the rule as if there were no link.
	if _, err := os.Lstat(link); err == nil {
		if t, _ := os.Readlink(link); !strings.HasPrefix(t, l.OwnDir+string(filepath.Separator)) || isChar(t, n.Major, n.Minor) {
			l.mark(name)
			return nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("/dev/char/%s: %w", name, err)
	}
	target, err := l.target(n, name)
	if err != nil {
		return fmt.Errorf("/dev/char/%s for %s: %w", name, n.Path, err)
	}
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return fmt.Errorf("/dev/char/%s: %w", name, err)
	}
	// A rename puts it in place whole, and a plugin instance beside this one (a rolling update)
	// that made the same link meanwhile loses nothing.
	tmp := link + ".accel-dra.tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("/dev/char/%s: %w", name, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("/dev/char/%s: %w", name, err)
	}
	l.mark(name)
	return nil
}

func (l *Linker) mark(name string) {
	if l.done == nil {
		l.done = map[string]bool{}
	}
	l.done[name] = true
}

// target is the host path the link names: the node's own host path where the host has it under
// /dev with the spec's numbers, else a node of the plugin's own.
func (l *Linker) target(n *specs.DeviceNode, name string) (string, error) {
	host := n.HostPath
	if host == "" {
		host = n.Path
	}
	if rest, ok := strings.CutPrefix(host, "/dev/"); ok && l.HostDev != "" && isChar(filepath.Join(l.HostDev, rest), n.Major, n.Minor) {
		return host, nil
	}
	own := filepath.Join(l.OwnDir, name)
	if isChar(own, n.Major, n.Minor) {
		return own, nil
	}
	if err := os.MkdirAll(l.OwnDir, 0o755); err != nil {
		return "", err
	}
	_ = os.Remove(own)
	// Mode 0: the node is for systemd to stat; nobody opens it.
	if err := unix.Mknod(own, unix.S_IFCHR, int(unix.Mkdev(uint32(n.Major), uint32(n.Minor)))); err != nil {
		return "", fmt.Errorf("no host node under /dev with these numbers, and making one at %s: %w (the plugin needs CAP_MKNOD)", own, err)
	}
	return own, nil
}

func isChar(path string, major, minor int64) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return false
	}
	return int64(unix.Major(uint64(st.Rdev))) == major && int64(unix.Minor(uint64(st.Rdev))) == minor
}
