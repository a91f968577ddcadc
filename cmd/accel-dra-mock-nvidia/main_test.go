package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
