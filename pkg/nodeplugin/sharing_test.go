package nodeplugin

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// TestTimeSliceWithTheHostsCLibrary: a driver root holds the host's C library beside the
// driver's libraries (libc.so.6 lies in /usr/lib64 or /usr/lib/<arch>-linux-gnu, with
// libnvidia-ml.so.1), of another glibc build than the plugin's image on most hosts. The
// driver's nvidia-smi is dynamically linked: it must run with the image's loader and C library
// and get only the driver's libnvidia-ml preloaded, as NVIDIA's DRA driver runs it, since a
// library path into the driver root makes the loader take the host's libc.so.6 and nvidia-smi
// fail at exec.
func TestTimeSliceWithTheHostsCLibrary(t *testing.T) {
	requireDynamic(t, "/bin/sh")
	for _, v := range []string{"LD_LIBRARY_PATH", "LD_PRELOAD"} {
		t.Setenv(v, "restored after the test")
		_ = os.Unsetenv(v)
	}
	root := t.TempDir()
	if err := nvmlmock.WriteDriverRootOfVersion(root, "570.124.06"); err != nil {
		t.Fatal(err)
	}
	writeForeignLibc(t, filepath.Join(root, nvmlmock.DriverLibDir, "libc.so.6"))
	// The stand-in for nvidia-smi is a shell script: sh is dynamically linked, as nvidia-smi is.
	smi := filepath.Join(root, "usr/bin/nvidia-smi")
	script := `#!/bin/sh
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH-unset} LD_PRELOAD=${LD_PRELOAD-unset} $*" >>"$0.calls"
`
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	ts := timeSlicer(NewOptions(), &driverSource{kind: device.KindGPU, root: root}, device.KindGPU)
	if ts == nil {
		t.Fatal("no time-slicer for a GPU node with a driver root")
	}
	if err := ts.SetTimeSlice(context.Background(), "GPU-1", configapi.TimeSliceLong); err != nil {
		t.Fatalf("nvidia-smi with the host's C library in the driver root: %v", err)
	}
	calls, err := os.ReadFile(smi + ".calls")
	if err != nil {
		t.Fatal(err)
	}
	nvml, err := filepath.EvalSymlinks(filepath.Join(root, nvmlmock.DriverLibDir, "libnvidia-ml.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	want := "LD_LIBRARY_PATH=unset LD_PRELOAD=" + nvml + " compute-policy -i GPU-1 --set-timeslice 3"
	if got := strings.TrimSpace(string(calls)); got != want {
		t.Errorf("nvidia-smi ran as\n  %s\nwant\n  %s", got, want)
	}
}

// requireDynamic skips t where path is statically linked: the loader's choice of libraries is
// what the test is about.
func requireDynamic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return
		}
	}
	t.Skipf("%s is statically linked here", path)
}

// writeForeignLibc writes at path a libc.so.6 that this machine's loader cannot use, as it
// cannot use another glibc build's (a libc.so.6 needs the GLIBC_PRIVATE symbols of its own
// ld.so: "symbol lookup error: .../libc.so.6: undefined symbol: __tunable_is_initialized,
// version GLIBC_PRIVATE" with Debian 13's under Debian 12's loader). That is the file
// $ACCEL_DRA_FOREIGN_LIBC names, if set (another distribution's libc.so.6); otherwise an ELF
// header whose program headers no loader accepts, which fails every dynamically linked program
// it is loaded into the same way, at exec, on every glibc.
func writeForeignLibc(t *testing.T, path string) {
	t.Helper()
	if foreign := os.Getenv("ACCEL_DRA_FOREIGN_LIBC"); foreign != "" {
		b, err := os.ReadFile(foreign)
		if err != nil {
			t.Fatalf("$ACCEL_DRA_FOREIGN_LIBC: %v", err)
		}
		if err := os.WriteFile(path, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return
	}
	machine := elf.EM_X86_64
	if runtime.GOARCH == "arm64" {
		machine = elf.EM_AARCH64
	}
	h := elf.Header64{
		Type: uint16(elf.ET_DYN), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Ehsize: 64, Phentsize: 1, Phnum: 1, Phoff: 64,
	}
	copy(h.Ident[:], []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)})
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	b.Write(make([]byte, 64))
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
}
