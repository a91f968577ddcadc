package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/smi"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestDriverRootTools: the mock's driver root, written with the built tools, holds them under
// each driver binary's name, and each runs as its name says. Its nvidia-smi lists exactly the
// GPUs whose nodes it sees, by what the mock's NVML said when it wrote the root.
func TestDriverRootTools(t *testing.T) {
	tools := standin.Build(t, standin.MockTools, "accel-dra-mock-nvidia")
	srv, err := nvmlmock.NewServer("h100-8x-2numa", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := srv.WriteDriverRoot(root, nvmlmock.WithTools(tools)); err != nil {
		t.Fatal(err)
	}
	uuid := func(minor int) string {
		for _, d := range srv.Devices {
			if m, _ := d.GetMinorNumber(); m == minor {
				u, _ := d.GetUUID()
				return u
			}
		}
		t.Fatalf("no GPU with minor %d", minor)
		return ""
	}
	run := func(dev, name string, args ...string) (string, int) {
		cmd := exec.Command(filepath.Join(root, "usr/bin", name), args...)
		cmd.Env = append(os.Environ(), smi.DevEnv+"="+dev)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("%s: %v", name, err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	for _, tc := range []struct {
		name     string
		minors   []int
		want     string
		wantCode int
	}{
		{"no GPU", nil, "No devices were found\n", 6},
		{"one GPU", []int{5}, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + uuid(5) + ")\n", 0},
		{"two GPUs", []int{6, 2}, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + uuid(2) + ")\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: " + uuid(6) + ")\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := t.TempDir()
			for _, m := range tc.minors {
				standin.Mknod(t, filepath.Join(dev, "nvidia"+strconv.Itoa(m)), 195, uint32(m))
			}
			if out, code := run(dev, "nvidia-smi", "-L"); out != tc.want || code != tc.wantCode {
				t.Errorf("nvidia-smi -L: exit %d, %q; want exit %d, %q", code, out, tc.wantCode, tc.want)
			}
		})
	}
	t.Run("dispatch", func(t *testing.T) {
		dev := t.TempDir()
		if out, code := run(dev, "nvidia-debugdump", "--list"); code != 1 || !strings.Contains(out, "mock") {
			t.Errorf("nvidia-debugdump: exit %d, %q; want 1 and that it is the mock's", code, out)
		}
		if out, code := run(dev, "nvidia-cuda-mps-control"); code != 1 || !strings.Contains(out, "CUDA_MPS_PIPE_DIRECTORY") {
			t.Errorf("nvidia-cuda-mps-control without its environment: exit %d, %q; want 1", code, out)
		}
		// Under any other name it says what it is and which names it answers to.
		cmd := exec.Command(tools)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); cmd.ProcessState.ExitCode() != 2 || !strings.Contains(out.String(), "nvidia-smi") {
			t.Errorf("accel-dra-mock-nvidia: %v, %q; want exit 2 and the tools' names", err, out.String())
		}
	})
}

// mpsDaemonEnv marks the copy of the test binary that runs the MPS daemon: the control binary.
const mpsDaemonEnv = "ACCEL_DRA_TEST_MPS_DAEMON"

// TestMPSServerPerUser: the MPS stand-in starts a server per client user, as the real daemon
// does (it setuid()s to the client's UID from the control socket's peer credentials), and that
// server reaches the pipe directory by path as that user: a pipe directory under a parent of
// mode 0750 (as the kubelet makes /var/lib/kubelet and its plugins directory) refuses a
// non-root client with CUDA's connection error, one whose parents anyone may traverse (NVIDIA's
// /tmp/nvidia-mps) serves it; root is served in both. Needs root of the machine to setuid.
func TestMPSServerPerUser(t *testing.T) {
	// The daemon, run by a copy of this binary in a mount namespace of its own, gets a /dev/shm
	// of its own, so that its marker file stays off the machine's.
	if control := os.Getenv(mpsDaemonEnv); control != "" {
		if err := syscall.Mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m"); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println(syscall.Exec(control, []string{control, "-f"}, os.Environ()))
		os.Exit(1)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to start a server as another user (CI runs as root)")
		}
		t.Skip("needs root to start a server as another user")
	}
	tools := standin.Build(t, standin.MockTools, "accel-dra-mock-nvidia")
	// Where user 1000 can run them: t.TempDir()'s parent is private.
	bin, err := os.MkdirTemp("", "mpsbin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nvidia-cuda-mps-control", "nvidia-cuda-mps-server"} {
		if err := os.Link(tools, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	control := filepath.Join(bin, "nvidia-cuda-mps-control")
	for _, tc := range []struct {
		name       string
		parentMode os.FileMode
		uid        uint32
		wantErr    string
	}{
		{"root, parent 0750", 0o750, 0, ""},
		{"user 1000, parent 0750", 0o750, 1000, "MPS client failed to connect to the MPS control daemon or the MPS server"},
		{"user 1000, parent 0755", 0o755, 1000, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Short paths: a socket address holds 107 bytes.
			top, err := os.MkdirTemp("", "mps")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(top) })
			if err := os.Chmod(top, 0o755); err != nil {
				t.Fatal(err)
			}
			parent, log := filepath.Join(top, "p"), filepath.Join(top, "log")
			pipe := filepath.Join(parent, "pipe")
			for _, d := range []string{pipe, log} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(parent, tc.parentMode); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_LOG_DIRECTORY="+log, "CUDA_VISIBLE_DEVICES=GPU-a")
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			daemon := exec.Command(self, "-test.run=^TestMPSServerPerUser$")
			daemon.Env = append(env, mpsDaemonEnv+"="+control)
			daemon.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
			if err := daemon.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = daemon.Process.Kill(); _ = daemon.Wait() })
			for i := 0; ; i++ {
				if _, err := os.Stat(filepath.Join(pipe, "control")); err == nil {
					break
				}
				if i > 200 {
					t.Fatal("the daemon did not listen")
				}
				time.Sleep(10 * time.Millisecond)
			}
			// The client reaches the daemon by a path of its own, as a container does through
			// its bind mount of the pipe directory: a link to the socket in a directory anyone
			// may traverse. Its server reaches it by the daemon's path.
			clientPipe := filepath.Join(top, "c")
			if err := os.Mkdir(clientPipe, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(filepath.Join(pipe, "control"), filepath.Join(clientPipe, "control")); err != nil {
				t.Fatal(err)
			}
			client := exec.Command(control, "alloc", "64")
			client.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+clientPipe)
			client.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: tc.uid, Gid: tc.uid, Groups: []uint32{}}}
			out, err := client.CombinedOutput()
			logText, _ := os.ReadFile(filepath.Join(log, "control.log"))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("alloc as user %d: %v, %s\ndaemon log:\n%s", tc.uid, err, out, logText)
			case tc.wantErr != "" && (err == nil || !strings.Contains(string(out), tc.wantErr)):
				t.Errorf("alloc as user %d: %v, %q; want it to fail with %q", tc.uid, err, out, tc.wantErr)
			}
			t.Logf("alloc as user %d: %s", tc.uid, strings.TrimSpace(string(out)))
			wantLog := fmt.Sprintf("server started uid=%d", tc.uid)
			if tc.wantErr != "" {
				wantLog = fmt.Sprintf("server uid=%d failed:", tc.uid)
			}
			if !strings.Contains(string(logText), wantLog) {
				t.Errorf("daemon log lacks %q:\n%s", wantLog, logText)
			}
		})
	}
}
