package nvmlmock

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/machine"
)

// DriverLibDir is where WriteDriverRoot puts the driver's libraries, relative to the root. It
// is one of the directories the NVIDIA toolkit searches under a driver root before falling back
// to the ldcache, so the toolkit finds the libraries by the same search it uses on a real host
// (a RHEL-style install; Debian's /usr/lib/x86_64-linux-gnu is searched the same way).
const DriverLibDir = "usr/lib64"

// driverLibraries are the user-space libraries of a compute driver install, by soname base.
// Each is written as lib<x>.so.<version> with the soname symlink lib<x>.so.1 beside it, as the
// .run installer and the distribution packages lay them out; libcuda and libnvidia-ml also get
// the development link lib<x>.so.
var driverLibraries = []struct {
	name    string
	devLink bool
}{
	{"libcuda.so", true},
	{"libcudadebugger.so", false},
	{"libnvidia-cfg.so", false},
	{"libnvidia-gpucomp.so", false},
	{"libnvidia-ml.so", true},
	{"libnvidia-nvvm.so", false},
	{"libnvidia-opencl.so", false},
	{"libnvidia-ptxjitcompiler.so", false},
	// Recent drivers ship the sandbox utilities, which the toolkit's generator would load
	// (dlopen) to describe devices unless told not to (pkg/cdi/nvidia).
	{"libnvidia-sandboxutils.so", false},
}

// driverBinaries go to usr/bin, where the toolkit looks for them on the PATH under the root.
var driverBinaries = []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}

// GeneratedDriverRoot is where a plugin on the mock that installs its own driver
// (--mock-driver-root=generate) has the mock write it: a driver root, like the GPU operator's
// driver container's, with the device nodes in its dev/ (WithDevNodes). The name is not that
// of the root which plugins before the device-node layout generated (nvidia-driver-root):
// some of those remove their root whole at start, and during a rolling update or a rollback
// between the two both run, each preparing claims whose CDI specs mount files of its own root.
func GeneratedDriverRoot(mockDir string) string {
	return filepath.Join(mockDir, "nvidia-driver-root-2")
}

// DriverRootOption changes what WriteDriverRoot writes.
type DriverRootOption func(*driverRootOptions)

type driverRootOptions struct{ tools string }

// WithTools makes the driver root's binaries copies of tools, the GPU mock's multi-call binary
// (cmd/accel-dra-mock-nvidia), which runs as the tool its name says, so that containers and the
// plugin run a real nvidia-smi and nvidia-cuda-mps-control stand-in. Without it they are shell
// scripts that only print their name, which is enough for tests that do not build the tools.
func WithTools(path string) DriverRootOption {
	return func(o *driverRootOptions) { o.tools = path }
}

// WriteDriverRoot generates under dir the file tree of an installed NVIDIA driver, of the
// version and with the GPUs that lib (the mock's NVML) reports, for the NVIDIA toolkit's CDI
// generator to find: the driver's files (WriteDriver) and the machine's description for the
// tools (machine.Path), which the plugin's CDI edits mount into containers. The driver's own
// files are replaced, so a restart with another profile does not mix two drivers, and nothing
// else: the directory itself and what others put into it stay, as on a node whose driver is
// upgraded in place (MPS daemons run chrooted into the root, through a bind of the directory
// that a new directory would leave behind, and mount into it).
func WriteDriverRoot(dir string, lib nvml.Interface, opts ...DriverRootOption) error {
	m, err := DescribeMachine(lib)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return fmt.Errorf("mock driver root: %w", err)
	}
	if err := WriteDriver(dir, m.DriverVersion, opts...); err != nil {
		return err
	}
	return writeMachine(filepath.Join(dir, machine.Path), m)
}

// WriteDriver installs under dir the files of the mock NVIDIA driver of version, as a driver
// installer (the .run file, the distribution's packages, the GPU operator's driver container)
// puts them into a root: the versioned libraries as real (tiny) ELF shared objects whose
// SONAME is lib<x>.so.1, with the soname and development symlinks; the driver binaries
// (WithTools); the GSP firmware in lib/firmware/nvidia/<version>; the nvidia-persistenced
// socket. It knows nothing of the machine: a root it wrote serves any mock node, whose plugin
// reads the version from the libraries' names, as NVML reports the version of the library it
// loaded (--mock-driver-root=use). It replaces the files of a driver it wrote before, of any
// version, and nothing else, so it installs into a root that holds other things, a
// distribution's C library for one.
func WriteDriver(dir, version string, opts ...DriverRootOption) error {
	var o driverRootOptions
	for _, opt := range opts {
		opt(&o)
	}
	if version == "" || strings.ContainsAny(version, "/ ") {
		return fmt.Errorf("mock driver root: bad driver version %q", version)
	}
	if err := removeDriver(dir); err != nil {
		return fmt.Errorf("mock driver root: %w", err)
	}
	libDir := filepath.Join(dir, DriverLibDir)
	if err := os.MkdirAll(libDir, 0o755); err != nil {
		return fmt.Errorf("mock driver root: %w", err)
	}
	for _, l := range driverLibraries {
		soname := l.name + ".1"
		file := l.name + "." + version
		if err := replaceFile(filepath.Join(libDir, file), sharedObject(soname), 0o755); err != nil {
			return fmt.Errorf("mock driver root: %w", err)
		}
		links := map[string]string{soname: file}
		if l.devLink {
			links[l.name] = soname
		}
		for link, target := range links {
			if err := os.Symlink(target, filepath.Join(libDir, link)); err != nil {
				return fmt.Errorf("mock driver root: %w", err)
			}
		}
	}
	files := map[string]struct {
		content string
		mode    os.FileMode
	}{
		"lib/firmware/nvidia/" + version + "/gsp_ga10x.bin": {"mock GSP firmware\n", 0o644},
		"lib/firmware/nvidia/" + version + "/gsp_tu10x.bin": {"mock GSP firmware\n", 0o644},
		// A regular file where the daemon's socket would be: the toolkit only checks that it
		// exists, and a mock node runs no daemon.
		"run/nvidia-persistenced/socket": {"", 0o644},
	}
	if o.tools == "" {
		for _, b := range driverBinaries {
			files["usr/bin/"+b] = struct {
				content string
				mode    os.FileMode
			}{"#!/bin/sh\necho 'mock " + b + " " + version + "'\n", 0o755}
		}
	}
	for p, f := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("mock driver root: %w", err)
		}
		if err := replaceFile(full, []byte(f.content), f.mode); err != nil {
			return fmt.Errorf("mock driver root: %w", err)
		}
	}
	if o.tools != "" {
		if err := installTools(filepath.Join(dir, "usr/bin"), o.tools); err != nil {
			return fmt.Errorf("mock driver root: the GPU mock's tools: %w", err)
		}
	}
	return nil
}

// WriteMachine writes the description of the GPUs lib (the mock's NVML) has to path, for the
// mock's tools: a plugin that uses a driver root installed by someone else keeps it in its own
// directory and writes it with each computation of its CDI edits, from the NVML of the driver
// they are of. The file is replaced (through a rename, so that a reader gets a whole one) only
// when the description changed, another driver's version for one.
func WriteMachine(path string, lib nvml.Interface) error {
	m, err := DescribeMachine(lib)
	if err != nil {
		return fmt.Errorf("mock machine description: %w", err)
	}
	return writeMachine(path, m)
}

func writeMachine(path string, m *machine.Machine) error {
	description, err := m.Encode()
	if err != nil {
		return fmt.Errorf("mock machine description: %w", err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, description) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("mock machine description: %w", err)
	}
	if err := replaceFile(path, description, 0o644); err != nil {
		return fmt.Errorf("mock machine description: %w", err)
	}
	return nil
}

// removeDriver removes the files of a driver WriteDriverRoot wrote under dir, of any version,
// and nothing else.
func removeDriver(dir string) error {
	var paths []string
	for _, l := range driverLibraries {
		matches, err := filepath.Glob(filepath.Join(dir, DriverLibDir, l.name+"*"))
		if err != nil {
			return err
		}
		paths = append(paths, matches...)
	}
	for _, b := range driverBinaries {
		paths = append(paths, filepath.Join(dir, "usr/bin", b))
	}
	paths = append(paths, filepath.Join(dir, "lib/firmware/nvidia"), filepath.Join(dir, "run/nvidia-persistenced/socket"), filepath.Join(dir, machine.Path))
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// replaceFile writes data to path through a temporary file and a rename, so that a process
// that runs or reads the old file keeps it whole.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// installTools puts the multi-call binary src into binDir under each driver binary's name: one
// copy, and hard links to it for the other names (a copy where the file system has none), which
// keeps five names of one static binary to one binary's space.
func installTools(binDir, src string) error {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	first := filepath.Join(binDir, driverBinaries[0])
	if err := copyExecutable(src, first); err != nil {
		return err
	}
	for _, b := range driverBinaries[1:] {
		if err := os.Link(first, filepath.Join(binDir, b)); err != nil {
			if err := copyExecutable(src, filepath.Join(binDir, b)); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	if fi, err := in.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return out.Close()
}

// WriteDriverRoot generates the driver root of this machine; see the package-level
// WriteDriverRoot.
func (s *Server) WriteDriverRoot(dir string, opts ...DriverRootOption) error {
	return WriteDriverRoot(dir, s.Interface, opts...)
}

// WriteDriverRootOfVersion writes the driver root of the default machine (h100-8x-2numa) with
// its driver at version: for tests that need a driver of some version and nothing else of the
// machine behind it.
func WriteDriverRootOfVersion(dir, version string, opts ...DriverRootOption) error {
	s, err := NewServer("h100-8x-2numa", "node-a")
	if err != nil {
		return err
	}
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return version, nvml.SUCCESS }
	return s.WriteDriverRoot(dir, opts...)
}

// DescribeMachine describes the GPUs lib (the mock's NVML) has, for the mock's tools: what they
// would ask the kernel driver on a real node (package machine). It asks only what NVML answers
// on a real node too. A lost GPU is described by what the driver still knows of it.
func DescribeMachine(lib nvml.Interface) (*machine.Machine, error) {
	var m machine.Machine
	var ret nvml.Return
	if m.DriverVersion, ret = lib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("driver version: %v", ret)
	}
	if m.CUDAVersion, ret = lib.SystemGetCudaDriverVersion(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("CUDA driver version: %v", ret)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU count: %v", ret)
	}
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: %v", i, ret)
		}
		var g machine.GPU
		if g.Minor, ret = d.GetMinorNumber(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: minor number: %v", i, ret)
		}
		pci, ret := d.GetPciInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: PCI info: %v", i, ret)
		}
		g.PCIBusID = cString(pci.BusId[:])
		if g.UUID, ret = d.GetUUID(); ret == nvml.ERROR_GPU_IS_LOST {
			g.UUID, g.Lost = "", true
			m.GPUs = append(m.GPUs, g)
			continue
		} else if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: UUID: %v", i, ret)
		}
		if g.Name, ret = d.GetName(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %s: name: %v", g.UUID, ret)
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %s: memory: %v", g.UUID, ret)
		}
		g.MemoryMiB = mem.Total >> 20
		m.GPUs = append(m.GPUs, g)
	}
	return &m, nil
}

// cString returns the NUL-terminated string in b.
func cString(b []uint8) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// sharedObject returns a minimal ELF64 shared object whose dynamic section holds DT_SONAME, in
// the two places readers look for it. The toolkit reads the soname of every driver library
// through the section headers (debug/elf, as the tests here) to decide which symlinks the
// create-symlinks hook makes in the container; glibc's ldconfig, which the update-ldcache hook
// runs in the container, and the dynamic loader read it through the program headers: a PT_LOAD
// segment that maps the file up to the end of .dynamic (addresses equal file offsets) and a
// PT_DYNAMIC segment, without which ldconfig leaves the library out of the container's cache.
// For the loader it also has an empty symbol table (the null symbol) with its hash table, which
// relocation and symbol look-up read unconditionally, and PT_GNU_STACK, without which recent
// glibc refuses a dlopen (executable stack). It has no code: a dlopen succeeds and every dlsym
// fails, as for a library without the function asked for.
func sharedObject(soname string) []byte {
	le := binary.LittleEndian
	const ehdrSize, phdrSize, shdrSize, nPhdr = 64, 56, 64, 3
	dynstr := append([]byte{0}, append([]byte(soname), 0)...)
	shstr := []byte("\x00.dynstr\x00.dynamic\x00.shstrtab\x00")
	// The SysV hash table of no symbols: one bucket, one chain, both pointing at the null
	// symbol; the symbol table holds only that symbol.
	hash := []uint32{1, 1, 0, 0}
	const symSize = 24
	dynstrOff := uint64(ehdrSize + nPhdr*phdrSize)
	hashOff := align8(dynstrOff + uint64(len(dynstr)))
	symOff := hashOff + uint64(4*len(hash))
	var dyn bytes.Buffer
	for _, kv := range [][2]uint64{
		{uint64(elf.DT_SONAME), 1},
		{uint64(elf.DT_HASH), hashOff},
		{uint64(elf.DT_STRTAB), dynstrOff},
		{uint64(elf.DT_SYMTAB), symOff},
		{uint64(elf.DT_STRSZ), uint64(len(dynstr))},
		{uint64(elf.DT_SYMENT), symSize},
		{uint64(elf.DT_NULL), 0},
	} {
		_ = binary.Write(&dyn, le, kv)
	}
	dynOff := symOff + symSize
	dynEnd := dynOff + uint64(dyn.Len())
	shstrOff := dynEnd
	shOff := align8(shstrOff + uint64(len(shstr)))

	var b bytes.Buffer
	ident := [16]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)}
	b.Write(ident[:])
	_ = binary.Write(&b, le, struct {
		Type, Machine                                 uint16
		Version                                       uint32
		Entry, Phoff, Shoff                           uint64
		Flags                                         uint32
		Ehsize, Phentsize, Phnum, Shentsize, Shnum, S uint16
	}{uint16(elf.ET_DYN), uint16(elfMachine()), uint32(elf.EV_CURRENT), 0, ehdrSize, shOff, 0, ehdrSize, phdrSize, nPhdr, shdrSize, 4, 3})
	type phdr struct {
		Type, Flags                                 uint32
		Off, Vaddr, Paddr, Filesz, Memsz, Addralign uint64
	}
	rw := uint32(elf.PF_R | elf.PF_W)
	for _, h := range []phdr{
		{Type: uint32(elf.PT_LOAD), Flags: rw, Filesz: dynEnd, Memsz: dynEnd, Addralign: 0x1000},
		{Type: uint32(elf.PT_DYNAMIC), Flags: rw, Off: dynOff, Vaddr: dynOff, Paddr: dynOff, Filesz: uint64(dyn.Len()), Memsz: uint64(dyn.Len()), Addralign: 8},
		{Type: uint32(elf.PT_GNU_STACK), Flags: rw, Addralign: 16},
	} {
		_ = binary.Write(&b, le, h)
	}
	b.Write(dynstr)
	pad(&b, hashOff)
	_ = binary.Write(&b, le, hash)
	pad(&b, dynOff) // the null symbol
	b.Write(dyn.Bytes())
	b.Write(shstr)
	pad(&b, shOff)
	type shdr struct {
		Name                 uint32
		Type                 uint32
		Flags, Addr, Off, Sz uint64
		Link, Info           uint32
		Addralign, Entsize   uint64
	}
	for _, h := range []shdr{
		{},
		{Name: 1, Type: uint32(elf.SHT_STRTAB), Flags: uint64(elf.SHF_ALLOC), Addr: dynstrOff, Off: dynstrOff, Sz: uint64(len(dynstr)), Addralign: 1},
		{Name: 9, Type: uint32(elf.SHT_DYNAMIC), Flags: uint64(elf.SHF_ALLOC | elf.SHF_WRITE), Addr: dynOff, Off: dynOff, Sz: uint64(dyn.Len()), Link: 1, Addralign: 8, Entsize: 16},
		{Name: 18, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Sz: uint64(len(shstr)), Addralign: 1},
	} {
		_ = binary.Write(&b, le, h)
	}
	return b.Bytes()
}

func align8(n uint64) uint64 { return (n + 7) &^ 7 }

func pad(b *bytes.Buffer, to uint64) {
	for uint64(b.Len()) < to {
		b.WriteByte(0)
	}
}

func elfMachine() elf.Machine {
	if runtime.GOARCH == "arm64" {
		return elf.EM_AARCH64
	}
	return elf.EM_X86_64
}
