package sharing

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// newMPS is an MPS with the mock's nvidia-cuda-mps-control run by Processes, under a new root.
func newMPS(t *testing.T) (MPS, string) {
	t.Helper()
	standin.NeedMount(t)
	bin := standin.Build(t, standin.MockTools, "nvidia-cuda-mps-control")
	m := MPS{Root: t.TempDir(), Daemons: Processes{Control: MPSControl{Path: bin}}}
	t.Cleanup(func() {
		keys, _ := m.Keys(context.Background())
		for _, k := range keys {
			_ = m.Stop(context.Background(), k)
		}
	})
	return m, bin
}

// running is m.Running, failing t on an error.
func running(t *testing.T, m MPS, key string) bool {
	t.Helper()
	ok, err := m.Running(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// pids are the PIDs of the stand-in daemons that have started for key.
func pids(t *testing.T, m MPS, key string) []int {
	t.Helper()
	_, log := m.Dirs(key)
	return standin.MPSDaemonPIDs(t, log)
}

func TestMPSDaemon(t *testing.T) {
	m, bin := newMPS(t)
	ctx := context.Background()
	started, err := m.Ensure(ctx, "c1", []string{"GPU-a", "GPU-b"}, MPSLimits{ActiveThreadPercentage: 50, PinnedMemoryMiB: map[string]int64{"GPU-b": 10240}})
	if err != nil || !started {
		t.Fatalf("Ensure: started %v, %v", started, err)
	}
	if !running(t, m, "c1") {
		t.Fatal("daemon not running after Ensure")
	}
	_, logDir := m.Dirs("c1")
	log, err := os.ReadFile(filepath.Join(logDir, "control.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", "command set_default_active_thread_percentage 50", "command set_default_device_pinned_mem_limit GPU-b 10240M"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("daemon log lacks %q:\n%s", want, log)
		}
	}
	// The daemon's /dev/shm is the claim's tmpfs: its marker is there, and it saw that
	// directory's device and inode; the host's /dev/shm has no marker.
	shm := m.ShmDir("c1")
	if _, err := os.Stat(filepath.Join(shm, "accel-dra-fakempscontrol")); err != nil {
		t.Errorf("the daemon's /dev/shm is not the claim's shm directory: %v", err)
	}
	if _, err := os.Stat("/dev/shm/accel-dra-fakempscontrol"); !os.IsNotExist(err) {
		t.Errorf("the daemon wrote into the host's /dev/shm: %v", err)
	}
	if want := shmIdentity(t, shm); !strings.Contains(string(log), want) {
		t.Errorf("daemon log lacks %q (the claim's shm directory):\n%s", want, log)
	}
	// A second Ensure (a restarted plugin) adopts the running daemon, and its tmpfs.
	first := pids(t, m, "c1")
	if started, err := m.Ensure(ctx, "c1", []string{"GPU-a", "GPU-b"}, MPSLimits{}); err != nil || started {
		t.Errorf("second Ensure: started %v, %v; want the daemon adopted", started, err)
	}
	if again := pids(t, m, "c1"); !slices.Equal(again, first) {
		t.Errorf("daemons %v, were %v: the running one was not adopted", again, first)
	}
	if n := mounts(t, shm); n != 1 {
		t.Errorf("%d mounts at %s after adoption, want 1", n, shm)
	}
	// A second claim gets a tmpfs of its own.
	if _, err := m.Ensure(ctx, "c4", []string{"GPU-c"}, MPSLimits{}); err != nil {
		t.Fatal(err)
	}
	if a, b := shmIdentity(t, shm), shmIdentity(t, m.ShmDir("c4")); a == b {
		t.Errorf("two claims share one /dev/shm: %s", a)
	}
	if keys, err := m.Keys(ctx); err != nil || !slices.Equal(keys, []string{"c1", "c4"}) {
		t.Errorf("Keys = %v, %v", keys, err)
	}
	for _, c := range []string{"c4", "c1"} {
		if err := m.Stop(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if running(t, m, "c1") {
		t.Error("daemon still running after Stop")
	}
	if alive(first[0]) {
		t.Errorf("daemon process %d still alive after Stop", first[0])
	}
	if _, err := os.Stat(filepath.Join(m.Root, "c1")); !os.IsNotExist(err) {
		t.Errorf("claim directory left after Stop: %v", err)
	}
	for _, c := range []string{"c1", "c4"} {
		if n := mounts(t, m.ShmDir(c)); n != 0 {
			t.Errorf("%d mounts left at %s after Stop", n, m.ShmDir(c))
		}
	}
	if err := m.Stop(ctx, "c1"); err != nil {
		t.Errorf("Stop of a stopped claim: %v", err)
	}
	// A control binary that cannot start a daemon is an error that says why, and leaves
	// nothing.
	bad := MPS{Root: m.Root, Daemons: Processes{Control: MPSControl{Path: filepath.Join(filepath.Dir(bin), "missing")}}}
	if _, err := bad.Ensure(ctx, "c2", nil, MPSLimits{}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Ensure with a missing binary: %v, want an error naming it", err)
	}
	if _, err := os.Stat(filepath.Join(m.Root, "c2")); !os.IsNotExist(err) {
		t.Errorf("a daemon that did not start left its directory: %v", err)
	}
	if n := mounts(t, m.ShmDir("c2")); n != 0 {
		t.Errorf("a daemon that did not start left its tmpfs mounted")
	}
}

// TestMPSDaemonShmGone: a running daemon whose claim's tmpfs is no longer mounted is not
// adopted (containers prepared now would get another /dev/shm than it has) but replaced.
func TestMPSDaemonShmGone(t *testing.T) {
	m, _ := newMPS(t)
	ctx := context.Background()
	if _, err := m.Ensure(ctx, "c1", nil, MPSLimits{}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(m.ShmDir("c1"), 0); err != nil {
		t.Fatal(err)
	}
	started, err := m.Ensure(ctx, "c1", nil, MPSLimits{})
	if err != nil || !started {
		l, _ := os.ReadFile(filepath.Join(m.Root, "c1", "log", "control.log"))
		t.Fatalf("Ensure: started %v, %v; want a new daemon\n%s", started, err, l)
	}
	if p := pids(t, m, "c1"); len(p) != 2 || alive(p[0]) || !running(t, m, "c1") {
		t.Errorf("daemons %v (first alive %v), want the first replaced by a second that runs", p, len(p) > 0 && alive(p[0]))
	}
	if n := mounts(t, m.ShmDir("c1")); n != 1 {
		t.Errorf("%d mounts at the claim's shm directory, want 1", n)
	}
}

// TestMPSDaemonDies: a daemon that ends (killed, crashed) takes its runner with it, and is no
// longer running; the next Ensure starts a new one with its limits, on the same tmpfs.
func TestMPSDaemonDies(t *testing.T) {
	m, _ := newMPS(t)
	ctx := context.Background()
	limits := MPSLimits{ActiveThreadPercentage: 20}
	if _, err := m.Ensure(ctx, "c1", []string{"GPU-a"}, limits); err != nil {
		t.Fatal(err)
	}
	shm := shmIdentity(t, m.ShmDir("c1"))
	if err := syscall.Kill(pids(t, m, "c1")[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !poll(10*time.Second, func() bool { return !runnerAlive(filepath.Join(m.Root, "c1")) }) {
		t.Fatal("the runner outlived its daemon")
	}
	if running(t, m, "c1") {
		t.Fatal("a killed daemon counts as running")
	}
	if started, err := m.Ensure(ctx, "c1", []string{"GPU-a"}, limits); err != nil || !started {
		t.Fatalf("Ensure after the daemon died: started %v, %v", started, err)
	}
	_, logDir := m.Dirs("c1")
	log, _ := os.ReadFile(filepath.Join(logDir, "control.log"))
	if n := strings.Count(string(log), "command set_default_active_thread_percentage 20"); n != 2 {
		t.Errorf("limits given %d times, want once to each daemon:\n%s", n, log)
	}
	if n := strings.Count(string(log), shm); n != 2 {
		t.Errorf("%d daemons on the claim's tmpfs (%s), want both:\n%s", n, shm, log)
	}
}

// oldDaemonEnv marks the copy of the test binary that TestMPSDaemonWithoutRunner runs as a
// daemon without runner: its directory and the control binary.
const oldDaemonEnv = "ACCEL_DRA_TEST_OLD_DAEMON"

// TestMPSDaemonWithoutRunner: a daemon that answers on a key's pipe although no runner serves it
// (one an earlier plugin version started as its own child) is not adopted: it is sent quit, and
// the runner's daemon is the only one on the pipe. Stop alone quits it too.
func TestMPSDaemonWithoutRunner(t *testing.T) {
	// The old daemon, run by a copy of this binary, gets the key's tmpfs as its /dev/shm, as
	// the earlier plugin's shim gave it.
	if spec := os.Getenv(oldDaemonEnv); spec != "" {
		dir, bin, _ := strings.Cut(spec, ":")
		c := MPSControl{Path: bin}
		if err := c.prepareRoot(dir, true); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		// Its pipe and log directories at their own paths, as the earlier version gave them.
		fmt.Println(syscall.Exec(bin, []string{bin, "-f"}, []string{"CUDA_MPS_PIPE_DIRECTORY=" + filepath.Join(dir, "pipe"), "CUDA_MPS_LOG_DIRECTORY=" + filepath.Join(dir, "log")}))
		os.Exit(1)
	}
	m, bin := newMPS(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, stopFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop first %v", stopFirst), func(t *testing.T) {
			key := fmt.Sprintf("old-%v", stopFirst)
			pipe, logDir := m.Dirs(key)
			for _, d := range []string{pipe, logDir} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := mountShm(m.ShmDir(key), "8m"); err != nil {
				t.Fatal(err)
			}
			old := exec.Command(self, "-test.run=^TestMPSDaemonWithoutRunner$")
			old.Env = append(os.Environ(), oldDaemonEnv+"="+filepath.Join(m.Root, key)+":"+bin)
			old.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
			if err := old.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- old.Wait() }()
			if !poll(10*time.Second, func() bool { return answersAt(bin, pipe) }) {
				t.Fatal("the old daemon does not answer")
			}
			if running(t, m, key) {
				t.Error("a daemon without runner counts as running")
			}
			if stopFirst {
				if err := m.Stop(ctx, key); err != nil {
					t.Fatal(err)
				}
			} else if started, err := m.Ensure(ctx, key, nil, MPSLimits{}); err != nil || !started {
				t.Fatalf("Ensure: started %v, %v", started, err)
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the old daemon did not quit")
			}
			if stopFirst {
				return
			}
			if p := pids(t, m, key); len(p) != 2 || !running(t, m, key) {
				t.Errorf("daemons %v, want the old one and the runner's, which runs", p)
			}
		})
	}
}

// TestMPSDaemonChroot: with a driver root the daemon runs chrooted into it, sees its directory at
// its own path there and its tmpfs at the root's /dev/shm; none of those mounts reaches the
// caller's mount namespace, and nothing is written into the root's own /dev/shm.
func TestMPSDaemonChroot(t *testing.T) {
	m, bin := newMPS(t)
	root := t.TempDir()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, DefaultControlPath), b, 0o755); err != nil {
		t.Fatal(err)
	}
	m.Daemons = Processes{Control: MPSControl{Root: root, Path: DefaultControlPath}}
	ctx := context.Background()
	if _, err := m.Ensure(ctx, "c1", []string{"GPU-a"}, MPSLimits{ActiveThreadPercentage: 10}); err != nil {
		t.Fatal(err)
	}
	if !running(t, m, "c1") {
		t.Fatal("the chrooted daemon does not run")
	}
	_, logDir := m.Dirs("c1")
	log, _ := os.ReadFile(filepath.Join(logDir, "control.log"))
	for _, want := range []string{shmIdentity(t, m.ShmDir("c1")), strings.Replace(shmIdentity(t, root), "shm", "root", 1), "command set_default_active_thread_percentage 10"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("daemon log lacks %q:\n%s", want, log)
		}
	}
	inRoot := filepath.Join(root, m.Root, "c1")
	if n := mounts(t, inRoot) + mounts(t, filepath.Join(root, "dev/shm")); n != 0 {
		t.Errorf("%d of the daemon's mounts reached the caller's mount namespace", n)
	}
	if _, err := os.Stat(filepath.Join(root, "dev/shm", "accel-dra-fakempscontrol")); !os.IsNotExist(err) {
		t.Errorf("the daemon wrote into the root's own /dev/shm: %v", err)
	}
	if err := m.Stop(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
}

// TestRunnerArgs: what RunnerArgs encodes, the runner decodes, and bad arguments are errors.
func TestRunnerArgs(t *testing.T) {
	s := DaemonSpec{Key: "k", Dir: "/r/k", Devices: []string{"GPU-a", "GPU-b"},
		Limits: MPSLimits{ActiveThreadPercentage: 30, PinnedMemoryMiB: map[string]int64{"GPU-b": 2048, "GPU-a": 1024}}}
	c := MPSControl{Root: "/driver-root", Path: DefaultControlPath}
	args := RunnerArgs("run", s, c, time.Minute, false)
	want := "mps-control-daemon run --dir=/r/k --control=/usr/bin/nvidia-cuda-mps-control --control-root=/driver-root --devices=GPU-a,GPU-b --active-thread-percentage=30 --pinned-memory-mib=GPU-a=1024 --pinned-memory-mib=GPU-b=2048 --check-period=1m0s"
	if got := strings.Join(args, " "); got != want {
		t.Errorf("RunnerArgs = %q, want %q", got, want)
	}
	r, _, err := parseRunner(args[1], args[2:])
	if err != nil {
		t.Fatal(err)
	}
	s.Key = ""
	if fmt.Sprint(r.spec) != fmt.Sprint(s) || r.control != c || r.checkPeriod != time.Minute {
		t.Errorf("parsed %+v, want %+v %+v", r, s, c)
	}
	if got := strings.Join(RunnerArgs("probe", s, MPSControl{Path: "/bin/ctl"}, 0, true), " "); got != "mps-control-daemon probe --dir=/r/k --control=/bin/ctl --ready" {
		t.Errorf("probe args %q", got)
	}
	for _, bad := range [][]string{{"--dir=relative"}, {}, {"--dir=/d", "--pinned-memory-mib=GPU-a"}, {"--dir=/d", "--pinned-memory-mib=GPU-a=lots"}, {"--dir=/d", "--bogus"}} {
		if _, _, err := parseRunner("run", bad); err == nil {
			t.Errorf("parseRunner(%q) succeeded", bad)
		}
	}
	if code := daemonCommand([]string{"fly", "--dir=/d"}); code != 1 {
		t.Errorf("unknown subcommand: exit %d, want 1", code)
	}
}

// shmIdentity is how the mock's nvidia-cuda-mps-control logs a /dev/shm: the device and inode of dir.
func shmIdentity(t *testing.T, dir string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("daemon shm dev=%d ino=%d", st.Dev, st.Ino)
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && len(stat) > i+2 && stat[i+2] != 'Z'
}

// secondInstanceEnv marks the copy of the test binary that TestMPSAdoptionAcrossPIDNamespaces
// runs as the second plugin instance of a rolling update: the MPS root and control binary to
// ensure daemon "c1" with.
const secondInstanceEnv = "ACCEL_DRA_TEST_SECOND_INSTANCE"

// TestMPSAdoptionAcrossPIDNamespaces: the new pod of a rolling update with surge runs in a PID
// namespace of its own, where the old pod's processes are not. It must adopt the daemon that
// answers on the key's pipe, not take it for dead, delete its control pipe and start a second
// one. The second instance is a copy of this test binary in a new PID (and mount) namespace
// with its own /proc, as a container has.
func TestMPSAdoptionAcrossPIDNamespaces(t *testing.T) {
	if spec := os.Getenv(secondInstanceEnv); spec != "" {
		root, bin, _ := strings.Cut(spec, ":")
		if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
			fmt.Printf("SECOND-ERROR: mounting /proc: %v\n", err)
			return
		}
		m := MPS{Root: root, Daemons: Processes{Control: MPSControl{Path: bin}}}
		started, err := m.Ensure(context.Background(), "c1", []string{"GPU-a"}, MPSLimits{})
		fmt.Printf("SECOND-ENSURE: started=%v err=%v\n", started, err)
		return
	}
	m, bin := newMPS(t)
	ctx := context.Background()
	if _, err := m.Ensure(ctx, "c1", []string{"GPU-a"}, MPSLimits{}); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestMPSAdoptionAcrossPIDNamespaces$")
	cmd.Env = append(os.Environ(), secondInstanceEnv+"="+m.Root+":"+bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("second instance: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SECOND-ENSURE: started=false err=<nil>") {
		t.Errorf("the second instance did not adopt the running daemon:\n%s", out)
	}
	_, logDir := m.Dirs("c1")
	log, _ := os.ReadFile(filepath.Join(logDir, "control.log"))
	if n := strings.Count(string(log), "daemon started"); n != 1 {
		t.Errorf("%d daemons started on the key's pipe directory, want 1:\n%s", n, log)
	}
	if !running(t, m, "c1") {
		t.Error("the first instance's daemon no longer answers")
	}
}

// answersAt reports whether a daemon answers on the pipe directory pipe, asked by a client
// that names it by that path.
func answersAt(bin, pipe string) bool {
	cmd := exec.Command(bin)
	cmd.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe}
	cmd.Stdin = strings.NewReader("get_server_list\n")
	return cmd.Run() == nil
}

// TestRunnerServesAfterSIGTERM: a runner that gets SIGTERM without having been asked to stop
// (its pod evicted by kubectl drain) keeps its daemon serving, for the workloads that are
// evicted with it; once the plugin asks it to stop (the last claim unprepared) it quits the
// daemon and exits.
func TestRunnerServesAfterSIGTERM(t *testing.T) {
	m, _ := newMPS(t)
	ctx := context.Background()
	if _, err := m.Ensure(ctx, "evicted", []string{"GPU-a"}, MPSLimits{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(m.Root, "evicted")
	pid := runnerPID(t, dir)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if !runnerAlive(dir) || !running(t, m, "evicted") {
		t.Fatal("the runner ended its daemon on SIGTERM without having been asked to stop")
	}
	if err := AskToStop(dir); err != nil {
		t.Fatal(err)
	}
	if !poll(10*time.Second, func() bool { return !runnerAlive(dir) }) {
		t.Fatal("the runner did not stop when asked")
	}
	_, logDir := m.Dirs("evicted")
	if log, _ := os.ReadFile(filepath.Join(logDir, "control.log")); !strings.Contains(string(log), "daemon exiting") {
		t.Errorf("the daemon was not quit:\n%s", log)
	}
}

// runnerPID is the PID of the runner of the daemon directory dir, from /proc.
func runnerPID(t *testing.T, dir string) int {
	t.Helper()
	want := DaemonCommand + "\x00run\x00--dir=" + dir + "\x00"
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); strings.Contains(string(b), want) {
			return pid
		}
	}
	t.Fatalf("no runner for %s", dir)
	return 0
}
