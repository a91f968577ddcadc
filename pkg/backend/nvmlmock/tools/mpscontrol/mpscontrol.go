// Package mpscontrol is the nvidia-cuda-mps-control of the GPU mock (cmd/accel-dra-mock-nvidia;
// docs/sharing.md). As a daemon (`-f`, foreground) it listens on the Unix socket
// $CUDA_MPS_PIPE_DIRECTORY/control, records its start and its CUDA_VISIBLE_DEVICES in
// $CUDA_MPS_LOG_DIRECTORY/control.log, and runs until a client sends `quit` (or it is killed). As
// a client (no arguments) it connects to that socket and sends each command it reads on stdin;
// the daemon appends "command <c>" to control.log, as the real daemon logs them, answers
// `get_server_list` (with no server: the stand-in starts none) and ends on `quit`. Only a daemon
// that runs answers: one that was killed leaves its socket behind, and a client then fails with
// "cannot find MPS control daemon process" (exit 1), as the real client does, so that whether the
// control pipe answers is a true liveness check, in any PID namespace. Like the real daemon's
// server, it uses /dev/shm: it writes the file ShmMarker there (holding its pipe directory) and
// logs the device and inode of its /dev/shm ("daemon shm dev=<n> ino=<n>"), so that tests can
// check that it is the claim's shm directory, which the claim's containers get, and of its root
// ("daemon root dev=<n> ino=<n>"), which is the driver root when it runs chrooted into one.
//
// As `alloc <MiB>` it stands in for a CUDA process of a container that the daemon serves, and
// applies the pinned memory limit as an MPS server does: the client's
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("<ordinal>=<n>M|G", ordinals of the devices the daemon
// serves, by its CUDA_VISIBLE_DEVICES), bounded by the daemon's
// set_default_device_pinned_mem_limit for that device. An allocation above the limit fails
// (exit 2, "out of memory"); a limit naming a device the daemon does not serve is an error
// (exit 1). It logs each allocation with the limit it had ("client ... limit=<n>M").
package mpscontrol

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ShmMarker is the file the daemon writes into its /dev/shm.
const ShmMarker = "accel-dra-fakempscontrol"

// exitError ends the command with a message and an exit code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(msg string) error { return &exitError{code: 1, msg: msg} }

// Main runs nvidia-cuda-mps-control with args (without the program name) and returns its exit
// code.
func Main(args []string) int {
	err := run(args)
	if err == nil {
		return 0
	}
	code := 1
	if e, ok := err.(*exitError); ok {
		code = e.code
	}
	fmt.Fprintln(os.Stderr, "nvidia-cuda-mps-control (accel-dra mock):", err)
	return code
}

func run(args []string) error {
	pipe, log := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	if pipe == "" || log == "" {
		return fail("CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY must be set")
	}
	switch {
	case len(args) == 1 && args[0] == "-f":
		return daemon(pipe, log)
	case len(args) == 0:
		return client(pipe)
	case len(args) == 2 && args[0] == "alloc":
		want, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return fail("alloc: " + err.Error())
		}
		return alloc(pipe, log, want)
	default:
		return fail(fmt.Sprintf("unsupported arguments %q", args))
	}
}

// daemon serves clients on the control socket until one sends quit or a signal ends it.
func daemon(pipe, log string) error {
	if err := record(log, fmt.Sprintf("daemon started pid=%d CUDA_VISIBLE_DEVICES=%s", os.Getpid(), os.Getenv("CUDA_VISIBLE_DEVICES"))); err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/dev/shm", &st); err != nil {
		return fail(err.Error())
	}
	if err := record(log, fmt.Sprintf("daemon shm dev=%d ino=%d", st.Dev, st.Ino)); err != nil {
		return err
	}
	// Its root, so that tests can tell a daemon chrooted into a driver root.
	if err := syscall.Stat("/", &st); err != nil {
		return fail(err.Error())
	}
	if err := record(log, fmt.Sprintf("daemon root dev=%d ino=%d", st.Dev, st.Ino)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join("/dev/shm", ShmMarker), []byte(pipe+"\n"), 0o644); err != nil {
		return fail(err.Error())
	}
	// The socket is named relative to the pipe directory: a test's temporary directories make
	// paths longer than a socket address may be (107 bytes).
	if err := os.Chdir(pipe); err != nil {
		return fail(err.Error())
	}
	// A socket left by a daemon that was killed refuses connections; it is replaced.
	if err := os.Remove("control"); err != nil && !os.IsNotExist(err) {
		return fail(err.Error())
	}
	l, err := net.Listen("unix", "control")
	if err != nil {
		return fail(err.Error())
	}
	quit := make(chan struct{})
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			if serve(conn, log) {
				close(quit)
				return
			}
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case <-quit:
	}
	err = record(log, "daemon exiting")
	_ = l.Close()
	return err
}

// serve answers one client's commands and reports whether one was quit.
func serve(conn net.Conn, log string) (quit bool) {
	defer conn.Close()
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		c := strings.TrimSpace(sc.Text())
		if c == "" {
			continue
		}
		_ = record(log, "command "+c)
		// get_server_list: no server runs, so the list is empty.
		quit = quit || c == "quit"
	}
	return quit
}

// client sends the commands on stdin to the daemon and copies its answers to stdout.
func client(pipe string) error {
	conn, err := dial(pipe)
	if err != nil {
		return fail("cannot find MPS control daemon process: " + err.Error())
	}
	defer conn.Close()
	if _, err := io.Copy(conn, os.Stdin); err != nil {
		return fail(err.Error())
	}
	_ = conn.(*net.UnixConn).CloseWrite()
	if _, err := io.Copy(os.Stdout, conn); err != nil {
		return fail(err.Error())
	}
	return nil
}

// dial connects to the daemon's control socket, by a name relative to the pipe directory.
func dial(pipe string) (net.Conn, error) {
	if err := os.Chdir(pipe); err != nil {
		return nil, err
	}
	return net.Dial("unix", "control")
}

// alloc allocates want MiB on the client's device 0 under the limits a server would apply.
func alloc(pipe, log string, want int64) error {
	conn, err := dial(pipe)
	if err != nil {
		return fail("cannot connect to the MPS control daemon: " + err.Error())
	}
	_ = conn.Close()
	b, err := os.ReadFile(filepath.Join(log, "control.log"))
	if err != nil {
		return fail(err.Error())
	}
	// What the daemon serves and the defaults it was given, as of its last start.
	var devices []string
	defaults := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "daemon started "); ok {
			_, visible, _ := strings.Cut(rest, "CUDA_VISIBLE_DEVICES=")
			devices, defaults = strings.Split(visible, ","), map[string]int64{}
		}
		if f := strings.Fields(line); len(f) == 4 && f[0] == "command" && f[1] == "set_default_device_pinned_mem_limit" {
			n, err := mib(f[3])
			if err != nil {
				return err
			}
			defaults[f[2]] = n
		}
	}
	if len(devices) == 0 || devices[0] == "" {
		return fail("the MPS daemon serves no device")
	}
	limit, ok := defaults[devices[0]]
	if !ok {
		limit = -1
	}
	if v := os.Getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); v != "" {
		for _, entry := range strings.Split(v, ",") {
			dev, value, found := strings.Cut(entry, "=")
			ordinal, err := strconv.Atoi(dev)
			if !found || err != nil || ordinal < 0 || ordinal >= len(devices) {
				return fail(fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s: invalid device %q (the server has %d)", v, dev, len(devices)))
			}
			n, err := mib(value)
			if err != nil {
				return err
			}
			// A client may lower the server's limit, never raise it.
			if ordinal == 0 && (limit < 0 || n < limit) {
				limit = n
			}
		}
	}
	line := fmt.Sprintf("client pid=%d device=%s limit=%dM threads=%s alloc=%dM", os.Getpid(), devices[0], limit, os.Getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), want)
	if limit >= 0 && want > limit {
		if err := record(log, line+" out of memory"); err != nil {
			return err
		}
		return &exitError{code: 2, msg: "CUDA error: out of memory"}
	}
	return record(log, line+" ok")
}

// mib parses a limit as MPS writes them: <n>M or <n>G.
func mib(v string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "G"):
		mult, v = 1024, strings.TrimSuffix(v, "G")
	case strings.HasSuffix(v, "M"):
		v = strings.TrimSuffix(v, "M")
	default:
		return 0, fail(fmt.Sprintf("memory limit %q: want <n>M or <n>G", v))
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fail(fmt.Sprintf("memory limit %q: %v", v, err))
	}
	return n * mult, nil
}

func record(log, line string) error {
	f, err := os.OpenFile(filepath.Join(log, "control.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, line)
		_ = f.Close()
	}
	if err != nil {
		return fail(err.Error())
	}
	return nil
}
