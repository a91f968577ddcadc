package nodeplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestDriverWatchSeesARemountedRoot: the GPU operator's driver container mounts its root file
// system on the driver root, and an upgrade replaces that mount with the new container's,
// whose files are the new version's. The plugin sees the driver root through a bind mount of
// its parent directory with HostToContainer (slave) propagation, as the chart mounts it; the
// driver watch notices the replaced mount and hands the new driver's edits on, with the host's
// paths.
func TestDriverWatchSeesARemountedRoot(t *testing.T) {
	standin.NeedMount(t)
	const node, hostRoot = "node-a", "/run/nvidia/driver"
	dir := t.TempDir()
	host, parent := filepath.Join(dir, "host"), filepath.Join(dir, "driver-root-parent")
	for _, d := range []string{host, parent} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The host's /run/nvidia: a shared mount, as /run is on a systemd host.
	standin.Mount(t, "tmpfs", host, "tmpfs", 0)
	standin.Mount(t, "", host, "", syscall.MS_SHARED)
	if err := os.Mkdir(filepath.Join(host, "driver"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The driver containers' root file systems, one per version.
	versions := map[string]string{"old": "570.124.06", "new": "580.65.06"}
	for name, v := range versions {
		if err := nvmlmock.WriteDriverRootOfVersion(filepath.Join(dir, name), v); err != nil {
			t.Fatal(err)
		}
	}
	install := func(name string) {
		standin.Mount(t, filepath.Join(dir, name), filepath.Join(host, "driver"), "", syscall.MS_BIND|syscall.MS_REC)
	}
	install("old")
	// The plugin's container, started after the driver.
	standin.Mount(t, host, parent, "", syscall.MS_BIND|syscall.MS_REC)
	standin.Mount(t, "", parent, "", syscall.MS_SLAVE|syscall.MS_REC)

	srv, err := nvmlmock.NewServer("h100-8x-2numa", node)
	if err != nil {
		t.Fatal(err)
	}
	version := versions["old"]
	srv.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return version, nvml.SUCCESS }
	be := srv.Backend()
	inv, err := be.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.NodeName, o.Backend, o.NVIDIADriverRoot, o.NVIDIAHostDriverRoot = node, backend.NVML, filepath.Join(parent, "driver"), hostRoot
	o.PluginDataDir, o.NVIDIACDIHookSource = t.TempDir(), fakeHook(t)
	ctx := context.Background()
	src, err := newDriverSource(ctx, o, be, inv.Kind)
	if err != nil {
		t.Fatal(err)
	}
	src.openNVML = func(context.Context) (nvml.Interface, func(), error) { return srv, func() {}, nil }
	edits, err := src.edits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	libcuda := func(e *specs.ContainerEdits, v string) bool {
		return slices.ContainsFunc(e.Mounts, func(m *specs.Mount) bool { return m.HostPath == hostRoot+"/usr/lib64/libcuda.so."+v })
	}
	if !libcuda(edits, versions["old"]) {
		t.Fatalf("the edits do not mount the driver's libcuda at its host path: %+v", edits.Mounts)
	}
	sink := &lastEdits{}
	w := newDriverWatch(src, sink, edits, nil)
	if changed, err := w.check(ctx); changed || err != nil {
		t.Fatalf("unchanged driver: changed %v, %v", changed, err)
	}

	if err := syscall.Unmount(filepath.Join(host, "driver"), syscall.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	version = versions["new"]
	install("new")
	if changed, err := w.check(ctx); !changed || err != nil {
		t.Fatalf("the driver's mount was replaced: changed %v, %v", changed, err)
	}
	if sink.edits == nil || !libcuda(sink.edits, versions["new"]) || libcuda(sink.edits, versions["old"]) {
		t.Errorf("edits after the driver's mount was replaced: %+v; want the new driver's libcuda and not the old one's", sink.edits)
	}
}

type lastEdits struct{ edits *specs.ContainerEdits }

func (s *lastEdits) SetCommonEdits(_ context.Context, e *specs.ContainerEdits) (int, error) {
	s.edits = e
	return 0, nil
}
