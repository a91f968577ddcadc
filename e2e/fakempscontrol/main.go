// Command fakempscontrol is the stand-in for nvidia-cuda-mps-control on mock nodes
// (docs/sharing.md). As a daemon (`-f`, foreground) it creates $CUDA_MPS_PIPE_DIRECTORY/control,
// records its start and its CUDA_VISIBLE_DEVICES in $CUDA_MPS_LOG_DIRECTORY/control.log, and runs
// until a client sends `quit` (or it is killed). Like the real daemon's server, it uses /dev/shm:
// it writes the file ShmMarker there (holding its pipe directory) and logs the device and inode
// of its /dev/shm ("daemon shm dev=<n> ino=<n>"), so that tests can check that it is the claim's
// shm directory, which the claim's containers get. As a client (no arguments) it appends each
// command it reads on stdin to $CUDA_MPS_LOG_DIRECTORY/control.log, as the real daemon logs
// them, and for `quit` ends the daemon whose pid is in <pipe directory>/../pid.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ShmMarker is the file the daemon writes into its /dev/shm.
const ShmMarker = "accel-dra-fakempscontrol"

func main() {
	pipe, log := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	if pipe == "" || log == "" {
		fail("CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY must be set")
	}
	switch {
	case len(os.Args) == 2 && os.Args[1] == "-f":
		record(log, fmt.Sprintf("daemon started pid=%d CUDA_VISIBLE_DEVICES=%s", os.Getpid(), os.Getenv("CUDA_VISIBLE_DEVICES")))
		var st syscall.Stat_t
		if err := syscall.Stat("/dev/shm", &st); err != nil {
			fail(err.Error())
		}
		record(log, fmt.Sprintf("daemon shm dev=%d ino=%d", st.Dev, st.Ino))
		if err := os.WriteFile(filepath.Join("/dev/shm", ShmMarker), []byte(pipe+"\n"), 0o644); err != nil {
			fail(err.Error())
		}
		if err := os.WriteFile(filepath.Join(pipe, "control"), nil, 0o600); err != nil {
			fail(err.Error())
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		record(log, "daemon exiting")
		_ = os.Remove(filepath.Join(pipe, "control"))
	case len(os.Args) == 1:
		if _, err := os.Stat(filepath.Join(pipe, "control")); err != nil {
			fail("cannot find MPS control daemon process")
		}
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			c := strings.TrimSpace(sc.Text())
			if c == "" {
				continue
			}
			record(log, "command "+c)
			if c == "quit" {
				b, err := os.ReadFile(filepath.Join(filepath.Dir(pipe), "pid"))
				if err != nil {
					fail(err.Error())
				}
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	default:
		fail(fmt.Sprintf("unsupported arguments %q", os.Args[1:]))
	}
}

func record(log, line string) {
	f, err := os.OpenFile(filepath.Join(log, "control.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, line)
		_ = f.Close()
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "fakempscontrol:", msg)
	os.Exit(1)
}
