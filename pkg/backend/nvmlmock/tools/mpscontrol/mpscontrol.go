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
// As `alloc <MiB>` it stands in for a CUDA process of a container that the daemon serves. As
// the real daemon does for a new client (nvidia-cuda-mps-control(1)), the daemon starts an MPS
// server (nvidia-cuda-mps-server, this binary under that name) with the client's user ID, which
// it reads from the control socket's peer credentials: it forks, setuid()s and execs the server,
// which connects to the daemon through the pipe directory by path, as that user
// (bottlerocket-os/bottlerocket#4673 shows the real server's system calls). A server that cannot
// reach the pipe directory fails, and the client with CUDA's CUDA_ERROR_MPS_CONNECTION_FAILED
// message (exit 1). The daemon then applies the pinned memory limit as an MPS server does: the
// client's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("<ordinal>=<n>M|G", ordinals of the devices the
// daemon serves, by its CUDA_VISIBLE_DEVICES), bounded by the daemon's
// set_default_device_pinned_mem_limit for that device. An allocation above the limit fails
// (exit 2, "out of memory"); a limit naming a device the daemon does not serve is an error
// (exit 1). The daemon logs each client and server ("new client pid=<n> uid=<n>", "server
// started uid=<n>" or "server uid=<n> failed: ...", "client ... limit=<n>M ..."); the client
// needs only the pipe directory, as a real one.
package mpscontrol

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
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
	if pipe == "" {
		return fail("CUDA_MPS_PIPE_DIRECTORY must be set")
	}
	switch {
	case len(args) == 1 && args[0] == "-f":
		if log == "" {
			return fail("CUDA_MPS_LOG_DIRECTORY must be set for the daemon")
		}
		return daemon(pipe, log)
	case len(args) == 0:
		return client(pipe)
	case len(args) == 2 && args[0] == "alloc":
		want, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return fail("alloc: " + err.Error())
		}
		return alloc(pipe, want)
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
	// Clients of every user connect to the real daemon (its log says "NEW CLIENT <pid> from
	// user <uid>", bottlerocket-os/bottlerocket#4673); what keeps a user out is the path to
	// the pipe directory, not the socket.
	if err := os.Chmod("control", 0o666); err != nil {
		return fail(err.Error())
	}
	d := &daemonState{pipe: pipe, log: log, devices: strings.Split(os.Getenv("CUDA_VISIBLE_DEVICES"), ","), defaults: map[string]int64{}, quit: make(chan struct{})}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			// A client waits for the server of its user, which connects to this socket too.
			go d.serve(conn)
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case <-d.quit:
	}
	err = record(log, "daemon exiting")
	_ = l.Close()
	return err
}

// daemonState is what the daemon keeps while it runs: the defaults it was given.
type daemonState struct {
	pipe, log string
	devices   []string
	mu        sync.Mutex
	defaults  map[string]int64
	quitOnce  sync.Once
	quit      chan struct{}
}

// clientPrefix starts the line a client (alloc) sends: the stand-in's own protocol for what a
// CUDA client asks of the daemon and its server.
const clientPrefix = "client-alloc "

// serverPrefix starts the line a server sends when it has started.
const serverPrefix = "server-started "

// serve answers one connection: a client's request, a server's start, or the commands of
// nvidia-cuda-mps-control.
func (d *daemonState) serve(conn net.Conn) {
	defer conn.Close()
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		c := strings.TrimSpace(sc.Text())
		switch {
		case c == "":
			continue
		case strings.HasPrefix(c, clientPrefix):
			d.client(conn, strings.TrimPrefix(c, clientPrefix))
			return
		case strings.HasPrefix(c, serverPrefix):
			_ = record(d.log, "server started "+strings.TrimPrefix(c, serverPrefix))
			return
		}
		_ = record(d.log, "command "+c)
		// get_server_list: no server runs between clients, so the list is empty.
		if f := strings.Fields(c); len(f) == 3 && f[0] == "set_default_device_pinned_mem_limit" {
			if n, err := mib(f[2]); err == nil {
				d.mu.Lock()
				d.defaults[f[1]] = n
				d.mu.Unlock()
			}
		}
		if c == "quit" {
			d.quitOnce.Do(func() { close(d.quit) })
		}
	}
}

// client serves an allocation: as the real daemon does for a new client, it starts an MPS
// server with the client's user ID (from the socket's peer credentials) and the daemon's own
// environment, which must reach the pipe directory as that user; then it applies the limits.
// It answers "ok", "oom" or "error <why>".
func (d *daemonState) client(conn net.Conn, request string) {
	answer := func(s string) { _, _ = fmt.Fprintln(conn, s) }
	cred, err := peerCred(conn)
	if err != nil {
		answer("error " + err.Error())
		return
	}
	_ = record(d.log, fmt.Sprintf("new client pid=%d uid=%d", cred.Pid, cred.Uid))
	if err := startServer(cred.Uid, cred.Gid); err != nil {
		_ = record(d.log, fmt.Sprintf("server uid=%d failed: %v", cred.Uid, err))
		answer(fmt.Sprintf("error the MPS server for user %d did not start: %v", cred.Uid, err))
		return
	}
	f := strings.Fields(request)
	if len(f) < 1 {
		answer("error bad request")
		return
	}
	want, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		answer("error " + err.Error())
		return
	}
	env := map[string]string{}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if len(d.devices) == 0 || d.devices[0] == "" {
		answer("error the MPS daemon serves no device")
		return
	}
	d.mu.Lock()
	limit, ok := d.defaults[d.devices[0]]
	d.mu.Unlock()
	if !ok {
		limit = -1
	}
	if v := env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; v != "" {
		for _, entry := range strings.Split(v, ",") {
			dev, value, found := strings.Cut(entry, "=")
			ordinal, err := strconv.Atoi(dev)
			if !found || err != nil || ordinal < 0 || ordinal >= len(d.devices) {
				answer(fmt.Sprintf("error CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s: invalid device %q (the server has %d)", v, dev, len(d.devices)))
				return
			}
			n, err := mib(value)
			if err != nil {
				answer("error " + err.Error())
				return
			}
			// A client may lower the server's limit, never raise it.
			if ordinal == 0 && (limit < 0 || n < limit) {
				limit = n
			}
		}
	}
	line := fmt.Sprintf("client pid=%d uid=%d device=%s limit=%dM threads=%s alloc=%dM", cred.Pid, cred.Uid, d.devices[0], limit, env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], want)
	if limit >= 0 && want > limit {
		_ = record(d.log, line+" out of memory")
		answer("oom")
		return
	}
	_ = record(d.log, line+" ok")
	answer("ok")
}

// peerCred is the user of the process at the other end of conn.
func peerCred(conn net.Conn) (*unix.Ucred, error) {
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, credErr
}

// startServer runs nvidia-cuda-mps-server (this binary under that name, as the driver installs
// it beside the control binary) as user uid, as the real daemon does: it forks, setuid()s to
// the client's user and execs the server, which then opens the pipe directory by path as that
// user. A server that cannot reach it fails, and so does the client's first CUDA call.
func startServer(uid, gid uint32) error {
	self, err := exec.LookPath(os.Args[0])
	if err != nil {
		return err
	}
	// Stdin of its own: a driver root it runs chrooted into may have no /dev/null.
	cmd := &exec.Cmd{Path: self, Args: []string{"nvidia-cuda-mps-server"}, Env: os.Environ(), Dir: "/", Stdin: strings.NewReader("")}
	if uid != uint32(os.Getuid()) || gid != uint32(os.Getgid()) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ServerMain is nvidia-cuda-mps-server: started by the daemon with its environment, it
// reaches the daemon through the pipe directory, as its user, and says that it started. Run
// by anyone else (no CUDA_MPS_PIPE_DIRECTORY) it has nothing to serve.
func ServerMain(args []string) int {
	pipe := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if pipe == "" || len(args) > 0 {
		fmt.Fprintln(os.Stderr, "nvidia-cuda-mps-server (accel-dra mock): started by nvidia-cuda-mps-control only")
		return 1
	}
	conn, err := dial(pipe)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-server (accel-dra mock): user %d: %v\n", os.Getuid(), err)
		return 1
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "%suid=%d\n", serverPrefix, os.Getuid()); err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-cuda-mps-server (accel-dra mock): %v\n", err)
		return 1
	}
	return 0
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

// connectionFailed is CUDA's message for CUDA_ERROR_MPS_CONNECTION_FAILED, what a CUDA call
// returns when the daemon or the server cannot be reached.
const connectionFailed = "CUDA error: MPS client failed to connect to the MPS control daemon or the MPS server"

// alloc allocates want MiB on the client's device 0 under the limits a server would apply: it
// asks the daemon, which starts a server as the client's user, with the client's MPS variables.
func alloc(pipe string, want int64) error {
	conn, err := dial(pipe)
	if err != nil {
		return fail(connectionFailed + ": " + err.Error())
	}
	defer conn.Close()
	req := fmt.Sprintf("%s%d", clientPrefix, want)
	for _, k := range []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"} {
		if v := os.Getenv(k); v != "" {
			req += " " + k + "=" + v
		}
	}
	if _, err := fmt.Fprintln(conn, req); err != nil {
		return fail(connectionFailed + ": " + err.Error())
	}
	answer, err := bufio.NewReader(conn).ReadString('\n')
	answer = strings.TrimSpace(answer)
	switch {
	case answer == "ok":
		return nil
	case answer == "oom":
		return &exitError{code: 2, msg: "CUDA error: out of memory"}
	case strings.HasPrefix(answer, "error the MPS server"):
		return fail(connectionFailed + " (" + strings.TrimPrefix(answer, "error ") + ")")
	case strings.HasPrefix(answer, "error "):
		return fail(strings.TrimPrefix(answer, "error "))
	}
	return fail(fmt.Sprintf("%s: no answer from the daemon (%v)", connectionFailed, err))
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
