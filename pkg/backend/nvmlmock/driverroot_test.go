package nvmlmock

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteDriverRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	// A leftover from another driver must not survive a rewrite.
	if err := WriteDriverRoot(root, "535.1.2"); err != nil {
		t.Fatal(err)
	}
	if err := WriteDriverRoot(root, "570.124.06"); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(root, DriverLibDir)
	if _, err := os.Stat(filepath.Join(lib, "libcuda.so.535.1.2")); !os.IsNotExist(err) {
		t.Errorf("library of the previous driver left behind: %v", err)
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
		if err := WriteDriverRoot(filepath.Join(t.TempDir(), "x"), bad); err == nil {
			t.Errorf("version %q accepted", bad)
		}
	}
}
