package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultStopTimeout is how long Process.Stop waits after SIGTERM before it sends SIGKILL.
const DefaultStopTimeout = 15 * time.Second

// Process is a program the harness started. It runs in its own process group, so signals reach
// its children too, and it gets SIGKILL if the test binary dies (PR_SET_PDEATHSIG), so a test
// that panics or times out leaves nothing running. Its stdout and stderr go to LogPath.
type Process struct {
	Name    string
	LogPath string
	// StopTimeout overrides DefaultStopTimeout for Stop.
	StopTimeout time.Duration

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	mu      sync.Mutex
}

// startProcess runs args[0] with args[1:], appending to logPath (a restarted program keeps one log
// with a header line per start). env is added to the harness's own environment.
func startProcess(name string, args, env []string, logPath string) (*Process, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("starting %s: no command", name)
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	fmt.Fprintf(f, "=== %s start: %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(args, " "))

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, args[0], err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().UTC().Format(time.RFC3339Nano), exitText(err))
		f.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// Pid is the process ID (also its process group ID).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit and returns its exit error (nil for status 0).
func (p *Process) Wait() error {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// ExitError is the exit error once the process exited (nil for status 0 or while running).
func (p *Process) ExitError() error {
	if !p.Exited() {
		return nil
	}
	return p.Wait()
}

// signal sends sig to the whole process group.
func (p *Process) signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s (pid %d): %w", p.Name, p.Pid(), err)
	}
	return nil
}

// Kill sends SIGKILL to the process group and waits for the process to exit: a crash, as far as
// the program is concerned.
func (p *Process) Kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// Stop sends SIGTERM to the process group, waits up to StopTimeout, then sends SIGKILL. It
// returns nil if the process is gone, whatever its exit status.
func (p *Process) Stop() error {
	if p.Exited() {
		return nil
	}
	timeout := p.StopTimeout
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		// The leader is gone; make sure no child of it survives in the group.
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		return nil
	case <-time.After(timeout):
	}
	return p.Kill()
}

// LogTail returns the last n lines of the process's log.
func (p *Process) LogTail(n int) string { return logTail(p.LogPath, n) }

// logTail returns the last n lines of a file, reading at most its last 1 MiB.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const window = 1 << 20
	if st, err := f.Stat(); err == nil && st.Size() > window {
		_, _ = f.Seek(st.Size()-window, io.SeekStart)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(reading log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
