// Package devnode reads the type and major/minor numbers of device special files, so that a
// backend can hand them to the runtime instead of making it stat host paths.
package devnode

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Info is what a device special file's inode says about it.
type Info struct {
	// Type is "c" for a character device, "b" for a block device (the OCI/CDI spelling).
	Type  string
	Major int64
	Minor int64
	// GID is the node's group, and Mode its permission bits: what a runtime must be told to
	// create the node in a container as the host has it (device.Node.GID).
	GID  uint32
	Mode fs.FileMode
}

// Stat returns the type and numbers of the device special file at path. A missing file yields
// an error that matches fs.ErrNotExist (unix.ENOENT does); a file that is not a device node is an
// error, because handing a regular file to a runtime as a device would fail far from the cause.
func Stat(path string) (Info, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Info{}, &statError{path: path, err: err}
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return Info{}, fmt.Errorf("%s is not a device node (mode %#o)", path, st.Mode)
	}
	// Rdev is uint32 on some platforms, hence the conversion.
	rdev := uint64(st.Rdev)
	return Info{Type: typ, Major: int64(unix.Major(rdev)), Minor: int64(unix.Minor(rdev)), GID: st.Gid, Mode: fs.FileMode(st.Mode).Perm()}, nil
}

// Owner returns the group and permission bits of the file at path, following links: those of a
// mock's stand-in for a device node, which is a regular file.
func Owner(path string) (gid uint32, mode fs.FileMode, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, &statError{path: path, err: err}
	}
	return st.Gid, fs.FileMode(st.Mode).Perm(), nil
}

// statError keeps the errno reachable through errors.Is (ENOENT matches fs.ErrNotExist).
type statError struct {
	path string
	err  error
}

func (e *statError) Error() string { return "stat " + e.path + ": " + e.err.Error() }
func (e *statError) Unwrap() error { return e.err }

// ParseDev parses the "MAJOR:MINOR" format of a sysfs `dev` attribute (/sys/dev/char/*,
// /sys/class/*/*/dev), trailing newline allowed.
func ParseDev(s string) (major, minor int64, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return 0, 0, fmt.Errorf("invalid dev value %q: want MAJOR:MINOR", s)
	}
	if major, err = strconv.ParseInt(a, 10, 32); err != nil || major < 0 {
		return 0, 0, fmt.Errorf("invalid major number in dev value %q", s)
	}
	if minor, err = strconv.ParseInt(b, 10, 32); err != nil || minor < 0 {
		return 0, 0, fmt.Errorf("invalid minor number in dev value %q", s)
	}
	return major, minor, nil
}

// CharMajors returns the character-device majors /proc/devices (read from r) lists, by driver
// name: the numbers drivers that allocate their major dynamically (nvidia-caps, nvidia-uvm) got
// at load. Only the "Character devices:" section counts.
func CharMajors(r io.Reader) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(r)
	inChar := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case strings.HasSuffix(line, "devices:"):
			inChar = line == "Character devices:"
			continue
		case !inChar:
			continue
		}
		num, dev, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		major, err := strconv.ParseInt(num, 10, 32)
		if err != nil || major <= 0 {
			return nil, fmt.Errorf("invalid major %q of %s in /proc/devices", num, strings.TrimSpace(dev))
		}
		out[strings.TrimSpace(dev)] = major
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading /proc/devices: %w", err)
	}
	return out, nil
}

// CharMajor returns the major CharMajors finds for the driver name; the name must match whole
// (nvidia-caps is not nvidia-caps-imex-channels).
func CharMajor(r io.Reader, name string) (int64, error) {
	majors, err := CharMajors(r)
	if err != nil {
		return 0, err
	}
	major, ok := majors[name]
	if !ok {
		return 0, fmt.Errorf("no character device %s in /proc/devices", name)
	}
	return major, nil
}
