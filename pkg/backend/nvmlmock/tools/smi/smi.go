// Package smi is the nvidia-smi of the GPU mock (cmd/accel-dra-mock-nvidia), which the mock's
// driver root carries and containers get, so that workloads that ask nvidia-smi which GPUs they
// have run unchanged on a mock node.
//
// It lists GPUs as the real nvidia-smi does, from what the process can see: a GPU whose node
// /dev/nvidia<minor> exists in its mount namespace (a character device 195:<minor>), numbered
// from 0 in PCI bus order, as NVML numbers the GPUs it can open. Which GPU a minor number is
// comes from the mock machine's description (package machine), which lies beside the driver
// root's binaries. `nvidia-smi -L` lists them, plain `nvidia-smi` prints a short table, and
// `--query-gpu=<fields> --format=csv[,noheader][,nounits]` answers scripts. With no GPU node it
// says "No devices were found" and exits 6, as nvidia-smi does; without the description (no
// driver) it says what nvidia-smi says when it cannot reach the driver and exits 9.
//
// It also accepts the one command the plugin runs, `compute-policy -i <uuid> --set-timeslice
// <0..3>`, and appends "<uuid> <n>" to <its own path>.calls, one line per call, so that tests can
// see which interval each GPU got and in which order; FAKESMI_FAIL_UUID=<uuid> makes calls for
// that GPU fail (exit 3), as on a GPU that does not support compute policies. The plugin runs it
// on the host, where no GPU node exists, so this command asks for none.
//
// Anything else fails (exit 2), as nvidia-smi does on options it does not know.
package smi

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/machine"
)

// DevEnv names a directory the tool looks for GPU nodes in instead of /dev. Only tests set it:
// they cannot make nodes in the machine's /dev.
const DevEnv = "ACCEL_DRA_MOCK_NVIDIA_DEV"

// FailEnv names the GPU (by UUID) whose compute-policy calls fail.
const FailEnv = "FAKESMI_FAIL_UUID"

// Exit codes, as nvidia-smi's manual lists them.
const (
	exitOK           = 0
	exitIO           = 1 // the stand-in could not record a call
	exitInvalid      = 2 // an invalid argument
	exitNotSupported = 3 // not supported on the GPU
	exitNotFound     = 6 // a query found nothing: no GPU
	exitNoDriver     = 9 // the driver is not loaded
	exitLost         = 15
	exitOther        = 255
)

// nvidiaMajor is the character major of the NVIDIA driver's GPU nodes.
const nvidiaMajor = 195

// Env is what the tool runs with; Main takes it from the process.
type Env struct {
	Stdout, Stderr io.Writer
	// Dev is where the GPU nodes are: /dev.
	Dev string
	// Machine is the mock machine's description.
	Machine string
	// Executable is the tool's own path: compute-policy records its calls beside it.
	Executable string
	// FailUUID is the GPU whose compute-policy calls fail ($FAKESMI_FAIL_UUID).
	FailUUID string
}

// Main runs nvidia-smi with args (without the program name) and returns its exit code.
func Main(args []string) int {
	e := Env{Stdout: os.Stdout, Stderr: os.Stderr, Dev: cmp.Or(os.Getenv(DevEnv), "/dev"), FailUUID: os.Getenv(FailEnv)}
	if exe, err := os.Executable(); err == nil {
		e.Executable, e.Machine = exe, machine.Beside(exe)
	}
	return e.Run(args)
}

// Run runs nvidia-smi with args and returns its exit code.
func (e Env) Run(args []string) int {
	switch {
	case len(args) == 0:
		return e.table()
	case len(args) == 1 && (args[0] == "-L" || args[0] == "--list-gpus"):
		return e.list()
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
		fmt.Fprint(e.Stdout, usage)
		return exitOK
	case args[0] == "compute-policy":
		return e.computePolicy(args)
	case strings.HasPrefix(args[0], "--query-gpu=") || strings.HasPrefix(args[0], "--format="):
		return e.query(args)
	}
	fmt.Fprintf(e.Stderr, "nvidia-smi (accel-dra mock): unsupported arguments %q\n%s", args, usage)
	return exitInvalid
}

const usage = `nvidia-smi of the accel-dra GPU mock. It knows:
  nvidia-smi                          a table of the GPUs this process can see
  nvidia-smi -L | --list-gpus         one line per GPU: GPU <i>: <name> (UUID: <uuid>)
  nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]
                                      fields: index, uuid, name, memory.total, pci.bus_id,
                                      driver_version, count
  nvidia-smi compute-policy -i <uuid> --set-timeslice <0..3>
`

// visible returns the GPUs whose nodes this process can see, in PCI bus order, and the machine;
// or the exit code, having said why.
func (e Env) visible() ([]machine.GPU, *machine.Machine, int) {
	m, err := machine.Read(e.Machine)
	if e.Machine == "" || errors.Is(err, machine.ErrMissing) {
		// What nvidia-smi says where the driver is not loaded: a mock node's driver is its
		// description.
		fmt.Fprintln(e.Stdout, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.")
		return nil, nil, exitNoDriver
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "nvidia-smi (accel-dra mock): %v\n", err)
		return nil, nil, exitOther
	}
	var gpus []machine.GPU
	for _, g := range m.GPUs {
		if hasNode(e.Dev, g.Minor) {
			gpus = append(gpus, g)
		}
	}
	if len(gpus) == 0 {
		fmt.Fprintln(e.Stdout, "No devices were found")
		return nil, nil, exitNotFound
	}
	// Bus IDs in NVML's form (fixed width, upper-case hex) sort as their numbers do.
	slices.SortFunc(gpus, func(a, b machine.GPU) int {
		return strings.Compare(strings.ToUpper(a.PCIBusID), strings.ToUpper(b.PCIBusID))
	})
	return gpus, m, exitOK
}

// hasNode reports whether dev holds the node of the GPU with minor number minor: NVML opens
// /dev/nvidia<minor>, which must be that GPU's character device.
func hasNode(dev string, minor int) bool {
	fi, err := os.Stat(filepath.Join(dev, "nvidia"+strconv.Itoa(minor)))
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && unix.Major(uint64(st.Rdev)) == nvidiaMajor && unix.Minor(uint64(st.Rdev)) == uint32(minor)
}

// lostLine is what nvidia-smi prints for a GPU that has fallen off the bus.
func lostLine(g machine.GPU) string {
	return fmt.Sprintf("Unable to determine the device handle for GPU%s: GPU is lost.  Reboot the system to recover this GPU", g.PCIBusID)
}

func (e Env) list() int {
	gpus, _, code := e.visible()
	if code != exitOK {
		return code
	}
	for i, g := range gpus {
		if g.Lost {
			fmt.Fprintln(e.Stdout, lostLine(g))
			code = exitLost
			continue
		}
		fmt.Fprintf(e.Stdout, "GPU %d: %s (UUID: %s)\n", i, g.Name, g.UUID)
	}
	return code
}

// table prints nvidia-smi's summary, shortened to what the mock knows.
func (e Env) table() int {
	gpus, m, code := e.visible()
	if code != exitOK {
		return code
	}
	const width = 89 // nvidia-smi's
	rule := "+" + strings.Repeat("-", width-2) + "+"
	row := func(s string) { fmt.Fprintf(e.Stdout, "| %-*s |\n", width-4, s) }
	fmt.Fprintln(e.Stdout, rule)
	row(fmt.Sprintf("NVIDIA-SMI %s (mock)   Driver Version: %s   CUDA Version: %d.%d",
		m.DriverVersion, m.DriverVersion, m.CUDAVersion/1000, m.CUDAVersion%1000/10))
	fmt.Fprintln(e.Stdout, rule)
	row(fmt.Sprintf("%-3s  %-30s  %-16s  %s", "GPU", "Name", "Bus-Id", "Memory-Usage"))
	fmt.Fprintln(e.Stdout, "|"+strings.Repeat("=", width-2)+"|")
	for i, g := range gpus {
		if g.Lost {
			row(fmt.Sprintf("%3d  %-30s  %-16s  %s", i, "ERR! (GPU is lost)", g.PCIBusID, "ERR!"))
			code = exitLost
			continue
		}
		row(fmt.Sprintf("%3d  %-30.30s  %-16s  %s", i, g.Name, g.PCIBusID, fmt.Sprintf("0MiB / %dMiB", g.MemoryMiB)))
	}
	fmt.Fprintln(e.Stdout, rule)
	return code
}

// queryFields are the --query-gpu fields the mock answers, by every name nvidia-smi accepts
// for them.
var queryFields = map[string]struct {
	unit  string
	value func(index int, g machine.GPU, m *machine.Machine, count int) string
}{
	"index":          {value: func(i int, _ machine.GPU, _ *machine.Machine, _ int) string { return strconv.Itoa(i) }},
	"uuid":           {value: func(_ int, g machine.GPU, _ *machine.Machine, _ int) string { return g.UUID }},
	"gpu_uuid":       {value: func(_ int, g machine.GPU, _ *machine.Machine, _ int) string { return g.UUID }},
	"name":           {value: func(_ int, g machine.GPU, _ *machine.Machine, _ int) string { return g.Name }},
	"gpu_name":       {value: func(_ int, g machine.GPU, _ *machine.Machine, _ int) string { return g.Name }},
	"pci.bus_id":     {value: func(_ int, g machine.GPU, _ *machine.Machine, _ int) string { return g.PCIBusID }},
	"gpu_bus_id":     {value: func(_ int, g machine.GPU, _ *machine.Machine, _ int) string { return g.PCIBusID }},
	"driver_version": {value: func(_ int, _ machine.GPU, m *machine.Machine, _ int) string { return m.DriverVersion }},
	"count":          {value: func(_ int, _ machine.GPU, _ *machine.Machine, n int) string { return strconv.Itoa(n) }},
	"memory.total": {unit: "MiB", value: func(_ int, g machine.GPU, _ *machine.Machine, _ int) string {
		return strconv.FormatUint(g.MemoryMiB, 10)
	}},
}

func (e Env) query(args []string) int {
	var fields []string
	csv, header, units := false, true, true
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--query-gpu=") && fields == nil:
			for _, f := range strings.Split(strings.TrimPrefix(a, "--query-gpu="), ",") {
				f = strings.TrimSpace(f)
				if _, ok := queryFields[f]; !ok {
					fmt.Fprintf(e.Stderr, "Field \"%s\" is not a valid field to query.\n", f)
					return exitInvalid
				}
				fields = append(fields, f)
			}
		case strings.HasPrefix(a, "--format="):
			for _, o := range strings.Split(strings.TrimPrefix(a, "--format="), ",") {
				switch strings.TrimSpace(o) {
				case "csv":
					csv = true
				case "noheader":
					header = false
				case "nounits":
					units = false
				default:
					fmt.Fprintf(e.Stderr, "nvidia-smi (accel-dra mock): format option %q: the mock knows csv, noheader and nounits\n", o)
					return exitInvalid
				}
			}
		default:
			fmt.Fprintf(e.Stderr, "nvidia-smi (accel-dra mock): unsupported arguments %q\n%s", args, usage)
			return exitInvalid
		}
	}
	if fields == nil || !csv {
		fmt.Fprintln(e.Stderr, `--query-gpu needs --format=csv (and --format=csv needs --query-gpu)`)
		return exitInvalid
	}
	gpus, m, code := e.visible()
	if code != exitOK {
		return code
	}
	if header {
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f
			if u := queryFields[f].unit; u != "" {
				names[i] += " [" + u + "]"
			}
		}
		fmt.Fprintln(e.Stdout, strings.Join(names, ", "))
	}
	for i, g := range gpus {
		if g.Lost {
			fmt.Fprintln(e.Stdout, lostLine(g))
			code = exitLost
			continue
		}
		values := make([]string, len(fields))
		for j, f := range fields {
			q := queryFields[f]
			values[j] = q.value(i, g, m, len(gpus))
			if q.unit != "" && units {
				values[j] += " " + q.unit
			}
		}
		fmt.Fprintln(e.Stdout, strings.Join(values, ", "))
	}
	return code
}

// computePolicy sets a GPU's time-slice as `nvidia-smi compute-policy` does, recording the call.
func (e Env) computePolicy(a []string) int {
	if len(a) != 5 || a[0] != "compute-policy" || a[1] != "-i" || a[3] != "--set-timeslice" {
		fmt.Fprintf(e.Stderr, "nvidia-smi (accel-dra mock): unsupported arguments %q\n", a)
		return exitInvalid
	}
	uuid := a[2]
	n, err := strconv.Atoi(a[4])
	if err != nil || n < 0 || n > 3 {
		fmt.Fprintf(e.Stderr, "nvidia-smi (accel-dra mock): invalid time-slice %q\n", a[4])
		return exitInvalid
	}
	if uuid == e.FailUUID {
		fmt.Fprintf(e.Stderr, "Setting time-slice is not supported for GPU %s.\n", uuid)
		return exitNotSupported
	}
	if e.Executable == "" {
		fmt.Fprintln(e.Stderr, "nvidia-smi (accel-dra mock): cannot find its own path to record the call")
		return exitIO
	}
	f, err := os.OpenFile(e.Executable+".calls", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintf(f, "%s %d\n", uuid, n)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(e.Stderr, "nvidia-smi (accel-dra mock):", err)
		return exitIO
	}
	fmt.Fprintf(e.Stdout, "Set time-slice to %d for GPU %s.\n", n, uuid)
	return exitOK
}
