package devnode

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStat(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "file")
	if err := os.WriteFile(regular, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		path     string
		want     Info
		wantErr  bool
		notExist bool
	}{
		// /dev/null is 1:3, crw-rw-rw- root root, on every Linux host and in every container.
		"char device":  {path: "/dev/null", want: Info{Type: "c", Major: 1, Minor: 3, GID: 0, Mode: 0o666}},
		"regular file": {path: regular, wantErr: true},
		"directory":    {path: dir, wantErr: true},
		"missing":      {path: filepath.Join(dir, "nope"), wantErr: true, notExist: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Stat(tc.path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Stat(%q) error = %v, wantErr %v", tc.path, err, tc.wantErr)
			}
			if tc.notExist != errors.Is(err, fs.ErrNotExist) {
				t.Errorf("errors.Is(%v, fs.ErrNotExist) = %v, want %v", err, !tc.notExist, tc.notExist)
			}
			if got != tc.want {
				t.Errorf("Stat(%q) = %+v, want %+v", tc.path, got, tc.want)
			}
		})
	}
}

// TestOwner: the group and permission bits of a file, as a mock's stand-in node carries them.
func TestOwner(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "davinci0")
	if err := os.WriteFile(p, []byte("236:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o660); err != nil {
		t.Fatal(err)
	}
	// The group the test may give the file: its own primary group unless it is root.
	want := uint32(os.Getegid())
	if os.Geteuid() == 0 {
		want = 4242
		if err := os.Chown(p, -1, int(want)); err != nil {
			t.Fatal(err)
		}
	}
	gid, mode, err := Owner(p)
	if err != nil || gid != want || mode != 0o660 {
		t.Errorf("Owner(%s) = %d, %v, %v; want %d, -rw-rw----, no error", p, gid, mode, err, want)
	}
	if _, _, err := Owner(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Owner of a missing file: %v, want an error matching fs.ErrNotExist", err)
	}
}

func TestParseDev(t *testing.T) {
	tests := map[string]struct {
		in           string
		major, minor int64
		wantErr      bool
	}{
		"plain":          {in: "236:3", major: 236, minor: 3},
		"newline":        {in: "195:255\n", major: 195, minor: 255},
		"no colon":       {in: "236", wantErr: true},
		"empty":          {in: "", wantErr: true},
		"negative minor": {in: "1:-1", wantErr: true},
		"hex":            {in: "0x1:3", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			major, minor, err := ParseDev(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseDev(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if major != tc.major || minor != tc.minor {
				t.Errorf("ParseDev(%q) = %d:%d, want %d:%d", tc.in, major, minor, tc.major, tc.minor)
			}
		})
	}
}

func TestCharMajor(t *testing.T) {
	const procDevices = `Character devices:
  1 mem
  4 /dev/vc/0
 10 misc
195 nvidia
508 nvidia-uvm
509 nvidia-caps
510 nvidia-caps-imex-channels

Block devices:
  8 sd
259 blkext
`
	tests := map[string]struct {
		in, name string
		want     int64
		wantErr  string
	}{
		"dynamic major":          {in: procDevices, name: "nvidia-caps", want: 509},
		"longer name is another": {in: procDevices, name: "nvidia-caps-imex-channels", want: 510},
		"static major":           {in: procDevices, name: "nvidia", want: 195},
		"block device only":      {in: procDevices, name: "sd", wantErr: "no character device sd"},
		"prefix is not a name":   {in: procDevices, name: "nvidia-ca", wantErr: "no character device nvidia-ca"},
		"driver not loaded":      {in: "Character devices:\n  1 mem\n", name: "nvidia-caps", wantErr: "no character device nvidia-caps"},
		"empty":                  {in: "", name: "nvidia-caps", wantErr: "no character device nvidia-caps"},
		"bad major":              {in: "Character devices:\nx nvidia-caps\n", name: "nvidia-caps", wantErr: `invalid major "x" of nvidia-caps`},
		"zero major":             {in: "Character devices:\n  0 nvidia-caps\n", name: "nvidia-caps", wantErr: `invalid major "0"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := CharMajor(strings.NewReader(tc.in), tc.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("CharMajor = %d, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("CharMajor = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestCharMajors: every character device of the list, and only those: a block device of the
// same name does not replace a character device's major.
func TestCharMajors(t *testing.T) {
	const procDevices = `Character devices:
  1 mem
  5 /dev/tty
195 nvidia
234 nvidia-nvswitch
508 nvidia-uvm
509 nvidia-caps

Block devices:
  8 sd
510 nvidia-uvm
`
	got, err := CharMajors(strings.NewReader(procDevices))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"mem": 1, "/dev/tty": 5, "nvidia": 195, "nvidia-nvswitch": 234, "nvidia-uvm": 508, "nvidia-caps": 509}
	if !maps.Equal(got, want) {
		t.Errorf("CharMajors = %v, want %v", got, want)
	}
}
