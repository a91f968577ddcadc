package devchar

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/specs-go"
)

// canMknod reports whether this process may make character devices (root with CAP_MKNOD, in a
// mount that is not nodev); the tests that need it skip otherwise, saying why.
func canMknod(t *testing.T) bool {
	t.Helper()
	p := filepath.Join(t.TempDir(), "probe")
	if err := unix.Mknod(p, unix.S_IFCHR, int(unix.Mkdev(1, 3))); err != nil {
		return false
	}
	f, err := os.Open(p) // a nodev mount refuses to open what it let be made
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

func spec(nodes ...*specs.DeviceNode) *specs.Spec {
	return &specs.Spec{Devices: []specs.Device{{Name: "d", ContainerEdits: specs.ContainerEdits{DeviceNodes: nodes}}}}
}

func TestEnsure(t *testing.T) {
	if !canMknod(t) {
		t.Skip("needs CAP_MKNOD and a mount without nodev to make character devices (CI runs as root)")
	}
	type layout struct {
		hostDev map[string][2]int64 // nodes under the host's /dev: path -> numbers
		links   map[string]string   // links already under /dev/char: name -> target
	}
	tests := []struct {
		name   string
		layout layout
		nodes  []*specs.DeviceNode
		want   map[string]string // name -> target; "own" for the plugin's own node
	}{{
		name:   "host node under /dev: the link names it",
		layout: layout{hostDev: map[string][2]int64{"nvidia0": {195, 0}}},
		nodes:  []*specs.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}},
		want:   map[string]string{"195:0": "/dev/nvidia0"},
	}, {
		name:  "the GPU operator's layout: the node is only in the driver root, the plugin's own node stands in",
		nodes: []*specs.DeviceNode{{Path: "/dev/nvidia0", HostPath: "/run/nvidia/driver/dev/nvidia0", Type: "c", Major: 195, Minor: 0}},
		want:  map[string]string{"195:0": "own"},
	}, {
		name:   "a host node with other numbers is not named",
		layout: layout{hostDev: map[string][2]int64{"nvidia0": {195, 1}}},
		nodes:  []*specs.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}},
		want:   map[string]string{"195:0": "own"},
	}, {
		name:   "a link that is there is left as it is (udev's, the validator's)",
		layout: layout{links: map[string]string{"195:0": "/run/nvidia/driver/dev/nvidia0"}},
		nodes:  []*specs.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}},
		want:   map[string]string{"195:0": "/run/nvidia/driver/dev/nvidia0"},
	}, {
		name: "a MIG caps node built from /proc/devices, and a block device ignored",
		nodes: []*specs.DeviceNode{
			{Path: "/dev/nvidia-caps/nvidia-cap21", Type: "c", Major: 508, Minor: 21},
			{Path: "/dev/sda", Type: "b", Major: 8, Minor: 0},
		},
		want: map[string]string{"508:21": "own"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			hostDev, charDir, own := filepath.Join(dir, "dev"), filepath.Join(dir, "dev", "char"), filepath.Join(dir, "plugin", "dev-char")
			if err := os.MkdirAll(charDir, 0o755); err != nil {
				t.Fatal(err)
			}
			for p, n := range tc.layout.hostDev {
				if err := unix.Mknod(filepath.Join(hostDev, p), unix.S_IFCHR, int(unix.Mkdev(uint32(n[0]), uint32(n[1])))); err != nil {
					t.Fatal(err)
				}
			}
			for name, target := range tc.layout.links {
				if err := os.Symlink(target, filepath.Join(charDir, name)); err != nil {
					t.Fatal(err)
				}
			}
			l := &Linker{Dir: charDir, HostDev: hostDev, OwnDir: own}
			if err := l.Ensure(spec(tc.nodes...)); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(charDir)
			if len(entries) != len(tc.want) {
				t.Errorf("/dev/char holds %d entries, want %d", len(entries), len(tc.want))
			}
			for name, want := range tc.want {
				got, err := os.Readlink(filepath.Join(charDir, name))
				if err != nil {
					t.Fatalf("/dev/char/%s: %v", name, err)
				}
				if want == "own" {
					want = filepath.Join(own, name)
					var maj, min int64
					if _, err := fmt.Sscanf(name, "%d:%d", &maj, &min); err != nil || !isChar(want, maj, min) {
						t.Errorf("%s is not the character device %s", want, name)
					}
				}
				if got != want {
					t.Errorf("/dev/char/%s -> %s, want -> %s", name, got, want)
				}
			}
		})
	}
}

// TestEnsureOwnNodeGone: the plugin's own node removed (a cleanup, a wiped plugin directory)
// while its link stays: a dangling link of the plugin's is made good again, since systemd would
// drop the rule as if there were no link.
func TestEnsureOwnNodeGone(t *testing.T) {
	if !canMknod(t) {
		t.Skip("needs CAP_MKNOD and a mount without nodev to make character devices (CI runs as root)")
	}
	dir := t.TempDir()
	l := &Linker{Dir: filepath.Join(dir, "char"), OwnDir: filepath.Join(dir, "own")}
	s := spec(&specs.DeviceNode{Path: "/dev/nvidia0", HostPath: "/run/nvidia/driver/dev/nvidia0", Type: "c", Major: 195, Minor: 0})
	if err := l.Ensure(s); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(l.OwnDir); err != nil {
		t.Fatal(err)
	}
	// A new process (the plugin restarted) knows nothing of what it linked before.
	l = &Linker{Dir: l.Dir, OwnDir: l.OwnDir}
	if err := l.Ensure(s); err != nil {
		t.Fatal(err)
	}
	if !isChar(filepath.Join(l.OwnDir, "195:0"), 195, 0) {
		t.Errorf("the plugin's own node for 195:0 was not made again under a link that names it")
	}
}

// TestEnsureFailure: where nothing can be linked (here /dev/char is not a directory), Ensure says
// which nodes and why, and goes on past the first.
func TestEnsureFailure(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "char")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l := &Linker{Dir: notDir, HostDev: filepath.Join(dir, "dev"), OwnDir: filepath.Join(dir, "own")}
	err := l.Ensure(spec(&specs.DeviceNode{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}, &specs.DeviceNode{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1}))
	if err == nil || !strings.Contains(err.Error(), "/dev/char/195:0") || !strings.Contains(err.Error(), "/dev/char/195:1") {
		t.Errorf("Ensure into a /dev/char that is a file: %v, want an error naming both nodes", err)
	}
}
