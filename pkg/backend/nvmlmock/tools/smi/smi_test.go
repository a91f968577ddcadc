package smi

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/machine"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// testMachine has its GPUs' minor numbers in another order than their bus IDs (minor 0 sits on
// a higher bus than minor 1), as on machines whose driver numbered the GPUs in probe order, and a
// lost GPU.
var testMachine = machine.Machine{DriverVersion: "570.124.06", CUDAVersion: 12080, GPUs: []machine.GPU{
	{Minor: 0, UUID: "GPU-aaaa", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, PCIBusID: "00000000:1B:00.0"},
	{Minor: 1, UUID: "GPU-bbbb", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, PCIBusID: "00000000:0A:00.0"},
	{Minor: 2, UUID: "GPU-cccc", Name: "NVIDIA L4", MemoryMiB: 24576, PCIBusID: "00000000:2C:00.0"},
	{Minor: 3, PCIBusID: "00000000:3D:00.0", Lost: true},
}}

// env writes the machine description and a /dev holding nodes for the given minors.
func env(t *testing.T, m *machine.Machine, minors ...uint32) Env {
	t.Helper()
	dir := t.TempDir()
	e := Env{Dev: filepath.Join(dir, "dev"), Machine: filepath.Join(dir, "gpus.json"), Executable: filepath.Join(dir, "nvidia-smi")}
	if err := os.Mkdir(e.Dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, minor := range minors {
		standin.Mknod(t, filepath.Join(e.Dev, "nvidia"+strconv.Itoa(int(minor))), nvidiaMajor, minor)
	}
	if m != nil {
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(e.Machine, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func run(e Env, args ...string) (stdout, stderr string, code int) {
	var o, er bytes.Buffer
	e.Stdout, e.Stderr = &o, &er
	code = e.Run(args)
	return o.String(), er.String(), code
}

func TestVisibleGPUs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		minors []uint32
		// prepare changes the /dev after the nodes are made.
		prepare  func(t *testing.T, dev string)
		args     []string
		want     string
		wantCode int
	}{{
		name:     "no GPU node",
		args:     []string{"-L"},
		want:     "No devices were found\n",
		wantCode: 6,
	}, {
		name:   "one GPU",
		minors: []uint32{2},
		args:   []string{"-L"},
		want:   "GPU 0: NVIDIA L4 (UUID: GPU-cccc)\n",
	}, {
		name:   "two GPUs in PCI bus order, not minor order",
		minors: []uint32{0, 1},
		args:   []string{"--list-gpus"},
		want:   "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n",
	}, {
		name: "a regular file and a node of another device are not GPU nodes",
		prepare: func(t *testing.T, dev string) {
			if err := os.WriteFile(filepath.Join(dev, "nvidia0"), nil, 0o666); err != nil {
				t.Fatal(err)
			}
			standin.Mknod(t, filepath.Join(dev, "nvidia1"), 1, 3) // /dev/null's numbers
			standin.Mknod(t, filepath.Join(dev, "nvidia2"), nvidiaMajor, 0)
		},
		args:     []string{"-L"},
		want:     "No devices were found\n",
		wantCode: 6,
	}, {
		name:     "a lost GPU",
		minors:   []uint32{2, 3},
		args:     []string{"-L"},
		want:     "GPU 0: NVIDIA L4 (UUID: GPU-cccc)\nUnable to determine the device handle for GPU00000000:3D:00.0: GPU is lost.  Reboot the system to recover this GPU\n",
		wantCode: 15,
	}, {
		name:   "query with header and units",
		minors: []uint32{0, 1},
		args:   []string{"--query-gpu=index,uuid,name,memory.total,pci.bus_id", "--format=csv"},
		want: "index, uuid, name, memory.total [MiB], pci.bus_id\n" +
			"0, GPU-bbbb, NVIDIA H100 80GB HBM3, 81920 MiB, 00000000:0A:00.0\n" +
			"1, GPU-aaaa, NVIDIA H100 80GB HBM3, 81920 MiB, 00000000:1B:00.0\n",
	}, {
		name:   "query without header and units, format first",
		minors: []uint32{2},
		args:   []string{"--format=csv,noheader,nounits", "--query-gpu=memory.total,gpu_uuid,count,driver_version"},
		want:   "24576, GPU-cccc, 1, 570.124.06\n",
	}, {
		name:     "query of no GPU",
		args:     []string{"--query-gpu=uuid", "--format=csv"},
		want:     "No devices were found\n",
		wantCode: 6,
	}, {
		name:   "table",
		minors: []uint32{1, 2},
		want: `+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.124.06 (mock)   Driver Version: 570.124.06   CUDA Version: 12.8        |
+---------------------------------------------------------------------------------------+
| GPU  Name                            Bus-Id            Memory-Usage                   |
|=======================================================================================|
|   0  NVIDIA H100 80GB HBM3           00000000:0A:00.0  0MiB / 81920MiB                |
|   1  NVIDIA L4                       00000000:2C:00.0  0MiB / 24576MiB                |
+---------------------------------------------------------------------------------------+
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := env(t, &testMachine, tc.minors...)
			if tc.prepare != nil {
				tc.prepare(t, e.Dev)
			}
			out, errOut, code := run(e, tc.args...)
			if out != tc.want || code != tc.wantCode {
				t.Errorf("nvidia-smi %s: exit %d, stdout:\n%s\nstderr: %s\nwant exit %d, stdout:\n%s", strings.Join(tc.args, " "), code, out, errOut, tc.wantCode, tc.want)
			}
		})
	}
}

func TestNoDriverAndBadInput(t *testing.T) {
	t.Run("no description: the driver is not loaded", func(t *testing.T) {
		out, _, code := run(env(t, nil, 0), "-L")
		if code != 9 || !strings.Contains(out, "couldn't communicate with the NVIDIA driver") {
			t.Errorf("exit %d, %q; want 9 and nvidia-smi's no-driver message", code, out)
		}
	})
	t.Run("a broken description", func(t *testing.T) {
		e := env(t, nil, 0)
		if err := os.WriteFile(e.Machine, []byte(`{"gpus":[{"minor":0}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := run(e, "-L")
		if code != 255 || !strings.Contains(errOut, "no PCI bus ID") {
			t.Errorf("exit %d, %q; want 255 naming what is wrong", code, errOut)
		}
	})
	for _, args := range [][]string{
		{"-q"},
		{"--query-gpu=uuid,temperature.gpu", "--format=csv"},
		{"--query-gpu=uuid"},
		{"--query-gpu=uuid", "--format=json"},
		{"compute-policy", "-i", "GPU-aaaa", "--set-timeslice", "4"},
		{"compute-policy", "-i", "GPU-aaaa"},
	} {
		if _, errOut, code := run(env(t, &testMachine, 0), args...); code != 2 || errOut == "" {
			t.Errorf("nvidia-smi %q: exit %d, stderr %q; want 2 and why", args, code, errOut)
		}
	}
}

// TestComputePolicy: the plugin's one command is recorded beside the tool, whether or not the
// GPU's node is visible (the plugin runs it on the host, which has no mock GPU nodes).
func TestComputePolicy(t *testing.T) {
	e := env(t, &testMachine)
	for _, n := range []string{"3", "0"} {
		if out, errOut, code := run(e, "compute-policy", "-i", "GPU-aaaa", "--set-timeslice", n); code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
	}
	b, err := os.ReadFile(e.Executable + ".calls")
	if err != nil || string(b) != "GPU-aaaa 3\nGPU-aaaa 0\n" {
		t.Errorf("calls %q (%v), want both in order", b, err)
	}
	e.FailUUID = "GPU-bbbb"
	if _, errOut, code := run(e, "compute-policy", "-i", "GPU-bbbb", "--set-timeslice", "1"); code != 3 || !strings.Contains(errOut, "not supported for GPU GPU-bbbb") {
		t.Errorf("failing GPU: exit %d, %q; want 3", code, errOut)
	}
	if b, _ := os.ReadFile(e.Executable + ".calls"); strings.Contains(string(b), "GPU-bbbb") {
		t.Errorf("a failed call was recorded: %q", b)
	}
}
