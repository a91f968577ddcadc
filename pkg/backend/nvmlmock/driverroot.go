package nvmlmock

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// WriteDriverRoot generates under dir the file tree of an installed NVIDIA driver of version,
// for the NVIDIA toolkit's CDI generator to find: the versioned libraries as real (tiny) ELF
// shared objects whose SONAME is lib<x>.so.1, with the soname and development symlinks; the
// driver binaries as executables; the GSP firmware in lib/firmware/nvidia/<version>; and the
// nvidia-persistenced socket. Nothing in it can run; it is there to be found and mounted.
// Existing content is replaced, so a restart with another profile does not mix two drivers.
func WriteDriverRoot(dir, version string) error {
	if version == "" || strings.ContainsAny(version, "/ ") {
		return fmt.Errorf("mock driver root: bad driver version %q", version)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("mock driver root: %w", err)
	}
	libDir := filepath.Join(dir, DriverLibDir)
	if err := os.MkdirAll(libDir, 0o755); err != nil {
		return fmt.Errorf("mock driver root: %w", err)
	}
	for _, l := range driverLibraries {
		soname := l.name + ".1"
		file := l.name + "." + version
		if err := os.WriteFile(filepath.Join(libDir, file), sharedObject(soname), 0o755); err != nil {
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
	for _, b := range driverBinaries {
		files["usr/bin/"+b] = struct {
			content string
			mode    os.FileMode
		}{"#!/bin/sh\necho 'mock " + b + " " + version + "'\n", 0o755}
	}
	for p, f := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("mock driver root: %w", err)
		}
		if err := os.WriteFile(full, []byte(f.content), f.mode); err != nil {
			return fmt.Errorf("mock driver root: %w", err)
		}
	}
	return nil
}

// WriteDriverRoot generates the driver root of this machine's driver version; see the
// package-level WriteDriverRoot.
func (s *Server) WriteDriverRoot(dir string) error {
	return WriteDriverRoot(dir, s.profile.driverVersion)
}

// sharedObject returns a minimal ELF64 shared object with a dynamic section holding DT_SONAME:
// the toolkit reads the soname of every driver library (debug/elf, as here) to decide which
// symlinks the create-symlinks hook makes in the container. Sections: null, .dynstr, .dynamic,
// .shstrtab; no code, no program headers, which nothing here needs.
func sharedObject(soname string) []byte {
	le := binary.LittleEndian
	const ehdrSize, shdrSize = 64, 64
	dynstr := append([]byte{0}, append([]byte(soname), 0)...)
	shstr := []byte("\x00.dynstr\x00.dynamic\x00.shstrtab\x00")
	var dyn bytes.Buffer
	for _, kv := range [][2]uint64{
		{uint64(elf.DT_SONAME), 1},
		{uint64(elf.DT_STRTAB), ehdrSize},
		{uint64(elf.DT_STRSZ), uint64(len(dynstr))},
		{uint64(elf.DT_NULL), 0},
	} {
		_ = binary.Write(&dyn, le, kv)
	}
	dynstrOff := uint64(ehdrSize)
	dynOff := align8(dynstrOff + uint64(len(dynstr)))
	shstrOff := dynOff + uint64(dyn.Len())
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
	}{uint16(elf.ET_DYN), uint16(machine()), uint32(elf.EV_CURRENT), 0, 0, shOff, 0, ehdrSize, 0, 0, shdrSize, 4, 3})
	b.Write(dynstr)
	pad(&b, dynOff)
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

func machine() elf.Machine {
	if runtime.GOARCH == "arm64" {
		return elf.EM_AARCH64
	}
	return elf.EM_X86_64
}
