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
	"strings"
	"syscall"
	"time"
)

// Daemons runs MPS control daemons for MPS: where they run, and so how long they live. Every
// implementation runs the same runner (RunDaemonCommand) and knows a daemon only by its
// directory or an API object named after its key, never by a PID, so that a plugin in another
// PID namespace (the new pod of a rolling update) finds the same daemons. Calls come with the
// node lock held, but for the start of a new claim's daemon (Ready, Stop, Start), which the
// plugin awaits without it while the claim's PrepareStarted record keeps every other claim off
// that daemon (its own unprepare may still stop it: the prepare then fails and cleans up).
type Daemons interface {
	// Ready reports whether the daemon runs and answers on its control pipe, with its limits
	// given. It may wait a while for one that is starting.
	Ready(ctx context.Context, s DaemonSpec) (bool, error)
	// Start starts the daemon, whose directory and tmpfs exist, and returns once it is ready,
	// or with an error that says why not.
	Start(ctx context.Context, s DaemonSpec) error
	// Stop ends whatever runs of the daemon and returns once it is gone; a daemon that does not
	// run is stopped.
	Stop(ctx context.Context, s DaemonSpec) error
	// Keys are the keys of the daemons that exist besides those with a directory under
	// MPS.Root (pods, for example), for the sweep of those no claim counts on.
	Keys(ctx context.Context) ([]string, error)
}

// Processes runs each daemon's runner as a child process of the plugin, in its own session and
// mount namespace, for a plugin that runs as a process on the host (the e2e harness runs it so).
// Lifetime: the runner outlives the plugin process (a kill -9 or restart of it), not the
// container or machine it runs in: in a container, a restart of the container ends every
// daemon, as does an upgrade of a DaemonSet's pod; Pods (pkg/sharing/mpspod) is for that. A
// later plugin (Ensure) finds a runner by its lock and a daemon by its pipe answering, in any PID
// namespace, and starts what is gone again.
type Processes struct {
	// Control runs nvidia-cuda-mps-control, as this process sees it.
	Control MPSControl
	// Self is the binary that runs RunDaemonCommand; default SelfExe.
	Self string
	// CheckPeriod is how often a runner checks that its daemon answers; default
	// DefaultCheckPeriod.
	CheckPeriod time.Duration
}

// runnerOutput is the file under a daemon's log directory that takes its runner's output and
// the daemon's.
const runnerOutput = "daemon.out"

// Ready implements Daemons: a runner holds the directory's lock, has declared the daemon ready,
// and the daemon answers.
func (p Processes) Ready(ctx context.Context, s DaemonSpec) (bool, error) {
	if _, err := os.Stat(s.Dir); os.IsNotExist(err) {
		return false, nil
	}
	return p.self(ctx, s, "probe", true) == nil, nil
}

// self runs the runner binary's probe (ready: readiness) or ctl (args: the command) in a mount
// namespace of its own, where it may mount the daemon's directory into the driver root.
func (p Processes) self(ctx context.Context, s DaemonSpec, sub string, ready bool, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*commandTimeout)
	defer cancel()
	argv := RunnerArgs(sub, s, p.Control, 0, ready)
	if len(args) > 0 {
		argv = append(append(argv, "--"), args...)
	}
	cmd := exec.CommandContext(ctx, cmp.Or(p.Self, SelfExe), argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Start implements Daemons.
func (p Processes) Start(ctx context.Context, s DaemonSpec) error {
	for _, f := range []string{readyFile, stopFile} {
		if err := os.Remove(filepath.Join(s.Dir, f)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	outPath := filepath.Join(s.Dir, "log", runnerOutput)
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("MPS daemon log: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(cmp.Or(p.Self, SelfExe), RunnerArgs("run", s, p.Control, cmp.Or(p.CheckPeriod, DefaultCheckPeriod), false)...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own session, to outlive the plugin; its own mount namespace, for the daemon's
	// /dev/shm and its directory in the driver root (exec makes / private there).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Unshareflags: syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the MPS daemon's runner: %w", err)
	}
	// Reap it if it ends while this process lives; after a restart init does.
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	ready := func() bool {
		_, err := os.Stat(filepath.Join(s.Dir, readyFile))
		return err == nil
	}
	deadline := time.Now().Add(startTimeout + commandTimeout)
	for !ready() {
		select {
		case <-exited:
			return fmt.Errorf("MPS control daemon did not start: %s", lastLine(outPath))
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("MPS control daemon did not start in time: %s", lastLine(outPath))
		}
	}
	return nil
}

// Stop implements Daemons: it asks the runner to stop (<dir>/stop) and waits until its lock is
// free. A daemon that answers although no runner serves it (one an earlier plugin version
// started) is sent quit.
func (p Processes) Stop(ctx context.Context, s DaemonSpec) error {
	if _, err := os.Stat(s.Dir); os.IsNotExist(err) {
		return nil
	}
	if runnerAlive(s.Dir) {
		if err := AskToStop(s.Dir); err != nil {
			return err
		}
		if !poll(stopTimeout+2*commandTimeout, func() bool { return !runnerAlive(s.Dir) }) {
			return errors.New("the MPS control daemon's runner does not stop")
		}
		return nil
	}
	if p.self(ctx, s, "probe", false) != nil {
		return nil
	}
	_ = p.self(ctx, s, "ctl", false, "quit")
	if !poll(stopTimeout, func() bool { return p.self(ctx, s, "probe", false) != nil }) {
		return errors.New("an MPS control daemon that no runner serves answers on the pipe and does not quit")
	}
	return nil
}

// Keys implements Daemons: every runner has a directory under MPS.Root.
func (Processes) Keys(context.Context) ([]string, error) { return nil, nil }

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
