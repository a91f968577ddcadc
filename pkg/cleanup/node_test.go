package cleanup

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
)

const (
	driver  = "gpu.accel-dra.io"
	bootNow = "boot-now"
	podUID  = "0f8e0c6e-8f2a-4c59-a3f8-5e1f3c2b7a10"
)

// node is a fake node's directories: the kubelet's plugins and registry directories and the
// CDI directory, as the chart mounts them.
type node struct {
	root                          string
	data, registry, cdiRoot, boot string
}

func newNode(t *testing.T) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{
		root:     root,
		data:     filepath.Join(root, "var/lib/kubelet/plugins", driver),
		registry: filepath.Join(root, "var/lib/kubelet/plugins_registry"),
		cdiRoot:  filepath.Join(root, "var/run/cdi"),
		boot:     filepath.Join(root, "boot_id"),
	}
	for _, d := range []string{n.data, n.registry, n.cdiRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, n.boot, bootNow+"\n")
	return n
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// claim records a prepared claim of boot with its CDI spec, as the plugin does.
func (n *node) claim(t *testing.T, uid, boot string) {
	t.Helper()
	store, err := checkpoint.Open(filepath.Join(n.data, "checkpoint"), boot)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	if err := store.Put(checkpoint.Claim{UID: uid, Namespace: "default", Name: "claim-" + uid[:4], State: checkpoint.StatePrepareCompleted}); err != nil {
		t.Fatal(err)
	}
	n.spec(t, uid)
}

func (n *node) spec(t *testing.T, uid string) {
	t.Helper()
	w := cdi.New(n.cdiRoot, device.KindGPU)
	spec := &specs.Spec{Version: "0.6.0", Kind: cdi.Kind(device.KindGPU), Devices: []specs.Device{{
		Name: uid + "-gpu-0", ContainerEdits: specs.ContainerEdits{Env: []string{"A=1"}},
	}}}
	if err := w.Write(uid, spec); err != nil {
		t.Fatal(err)
	}
}

func (n *node) options() NodeOptions {
	return NodeOptions{DriverName: driver, Kind: device.KindGPU, PluginDataDir: n.data, CDIRoot: n.cdiRoot, RegistrarDir: n.registry, BootIDFile: n.boot}
}

// files lists every file and directory under the node's root, relative to it.
func (n *node) files(t *testing.T) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(n.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != n.root {
			rel, _ := filepath.Rel(n.root, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

const (
	uidA = "11111111-1111-1111-1111-111111111111"
	uidB = "22222222-2222-2222-2222-222222222222"
	uidC = "33333333-3333-3333-3333-333333333333" // another release's claim
)

// TestNode: what the clean-up removes from a node and what it keeps.
func TestNode(t *testing.T) {
	n := newNode(t)
	// A plugin that ran and stopped: records of an earlier boot (their containers died with
	// it) and their specs, the hook it installed, the mock's machine, its instance lock, the
	// registration sockets of a plugin that did not stop cleanly.
	n.claim(t, uidA, "boot-before")
	n.claim(t, uidB, "boot-before")
	write(t, filepath.Join(n.data, "nvidia-cdi-hook"), "#!")
	write(t, filepath.Join(n.data, "mock/nvidia-machine/state.json"), "{}")
	write(t, filepath.Join(n.data, "checkpoint/instances/dead.lock"), "")
	write(t, filepath.Join(n.registry, driver+"-reg.sock"), "")
	write(t, filepath.Join(n.registry, driver+"-"+podUID+"-reg.sock"), "")
	// What is not this driver's: another driver's socket and data, another claim's spec.
	write(t, filepath.Join(n.registry, "npu.accel-dra.io-reg.sock"), "")
	write(t, filepath.Join(n.registry, driver+"-b-reg.sock"), "")
	write(t, filepath.Join(n.root, "var/lib/kubelet/plugins/npu.accel-dra.io/checkpoint/lock"), "")
	n.spec(t, uidC)

	rep, err := Node(context.Background(), n.options())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{uidA, uidB}; !slices.Equal(rep.Records, want) || !slices.Equal(rep.Specs, want) {
		t.Errorf("records %v, specs %v; want both %v", rep.Records, rep.Specs, want)
	}
	want := []string{
		"boot_id",
		"var", "var/lib", "var/lib/kubelet", "var/lib/kubelet/plugins",
		"var/lib/kubelet/plugins/npu.accel-dra.io", "var/lib/kubelet/plugins/npu.accel-dra.io/checkpoint", "var/lib/kubelet/plugins/npu.accel-dra.io/checkpoint/lock",
		"var/lib/kubelet/plugins_registry", "var/lib/kubelet/plugins_registry/gpu.accel-dra.io-b-reg.sock", "var/lib/kubelet/plugins_registry/npu.accel-dra.io-reg.sock",
		"var/run", "var/run/cdi", "var/run/cdi/accel-dra.io-gpu_" + uidC + ".json",
	}
	if got := n.files(t); !slices.Equal(got, want) {
		t.Errorf("left on the node:\n%q\nwant:\n%q", got, want)
	}
	// Again: nothing left to do is no error.
	if _, err := Node(context.Background(), n.options()); err != nil {
		t.Errorf("second run: %v", err)
	}
}

// TestNodeRefusesPreparedClaims: a claim prepared in this boot is refused, with its name, and
// nothing at all is removed; forced, it goes.
func TestNodeRefusesPreparedClaims(t *testing.T) {
	n := newNode(t)
	n.claim(t, uidA, "boot-before")
	n.claim(t, uidB, bootNow)
	write(t, filepath.Join(n.registry, driver+"-reg.sock"), "")
	before := n.files(t)

	_, err := Node(context.Background(), n.options())
	var prepared *PreparedError
	if !errors.As(err, &prepared) || len(prepared.Claims) != 1 || prepared.Claims[0].UID != uidB {
		t.Fatalf("error %v, want a refusal naming claim %s", err, uidB)
	}
	t.Log(err)
	if after := n.files(t); !slices.Equal(after, before) {
		t.Errorf("the refusal changed the node:\nbefore %q\nafter  %q", before, after)
	}

	o := n.options()
	o.Force = true
	rep, err := Node(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{uidB, uidA}; !slices.Equal(rep.Records, want) {
		t.Errorf("forced: records %v, want %v", rep.Records, want)
	}
	if _, err := os.Stat(n.data); !os.IsNotExist(err) {
		t.Errorf("forced: %s still there (%v)", n.data, err)
	}
}

// TestNodeWaitsForThePlugin: while a plugin process holds its instance lock (its pod is still
// being deleted), the clean-up removes nothing.
func TestNodeWaitsForThePlugin(t *testing.T) {
	n := newNode(t)
	store, err := checkpoint.Open(filepath.Join(n.data, "checkpoint"), bootNow)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	locked, err := store.Lock()
	if err != nil {
		t.Fatal(err)
	}
	release, err := locked.Register("live-plugin")
	locked.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	before := n.files(t)
	if _, err := Node(context.Background(), n.options()); err == nil {
		t.Fatal("cleaned up under a live plugin")
	} else {
		t.Log(err)
	}
	if after := n.files(t); !slices.Equal(after, before) {
		t.Errorf("changed the node under a live plugin:\nbefore %q\nafter  %q", before, after)
	}
	release()
	if _, err := Node(context.Background(), n.options()); err != nil {
		t.Fatalf("after the plugin ended: %v", err)
	}
}

// TestNodeUnmounts: an MPS daemon's /dev/shm tmpfs left under the data directory is unmounted
// before the directory goes (RemoveAll would otherwise empty a live mount). Needs CAP_SYS_ADMIN.
func TestNodeUnmounts(t *testing.T) {
	n := newNode(t)
	shm := filepath.Join(n.data, "mps/daemon-1/shm")
	if err := os.MkdirAll(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("test-shm", shm, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(shm, unix.MNT_DETACH) })
	write(t, filepath.Join(shm, "mps-pipe"), "x")
	rep, err := Node(context.Background(), n.options())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Unmounted, []string{shm}) {
		t.Errorf("unmounted %v, want %v", rep.Unmounted, []string{shm})
	}
	if _, err := os.Stat(n.data); !os.IsNotExist(err) {
		t.Errorf("%s still there (%v)", n.data, err)
	}
}

func TestOwnSocket(t *testing.T) {
	for name, want := range map[string]bool{
		driver + "-reg.sock":                  true,
		driver + "-" + podUID + "-reg.sock":   true,
		driver + "-AAAAAAAAAAA-reg.sock":      true,
		driver + "-b-reg.sock":                false,
		"npu.accel-dra.io-reg.sock":           false,
		"gpu.accel-dra.io-two.x-reg.sock":     false,
		driver + "-" + podUID + "-other.sock": false,
	} {
		if got := ownSocket(driver, name); got != want {
			t.Errorf("ownSocket(%s) = %v, want %v", name, got, want)
		}
	}
}

// listen serves a unix socket at p until the test ends, as a live plugin's registration socket.
func listen(t *testing.T, p string) {
	t.Helper()
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
}

// digest is every file under dir with its mode and content, to compare byte for byte.
func digest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		v := info.Mode().String()
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNodeNVIDIACompat: in NVIDIA's compatibility mode the plugin shares the driver name
// gpu.nvidia.com with NVIDIA's driver (docs/migrate-from-nvidia.md). The clean-up removes the
// mode's own directory (plugins/gpu.nvidia.com-accel-dra) and its own dead registration
// sockets, and leaves NVIDIA's directory (its checkpoint.json, for a rollback), NVIDIA's
// registration socket and NVIDIA's CDI specs as they were, byte for byte, forced or not.
func TestNodeNVIDIACompat(t *testing.T) {
	const nvidia = "gpu.nvidia.com"
	for _, force := range []bool{false, true} {
		n := newNode(t)
		plugins := filepath.Dir(n.data)
		n.data = filepath.Join(plugins, nvidia+"-accel-dra")
		nvidiaDir := filepath.Join(plugins, nvidia)
		// What NVIDIA's driver leaves for a rollback, and its plugin still serving (a node that
		// was rolled back, or one where the clean-up was run by hand).
		write(t, filepath.Join(nvidiaDir, "checkpoint.json"), `{"checksum":1,"v2":{"preparedClaims":{}}}`)
		write(t, filepath.Join(n.cdiRoot, "k8s.gpu.nvidia.com-claim_abc.json"), "{}")
		listen(t, filepath.Join(nvidiaDir, "dra.sock"))
		if force {
			// NVIDIA's plugin not running at that moment (restarting, or rolled back and not
			// yet scheduled): its socket is still its own.
			write(t, filepath.Join(n.registry, nvidia+"-reg.sock"), "")
		} else {
			listen(t, filepath.Join(n.registry, nvidia+"-reg.sock"))
		}
		// accel-dra's: records of an earlier boot, and the sockets of a plugin pod that died.
		n.claim(t, uidA, "boot-before")
		write(t, filepath.Join(n.registry, nvidia+"-"+podUID+"-reg.sock"), "")
		keep := digest(t, nvidiaDir)
		maps.Copy(keep, digest(t, n.registry))
		delete(keep, filepath.Join(n.registry, nvidia+"-"+podUID+"-reg.sock"))
		delete(keep, n.registry)
		keep[filepath.Join(n.cdiRoot, "k8s.gpu.nvidia.com-claim_abc.json")] = "-rw-r--r-- {}"

		o := n.options()
		o.DriverName, o.SharedName, o.Force = nvidia, true, force
		rep, err := Node(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Records, []string{uidA}) {
			t.Errorf("force=%v: records %v, want %v", force, rep.Records, []string{uidA})
		}
		got := digest(t, nvidiaDir)
		maps.Copy(got, digest(t, n.registry))
		delete(got, n.registry)
		if b, err := os.ReadFile(filepath.Join(n.cdiRoot, "k8s.gpu.nvidia.com-claim_abc.json")); err == nil {
			got[filepath.Join(n.cdiRoot, "k8s.gpu.nvidia.com-claim_abc.json")] = "-rw-r--r-- " + string(b)
		}
		if diff := cmp.Diff(keep, got); diff != "" {
			t.Errorf("force=%v: NVIDIA's directory, sockets or specs changed (-before +after):\n%s", force, diff)
		}
		if _, err := os.Stat(n.data); !os.IsNotExist(err) {
			t.Errorf("force=%v: the mode's own directory %s is still there (%v)", force, n.data, err)
		}
	}
}

// TestNodeRefusesForeignDirectory: with a shared driver name the data directory named after
// the driver is the other driver's: a clean-up told to remove it (a hand-written command,
// an old chart) refuses and removes nothing.
func TestNodeRefusesForeignDirectory(t *testing.T) {
	n := newNode(t)
	nvidiaDir := filepath.Join(filepath.Dir(n.data), "gpu.nvidia.com")
	write(t, filepath.Join(nvidiaDir, "checkpoint.json"), "{}")
	before := n.files(t)
	o := n.options()
	o.DriverName, o.SharedName, o.PluginDataDir, o.Force = "gpu.nvidia.com", true, nvidiaDir, true
	_, err := Node(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "gpu.nvidia.com-accel-dra") {
		t.Fatalf("error %v, want a refusal pointing to the mode's own directory", err)
	}
	if after := n.files(t); !slices.Equal(after, before) {
		t.Errorf("the refusal changed the node:\nbefore %q\nafter  %q", before, after)
	}
}

// TestNodeKeepsLiveSockets: a registration socket that a process answers on belongs to a plugin
// that runs (the clean-up runs once the release's plugins are gone): it stays, in every mode.
func TestNodeKeepsLiveSockets(t *testing.T) {
	n := newNode(t)
	live := filepath.Join(n.registry, driver+"-reg.sock")
	dead := filepath.Join(n.registry, driver+"-"+podUID+"-reg.sock")
	listen(t, live)
	write(t, dead, "")
	rep, err := Node(context.Background(), n.options())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live socket went: %v (removed %v)", err, rep.Removed)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead socket is still there: %v", err)
	}
}
