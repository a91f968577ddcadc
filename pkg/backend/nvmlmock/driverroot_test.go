package nvmlmock

import (
	"debug/elf"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/machine"
)

// testServer is a mock machine whose NVML reports driver version.
func testServer(t *testing.T, profile, version string) *Server {
	t.Helper()
	s, err := NewServer(profile, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if version != "" {
		s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return version, nvml.SUCCESS }
	}
	return s
}

func TestWriteDriverRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	// A leftover from another driver must not survive a rewrite.
	if err := WriteDriverRoot(root, testServer(t, "h100-8x-2numa", "535.1.2")); err != nil {
		t.Fatal(err)
	}
	// What is not the driver's stays, and so does the directory itself: MPS daemons run
	// chrooted into it through a bind of it, and mount their directories into it.
	before, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(root, "var/lib/kubelet/plugins/x/mps/c1")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteDriverRoot(root, testServer(t, "h100-8x-2numa", "570.124.06")); err != nil {
		t.Fatal(err)
	}
	if after, err := os.Stat(root); err != nil || !os.SameFile(before, after) {
		t.Errorf("the root directory was replaced (%v): a bind of it would keep the old one", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a directory that is not the driver's went: %v", err)
	}
	lib := filepath.Join(root, DriverLibDir)
	if _, err := os.Stat(filepath.Join(lib, "libcuda.so.535.1.2")); !os.IsNotExist(err) {
		t.Errorf("library of the previous driver left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "lib/firmware/nvidia/535.1.2")); !os.IsNotExist(err) {
		t.Errorf("firmware of the previous driver left behind: %v", err)
	}
	for link, want := range map[string]string{
		"libcuda.so.1":      "libcuda.so.570.124.06",
		"libcuda.so":        "libcuda.so.1",
		"libnvidia-ml.so.1": "libnvidia-ml.so.570.124.06",
	} {
		got, err := os.Readlink(filepath.Join(lib, link))
		if err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %q", link, got, err, want)
		}
	}
	f, err := elf.Open(filepath.Join(lib, "libnvidia-ml.so.570.124.06"))
	if err != nil {
		t.Fatalf("not an ELF file: %v", err)
	}
	defer func() { _ = f.Close() }()
	if f.Type != elf.ET_DYN {
		t.Errorf("ELF type %v, want ET_DYN", f.Type)
	}
	if names, err := f.DynString(elf.DT_SONAME); err != nil || len(names) != 1 || names[0] != "libnvidia-ml.so.1" {
		t.Errorf("SONAME %v (%v), want [libnvidia-ml.so.1]", names, err)
	}
	for _, p := range []string{"usr/bin/nvidia-smi", "lib/firmware/nvidia/570.124.06/gsp_ga10x.bin"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Error(err)
		}
	}
	if info, err := os.Stat(filepath.Join(root, "usr/bin/nvidia-smi")); err == nil && info.Mode()&0o111 == 0 {
		t.Errorf("nvidia-smi mode %v, want executable", info.Mode())
	}
	for _, bad := range []string{"", "1/2", "1 2"} {
		s := testServer(t, "h100-8x-2numa", "")
		s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return bad, nvml.SUCCESS }
		if err := WriteDriverRoot(filepath.Join(t.TempDir(), "x"), s); err == nil {
			t.Errorf("version %q accepted", bad)
		}
	}
}

// TestDriverRootMachine: the description of the machine that the tools read is what the mock's
// NVML says, by minor number, wherever the NVML index puts a GPU; a lost GPU is described by the
// minor number and bus ID the driver still knows.
func TestDriverRootMachine(t *testing.T) {
	h100 := func(minor int, bus string) machine.GPU {
		return machine.GPU{Minor: minor, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, PCIBusID: bus}
	}
	dgx := []machine.GPU{
		h100(0, "00000000:1B:00.0"), h100(1, "00000000:43:00.0"), h100(2, "00000000:52:00.0"), h100(3, "00000000:61:00.0"),
		h100(4, "00000000:9D:00.0"), h100(5, "00000000:C3:00.0"), h100(6, "00000000:D1:00.0"), h100(7, "00000000:DF:00.0"),
	}
	for _, tc := range []struct {
		profile string
		want    []machine.GPU // UUIDs come from NVML
	}{
		{"mixed-small", []machine.GPU{
			{Minor: 0, Name: "NVIDIA L4", MemoryMiB: 24576, PCIBusID: "00000000:01:00.0"},
			{Minor: 1, Name: "Tesla T4", MemoryMiB: 16384, PCIBusID: "00000001:00:04.0"},
		}},
		{"h100-8x-2numa", dgx},
		{"h100-8x-2numa-reordered", dgx},
		{"h100-8x-one-broken", append(append(slices.Clone(dgx[:3]), machine.GPU{Minor: 3, PCIBusID: "00000000:61:00.0", Lost: true}), dgx[4:]...)},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			s := testServer(t, tc.profile, "")
			root := filepath.Join(t.TempDir(), "root")
			if err := s.WriteDriverRoot(root); err != nil {
				t.Fatal(err)
			}
			// The tools find it beside themselves.
			m, err := machine.Read(machine.Beside(filepath.Join(root, "usr/bin/nvidia-smi")))
			if err != nil {
				t.Fatal(err)
			}
			uuids := map[int]string{}
			for _, d := range s.Devices {
				minor, _ := d.GetMinorNumber()
				if uuid, ret := d.GetUUID(); ret == nvml.SUCCESS {
					uuids[minor] = uuid
				}
			}
			want := machine.Machine{DriverVersion: "570.124.06", CUDAVersion: 12080, GPUs: slices.Clone(tc.want)}
			for i := range want.GPUs {
				want.GPUs[i].UUID = uuids[want.GPUs[i].Minor]
			}
			if diff := cmp.Diff(want, *m); diff != "" {
				t.Errorf("description (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDriverRootTools: with the mock's tools, every driver binary is that program, runnable,
// under its own name; a tools path that is not a file is an error that names it.
func TestDriverRootTools(t *testing.T) {
	tools := filepath.Join(t.TempDir(), "accel-dra-mock-nvidia")
	if err := os.WriteFile(tools, []byte("the mock's tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	s := testServer(t, "mixed-small", "")
	if err := s.WriteDriverRoot(root, WithTools(tools)); err != nil {
		t.Fatal(err)
	}
	for _, b := range driverBinaries {
		p := filepath.Join(root, "usr/bin", b)
		data, err := os.ReadFile(p)
		if err != nil || string(data) != "the mock's tools" {
			t.Errorf("%s: %q, %v; want the tools", b, data, err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s: %v, %v; want an executable", b, fi, err)
		}
	}
	// Written again (a restart), the tools replace the previous ones.
	if err := s.WriteDriverRoot(root, WithTools(tools)); err != nil {
		t.Fatalf("writing again: %v", err)
	}
	for _, bad := range []string{filepath.Join(t.TempDir(), "missing"), t.TempDir()} {
		err := s.WriteDriverRoot(filepath.Join(t.TempDir(), "root"), WithTools(bad))
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("tools %s: error %v, want one naming it", bad, err)
		}
	}
}

// TestDriverLibrariesInLdcache: glibc's ldconfig, which the toolkit's update-ldcache hook runs
// in the container, puts the driver root's libraries into its cache, so that a container's
// `ldconfig -p` lists libcuda.so.1 and libnvidia-ml.so.1 as on a real node. ldconfig skips
// shared objects it cannot read the soname of through their dynamic segment.
func TestDriverLibrariesInLdcache(t *testing.T) {
	ldconfig := hostTool(t, "/sbin/ldconfig")
	lib := filepath.Join(writeTestRoot(t), DriverLibDir)
	cache := filepath.Join(t.TempDir(), "ld.so.cache")
	// No /etc/ld.so.conf (-f /dev/null); the host's own directories are still read, which is
	// why the check looks for the driver root's paths.
	if out, err := exec.Command(ldconfig, "-C", cache, "-f", "/dev/null", lib).CombinedOutput(); err != nil {
		t.Fatalf("ldconfig: %v\n%s", err, out)
	}
	out, err := exec.Command(ldconfig, "-C", cache, "-p").CombinedOutput()
	if err != nil {
		t.Fatalf("ldconfig -p: %v\n%s", err, out)
	}
	abi := "libc6,x86-64"
	if runtime.GOARCH == "arm64" {
		abi = "libc6,AArch64"
	}
	for _, soname := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
		want := soname + " (" + abi + ") => " + filepath.Join(lib, soname)
		if !strings.Contains(string(out), want) {
			t.Errorf("ldconfig -p does not list %q", want)
		}
	}
}

// TestDriverLibrariesLoad: a CUDA program that finds the libraries (through the ld cache) and
// dlopens them must get a library without the functions it asks for, not a crash: glibc's
// loader maps and relocates each (as `ldd -r` has it do) without error.
func TestDriverLibrariesLoad(t *testing.T) {
	loader := "/lib64/ld-linux-x86-64.so.2"
	if runtime.GOARCH == "arm64" {
		loader = "/lib/ld-linux-aarch64.so.1"
	}
	loader = hostTool(t, loader)
	lib := filepath.Join(writeTestRoot(t), DriverLibDir)
	for _, soname := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
		cmd := exec.Command(loader, filepath.Join(lib, soname))
		cmd.Env = []string{"LD_TRACE_LOADED_OBJECTS=1", "LD_WARN=yes", "LD_BIND_NOW=yes"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("loading %s: %v\n%s", soname, err, out)
		}
	}
}

func writeTestRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := testServer(t, "h100-8x-2numa", "").WriteDriverRoot(root); err != nil {
		t.Fatal(err)
	}
	return root
}

// hostTool returns path, a glibc tool of the machine, if it reads this architecture's
// libraries. It skips the test where the tool is missing, or is another architecture's (the
// arm64 tests run under qemu-user emulation, whose children the host kernel runs natively), but
// fails it in CI on amd64, which has glibc's tools.
func hostTool(t *testing.T, path string) string {
	t.Helper()
	_, err := os.Stat(path)
	if err == nil {
		// Some distributions make ldconfig a script around the binary; that one is the
		// machine's.
		if f, err := elf.Open(path); err == nil {
			defer func() { _ = f.Close() }()
			if f.Machine != elfMachine() {
				t.Skipf("%s is for %v, the libraries for %v", path, f.Machine, elfMachine())
			}
		}
		// Under qemu-user -L, this process sees the emulated architecture's C library at the
		// host's paths, but the host kernel execs its children without that prefix, where
		// the file is not.
		if err := exec.Command(path, "--version").Run(); errors.Is(err, fs.ErrNotExist) {
			t.Skipf("%s exists for this emulated process only: %v", path, err)
		}
		return path
	}
	if os.Getenv("CI") == "true" && runtime.GOARCH == "amd64" {
		t.Fatalf("%s: %v (CI=true: CI has glibc's tools, where this test must run)", path, err)
	}
	t.Skipf("no %s: %v", path, err)
	return ""
}
