package sharing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// The runner: the process that runs one MPS control daemon for its whole life, wherever the
// daemon runs (a child process of the plugin, Processes, or a pod of its own, mpspod). It is the
// plugin's own binary with the subcommand DaemonCommand, so that a daemon needs nothing that
// the plugin's image does not have. It
//
//   - holds an exclusive lock on <dir>/runner.lock while it lives: whoever can take the lock knows
//     that no runner serves the directory, from any PID namespace (a flock belongs to the file,
//     not to a PID), and two runners never serve one directory;
//   - starts nvidia-cuda-mps-control -f (MPSControl, chrooted into the driver root), its child,
//     which dies with it (SIGKILL on the runner's death);
//   - waits until the daemon answers on its control pipe, gives it its limits, and only then
//     creates <dir>/ready;
//   - on <dir>/stop (AskToStop: the plugin stopping the daemon, Processes.Stop or the pod's
//     deletion by mpspod) quits the daemon, killing it if it does not end, and exits; when the
//     daemon ends by itself it exits with an error (its pod's container restarts it, or the
//     plugin's next Ensure does);
//   - on SIGTERM without <dir>/stop (its pod evicted by a drain, or deleted by someone else)
//     serves on until the stop file comes, its directory goes, or SIGKILL at the end of the
//     pod's grace period: the workloads it serves are evicted with it and keep their MPS
//     server while they terminate; their claims' unprepare then stops it.
//
// `probe` checks a daemon from outside: its control pipe answers, and with --ready also that a
// runner holds the lock and has declared it ready. `ctl` sends one command.

// DaemonCommand is the plugin binary's first argument that makes it an MPS daemon's runner
// (`run`), its probe (`probe`) or a client (`ctl`); RunDaemonCommand handles it.
const DaemonCommand = "mps-control-daemon"

// SelfExe is the runner binary Processes uses by default: the running plugin itself.
const SelfExe = "/proc/self/exe"

// Files of a daemon's directory that belong to its runner.
const (
	runnerLockFile = "runner.lock"
	readyFile      = "ready"
	stopFile       = "stop"
)

// DefaultCheckPeriod is how often a runner without a kubelet to probe it (Processes) checks that
// its daemon answers; after checkFailures misses in a row it ends the daemon.
const (
	DefaultCheckPeriod = 10 * time.Second
	checkFailures      = 3
)

// startTimeout bounds a daemon's start until its pipe answers; stopTimeout its end after quit.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 5 * time.Second
)

// DaemonSpec is one MPS control daemon as MPS asks a Daemons implementation for it.
type DaemonSpec struct {
	// Key names the daemon: a claim's UID, or a GPU's UUID for the daemon of its shares.
	Key string
	// Dir is its directory, <MPS.Root>/<Key>, the same path on the host, in the plugin and in
	// the runner: pipe/, log/, shm/ (a tmpfs, the daemon's /dev/shm), and the runner's files.
	Dir string
	// Devices are the GPU (or MIG device) UUIDs it serves (CUDA_VISIBLE_DEVICES).
	Devices []string
	// Limits are its defaults for its clients.
	Limits MPSLimits
}

// RunnerArgs are the arguments of the plugin binary for subcommand sub ("run" or "probe") of
// the daemon s, with its control binary run as c; checkPeriod (run) is how often the runner
// checks its daemon itself, 0 for never (a pod's kubelet probes it). ready (probe) asks for
// readiness rather than liveness. The arguments are sorted where they come from a map, so that
// a daemon's pod spec is the same whoever builds it.
func RunnerArgs(sub string, s DaemonSpec, c MPSControl, checkPeriod time.Duration, ready bool) []string {
	args := []string{DaemonCommand, sub, "--dir=" + s.Dir, "--control=" + c.Path}
	if c.Root != "" {
		args = append(args, "--control-root="+c.Root)
	}
	if sub != "run" {
		if ready {
			args = append(args, "--ready")
		}
		return args
	}
	if len(s.Devices) > 0 {
		args = append(args, "--devices="+strings.Join(s.Devices, ","))
	}
	if p := s.Limits.ActiveThreadPercentage; p > 0 {
		args = append(args, "--active-thread-percentage="+strconv.Itoa(int(p)))
	}
	for _, u := range slices.Sorted(maps.Keys(s.Limits.PinnedMemoryMiB)) {
		args = append(args, fmt.Sprintf("--pinned-memory-mib=%s=%d", u, s.Limits.PinnedMemoryMiB[u]))
	}
	if checkPeriod > 0 {
		args = append(args, "--check-period="+checkPeriod.String())
	}
	return args
}

// runner is what RunnerArgs encode.
type runner struct {
	spec        DaemonSpec
	control     MPSControl
	checkPeriod time.Duration
	ready       bool
}

// parseRunner decodes the arguments after DaemonCommand and the subcommand; rest are the
// positional arguments (ctl's command).
func parseRunner(sub string, args []string) (r runner, rest []string, err error) {
	fs := pflag.NewFlagSet(DaemonCommand+" "+sub, pflag.ContinueOnError)
	fs.StringVar(&r.spec.Dir, "dir", "", "The daemon's directory (pipe/, log/, shm/).")
	fs.StringVar(&r.control.Path, "control", DefaultControlPath, "nvidia-cuda-mps-control, inside --control-root.")
	fs.StringVar(&r.control.Root, "control-root", "", "Driver root to run the control binary chrooted into; empty: none.")
	fs.StringSliceVar(&r.spec.Devices, "devices", nil, "CUDA_VISIBLE_DEVICES of the daemon (run).")
	var threads int32
	fs.Int32Var(&threads, "active-thread-percentage", 0, "set_default_active_thread_percentage (run); 0 for none.")
	var pinned []string
	fs.StringArrayVar(&pinned, "pinned-memory-mib", nil, "<uuid>=<MiB>: set_default_device_pinned_mem_limit (run), repeated.")
	fs.DurationVar(&r.checkPeriod, "check-period", 0, "How often the runner checks that its daemon answers (run); 0: never.")
	fs.BoolVar(&r.ready, "ready", false, "Probe readiness (a runner declared the daemon ready) besides liveness (probe).")
	if err := fs.Parse(args); err != nil {
		return r, nil, err
	}
	if r.spec.Dir == "" || !filepath.IsAbs(r.spec.Dir) {
		return r, nil, fmt.Errorf("--dir must be an absolute path, got %q", r.spec.Dir)
	}
	r.spec.Limits.ActiveThreadPercentage = threads
	for _, p := range pinned {
		u, v, ok := strings.Cut(p, "=")
		mib, err := strconv.ParseInt(v, 10, 64)
		if !ok || u == "" || err != nil || mib <= 0 {
			return r, nil, fmt.Errorf("--pinned-memory-mib %q: want <uuid>=<MiB>", p)
		}
		if r.spec.Limits.PinnedMemoryMiB == nil {
			r.spec.Limits.PinnedMemoryMiB = map[string]int64{}
		}
		r.spec.Limits.PinnedMemoryMiB[u] = mib
	}
	return r, fs.Args(), nil
}

// RunDaemonCommand runs the subcommand when args (os.Args) start with DaemonCommand, and exits
// with its status; otherwise it returns at once. The plugin's main calls it before anything
// else, and so do the test binaries that start runners.
func RunDaemonCommand(args []string) {
	if len(args) < 2 || args[1] != DaemonCommand {
		return
	}
	os.Exit(daemonCommand(args[2:]))
}

func daemonCommand(args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(os.Stderr, "usage: %s run|probe|ctl --dir=<dir> [flags] [-- command]\n", DaemonCommand)
		return 2
	}
	r, rest, err := parseRunner(args[0], args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", DaemonCommand, args[0], err)
		return 2
	}
	ctx := klog.NewContext(context.Background(), klog.Background().WithValues("dir", r.spec.Dir))
	switch args[0] {
	case "run":
		err = r.run(ctx)
	case "probe":
		err = r.probe(ctx)
	case "ctl":
		var out string
		if err = r.control.prepareRoot(r.spec.Dir, false); err == nil {
			out, err = r.control.Command(ctx, r.spec.Dir, strings.Join(rest, " "))
		}
		fmt.Print(out)
	default:
		err = fmt.Errorf("unknown subcommand %q (run, probe or ctl)", args[0])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", DaemonCommand, args[0], err)
		return 1
	}
	return 0
}

// probe succeeds when the daemon answers and, with ready, a runner serves it and declared it
// ready.
func (r runner) probe(ctx context.Context) error {
	if r.ready {
		if !runnerAlive(r.spec.Dir) {
			return errors.New("no runner serves this MPS daemon directory")
		}
		if _, err := os.Stat(filepath.Join(r.spec.Dir, readyFile)); err != nil {
			return fmt.Errorf("the MPS daemon is not ready: %w", err)
		}
	}
	if err := r.control.prepareRoot(r.spec.Dir, false); err != nil {
		return err
	}
	if _, err := r.control.Command(ctx, r.spec.Dir, "get_server_list"); err != nil {
		return fmt.Errorf("the MPS control daemon does not answer: %w", err)
	}
	return nil
}

func (r runner) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	// The daemon gets SIGKILL when the thread that started it ends; this one never does.
	runtime.LockOSThread()
	lock, err := lockRunner(r.spec.Dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	for _, f := range []string{readyFile, stopFile} {
		if err := os.Remove(filepath.Join(r.spec.Dir, f)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := r.control.prepareRoot(r.spec.Dir, true); err != nil {
		return err
	}
	// A daemon that answers although no runner served the directory (one an earlier plugin
	// version started as its own child) is no one's to account for: it goes, so that this
	// runner's daemon is the only one on the pipe.
	if r.control.Answering(ctx, r.spec.Dir) {
		logger.Info("Quitting an MPS control daemon that no runner serves")
		_, _ = r.control.Command(ctx, r.spec.Dir, "quit")
		if !poll(startTimeout, func() bool { return !r.control.Answering(ctx, r.spec.Dir) }) {
			return errors.New("an MPS control daemon that no runner serves answers on the pipe and does not quit")
		}
	}
	cmd := r.control.cmd(context.Background(), r.spec.Dir, r.spec.Devices, "-f")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s -f: %w", r.control.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	kill := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	deadline := time.Now().Add(startTimeout)
	for !r.control.Answering(ctx, r.spec.Dir) {
		select {
		case err := <-exited:
			return fmt.Errorf("the MPS control daemon ended at start: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			kill()
			return fmt.Errorf("the MPS control daemon does not answer after %s", startTimeout)
		}
	}
	for _, c := range r.limitCommands() {
		if _, err := r.control.Command(ctx, r.spec.Dir, c); err != nil {
			kill()
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(r.spec.Dir, readyFile), nil, 0o644); err != nil {
		kill()
		return err
	}
	logger.Info("MPS control daemon ready", "pid", cmd.Process.Pid, "devices", r.spec.Devices)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	stopPoll := time.NewTicker(200 * time.Millisecond)
	defer stopPoll.Stop()
	var check <-chan time.Time
	if r.checkPeriod > 0 {
		t := time.NewTicker(r.checkPeriod)
		defer t.Stop()
		check = t.C
	}
	stop := func(why string) error {
		_ = os.Remove(filepath.Join(r.spec.Dir, readyFile))
		logger.Info("Stopping the MPS control daemon", "reason", why)
		_, _ = r.control.Command(ctx, r.spec.Dir, "quit")
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			logger.Info("The MPS control daemon did not quit; killing it", "after", stopTimeout)
			kill()
		}
		return nil
	}
	misses := 0
	terminating := false
	for {
		select {
		case err := <-exited:
			_ = os.Remove(filepath.Join(r.spec.Dir, readyFile))
			return fmt.Errorf("the MPS control daemon ended: %v", err)
		case s := <-sig:
			if stopAsked(r.spec.Dir) {
				return stop("asked to stop; " + s.String())
			}
			if !terminating {
				logger.Info("Terminating while the plugin has not stopped the MPS control daemon (an eviction?): serving until it does, or until the grace period ends", "signal", s.String())
			}
			terminating = true
		case <-stopPoll.C:
			if stopAsked(r.spec.Dir) {
				return stop("asked to stop")
			}
			if _, err := os.Stat(r.spec.Dir); terminating && os.IsNotExist(err) {
				return stop("its directory is gone")
			}
		case <-check:
			if r.control.Answering(ctx, r.spec.Dir) {
				misses = 0
				continue
			}
			if misses++; misses >= checkFailures {
				_ = os.Remove(filepath.Join(r.spec.Dir, readyFile))
				kill()
				return fmt.Errorf("the MPS control daemon did not answer %d times in a row; killed it", misses)
			}
		}
	}
}

// AskToStop asks the runner of the daemon in dir to stop it: at once if it runs, and so that a
// SIGTERM (its pod's deletion) ends it rather than leave it serving. A directory that is gone
// has no runner to ask.
func AskToStop(dir string) error {
	err := os.WriteFile(filepath.Join(dir, stopFile), nil, 0o644)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("asking the MPS daemon's runner to stop: %w", err)
	}
	return nil
}

// stopAsked reports whether the daemon in dir was asked to stop (AskToStop).
func stopAsked(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, stopFile))
	return err == nil
}

// limitCommands are the commands that give the daemon its limits.
func (r runner) limitCommands() []string {
	var cmds []string
	if p := r.spec.Limits.ActiveThreadPercentage; p > 0 {
		cmds = append(cmds, fmt.Sprintf("set_default_active_thread_percentage %d", p))
	}
	for _, u := range slices.Sorted(maps.Keys(r.spec.Limits.PinnedMemoryMiB)) {
		cmds = append(cmds, fmt.Sprintf("set_default_device_pinned_mem_limit %s %dM", u, r.spec.Limits.PinnedMemoryMiB[u]))
	}
	return cmds
}

// lockRunner takes dir's runner lock, waiting a while for a runner that is ending.
func lockRunner(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, runnerLockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("MPS runner lock: %w", err)
	}
	if poll(startTimeout, func() bool { return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil }) {
		return f, nil
	}
	_ = f.Close()
	return nil, fmt.Errorf("another runner serves the MPS daemon directory %s", dir)
}

// runnerAlive reports whether a runner holds dir's lock.
func runnerAlive(dir string) bool {
	f, err := os.Open(filepath.Join(dir, runnerLockFile))
	if err != nil {
		return false
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	return errors.Is(err, unix.EWOULDBLOCK)
}

// poll calls done every 50ms until it is true (true) or timeout passes (false).
func poll(timeout time.Duration, done func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}
