package nvml

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/devnode"
	"github.com/accel-dra/accel-dra/pkg/device"
)

const procDevicesSample = `Character devices:
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

// errFS is a /proc whose every file fails to open with err.
type errFS struct{ err error }

func (e errFS) Open(name string) (fs.File, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: e.err}
}

// TestResolveControlNodes: a node in /dev is taken as it is; one missing whose module is loaded
// is specified from /proc/devices and the driver's minor; one whose module is not loaded, or
// the optional nvidia-modeset, is left out; a stat that fails otherwise is an error.
func TestResolveControlNodes(t *testing.T) {
	uvm := device.Node{Path: "/dev/nvidia-uvm", Type: "c", Major: 508, Minor: 0}
	uvmTools := device.Node{Path: "/dev/nvidia-uvm-tools", Type: "c", Major: 508, Minor: 1}
	ctl := device.Node{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}
	modeset := device.Node{Path: "/dev/nvidia-modeset", Type: "c", Major: 195, Minor: 254}
	all := map[string]device.Node{"nvidiactl": ctl, "nvidia-uvm": uvm, "nvidia-uvm-tools": uvmTools, "nvidia-modeset": modeset}
	tests := map[string]struct {
		inDev   []string
		proc    string
		procErr error
		statErr error
		want    []device.Node
		wantErr string
	}{
		"all in /dev":                        {inDev: []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}, want: []device.Node{ctl, uvm, uvmTools, modeset}},
		"uvm loaded, nodes not created":      {inDev: []string{"nvidiactl"}, proc: procDevicesSample, want: []device.Node{ctl, uvm, uvmTools}},
		"uvm not loaded":                     {inDev: []string{"nvidiactl"}, proc: "Character devices:\n195 nvidia\n", want: []device.Node{ctl}},
		"no nodes, driver before 550":        {proc: "Character devices:\n195 nvidia-frontend\n", want: []device.Node{ctl}},
		"no nodes, /proc/devices unreadable": {procErr: fs.ErrPermission, want: []device.Node{}},
		"stat fails otherwise":               {statErr: fs.ErrPermission, wantErr: "permission denied"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			stat := func(p string) (devnode.Info, error) {
				if tc.statErr != nil {
					return devnode.Info{}, &fs.PathError{Op: "stat", Path: p, Err: tc.statErr}
				}
				for _, n := range tc.inDev {
					if filepath.Base(p) == n {
						return devnode.Info{Type: all[n].Type, Major: all[n].Major, Minor: all[n].Minor}, nil
					}
				}
				return devnode.Info{}, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
			}
			var proc fs.FS = fstest.MapFS{"devices": &fstest.MapFile{Data: []byte(tc.proc)}}
			if tc.procErr != nil {
				proc = errFS{tc.procErr}
			}
			r := &controlResolver{nodes: nodeFinder{stat: stat, devRoot: "/host/dev", proc: proc}, logger: logr.Discard()}
			got, err := r.resolve()
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, tc.statErr) {
					t.Fatalf("error %v, want one wrapping %v", err, tc.statErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("control nodes (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkResolveControlNodes is the cost each CDI spec pays for looking the control nodes up
// again, with real stat(2) calls: all nodes in the dev root (symlinks to /dev/null, a character
// device), and none (three misses and a read of the real /proc/devices).
func BenchmarkResolveControlNodes(b *testing.B) {
	present := b.TempDir()
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"} {
		if err := os.Symlink("/dev/null", filepath.Join(present, n)); err != nil {
			b.Fatal(err)
		}
	}
	for name, root := range map[string]string{"present": present, "missing": b.TempDir()} {
		b.Run(name, func(b *testing.B) {
			r := &controlResolver{nodes: nodeFinder{stat: StatDevice, devRoot: root, proc: os.DirFS("/proc")}, logger: logr.Discard()}
			for b.Loop() {
				if _, err := r.resolve(); err != nil {
					b.Fatal(fmt.Errorf("resolve: %w", err))
				}
			}
		})
	}
}
