package nodeplugin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/metrics"
)

// TestDriverChange: when the driver's files change (an upgrade), the watch recomputes the
// node-common CDI edits; the spec of a claim prepared before the change and the spec of one
// prepared after both carry the new driver's files, a claim unprepared before the change gets
// no spec back, and a change that leaves the edits as they were rewrites nothing.
func TestDriverChange(t *testing.T) {
	const node = "node-a"
	for _, tc := range []struct {
		name string
		// open returns the backend the plugin enumerates with, and two changes of the driver
		// under root: noop changes its files without changing the edits, upgrade changes them.
		open func(t *testing.T, o *Options) (be device.Backend, noop, upgrade func(root string))
		// before is a container path the edits mount before the upgrade and not after;
		// after is one they mount after it and not before ("" for none).
		before, after string
	}{{
		name: "gpu",
		open: func(t *testing.T, o *Options) (device.Backend, func(string), func(string)) {
			o.Backend = backend.Mock
			srv, err := nvmlmock.NewServer("h100-8x-2numa", node)
			if err != nil {
				t.Fatal(err)
			}
			noop := func(root string) {
				// A file next to the driver's libraries that is not the driver's.
				if err := os.WriteFile(filepath.Join(root, nvmlmock.DriverLibDir, "libunrelated.so.1"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			upgrade := func(root string) {
				// NVML initialised anew reports the new driver's version (the plugin opens a new
				// backend for it; here the same mock machine with the new version).
				srv.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS }
				if err := nvmlmock.WriteDriverRoot(root, srv); err != nil {
					t.Fatal(err)
				}
			}
			return srv.Backend(), noop, upgrade
		},
		before: "/usr/lib64/libcuda.so.570.124.06",
		after:  "/usr/lib64/libcuda.so.580.65.06",
	}, {
		name: "npu",
		open: func(t *testing.T, o *Options) (device.Backend, func(string), func(string)) {
			o.Backend = backend.NPUMock
			be, err := backend.New(context.Background(), backend.Options{Name: backend.NPUMock, NodeName: node, MockDir: o.MockDir})
			if err != nil {
				t.Fatal(err)
			}
			noop := func(root string) {
				// A new version.info is a new file at the same path: the mount stays the same.
				p := filepath.Join(root, "usr/local/Ascend/driver/version.info")
				if err := os.WriteFile(p+".new", []byte("Version=25.0.rc1\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(p+".new", p); err != nil {
					t.Fatal(err)
				}
			}
			upgrade := func(root string) {
				// A driver without the DCMI library: it is no longer mounted.
				if err := os.RemoveAll(filepath.Join(root, "usr/local/dcmi")); err != nil {
					t.Fatal(err)
				}
			}
			return be, noop, upgrade
		},
		before: "/usr/local/dcmi",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			o := NewOptions()
			o.NodeName, o.MockDir = node, t.TempDir()
			o.PluginDataDir, o.NVIDIACDIHookSource = t.TempDir(), fakeHook(t)
			be, noop, upgrade := tc.open(t, o)
			inv, src := enumerateSource(ctx, t, o, be)
			if lib, ok := be.(interface{ Library() nvml.Interface }); ok {
				src.openNVML = func(context.Context) (nvml.Interface, func(), error) { return lib.Library(), func() {}, nil }
			}
			edits, err := src.edits(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_ = be.Close()
			driverName := GPUDriverName
			if inv.Kind == device.KindNPU {
				driverName = NPUDriverName
			}
			store, err := checkpoint.Open(filepath.Join(t.TempDir(), "checkpoint"), "boot-1")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			writer := cdi.New(t.TempDir(), inv.Kind)
			drv, err := driver.New(ctx, driver.Options{
				DriverName: driverName, NodeName: node, Inventory: inv, CDI: writer,
				CommonEdits: edits, State: store, Metrics: metrics.NewPlugin(driverName),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(drv.Close)
			prepare := func(uid string, dev int) {
				t.Helper()
				c := &resourceapi.ResourceClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)},
					Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
						Results: []resourceapi.DeviceRequestAllocationResult{{Request: "acc", Driver: driverName, Pool: node, Device: inv.Devices[dev].Name}},
					}}},
				}
				res, err := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
				if err != nil || res[c.UID].Err != nil {
					t.Fatalf("prepare %s: %v %v", uid, err, res[c.UID].Err)
				}
			}
			mounts := func(uid string) []string {
				t.Helper()
				var out []string
				for _, m := range readSpec(t, writer, uid).ContainerEdits.Mounts {
					out = append(out, m.ContainerPath)
				}
				return out
			}
			prepare("old", 0)
			prepare("gone", 1)
			if res, err := drv.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "gone"}}); err != nil || res["gone"] != nil {
				t.Fatalf("unprepare: %v %v", err, res["gone"])
			}
			if m := mounts("old"); !slices.Contains(m, tc.before) {
				t.Fatalf("before the change the spec does not mount %s: %v", tc.before, m)
			}

			w := newDriverWatch(src, drv, edits, nil)
			m := metrics.NewPlugin(driverName)
			w.changed = m.CountDriverChange
			if changed, err := w.check(ctx); changed || err != nil {
				t.Fatalf("unchanged driver: changed %v, %v", changed, err)
			}
			noop(src.root)
			if changed, err := w.check(ctx); changed || err != nil {
				t.Fatalf("a change that leaves the edits as they are: changed %v, %v", changed, err)
			}
			upgrade(src.root)
			if got := testutil.ToFloat64(m.DriverChanges); got != 0 {
				t.Errorf("accel_dra_driver_changes_total %v before the upgrade, want 0", got)
			}
			if changed, err := w.check(ctx); !changed || err != nil {
				t.Fatalf("driver upgrade not noticed: changed %v, %v", changed, err)
			}
			if got := testutil.ToFloat64(m.DriverChanges); got != 1 {
				t.Errorf("accel_dra_driver_changes_total %v after the upgrade, want 1", got)
			}
			prepare("new", 2)
			for _, uid := range []string{"old", "new"} {
				m := mounts(uid)
				if slices.Contains(m, tc.before) || (tc.after != "" && !slices.Contains(m, tc.after)) {
					t.Errorf("claim %s after the upgrade mounts %v; want %q and not %q", uid, m, tc.after, tc.before)
				}
			}
			if _, err := os.Stat(writer.Path("gone")); !os.IsNotExist(err) {
				t.Errorf("the spec of an unprepared claim came back: %v", err)
			}
			if changed, err := w.check(ctx); changed || err != nil {
				t.Fatalf("second check after the upgrade: changed %v, %v", changed, err)
			}
		})
	}
}

// TestPluginPath: the fingerprint stats the driver's files where this process sees them, when
// the edits name them as the runtime on the host sees them.
func TestPluginPath(t *testing.T) {
	for _, tc := range []struct{ root, hostRoot, host, want string }{
		{"/driver-root", "", "/driver-root/usr/lib64/libcuda.so.1", "/driver-root/usr/lib64/libcuda.so.1"},
		{"/driver-root", "/", "/usr/lib64/libcuda.so.1", "/driver-root/usr/lib64/libcuda.so.1"},
		{"/driver-root", "/run/nvidia/driver", "/run/nvidia/driver/usr/bin/nvidia-smi", "/driver-root/usr/bin/nvidia-smi"},
		// Outside the host's driver root, and a sibling that only shares its prefix.
		{"/driver-root", "/run/nvidia/driver", "/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket"},
		{"/driver-root", "/run/nvidia/driver", "/run/nvidia/driver2/x", "/run/nvidia/driver2/x"},
	} {
		s := &driverSource{root: tc.root, hostRoot: tc.hostRoot}
		if got := s.pluginPath(tc.host); got != tc.want {
			t.Errorf("root %s, host root %s: %s -> %s, want %s", tc.root, tc.hostRoot, tc.host, got, tc.want)
		}
	}
}

// TestControlNodesRewritten: a claim prepared while nvidia-uvm was not loaded gets the module's
// nodes in its spec once the watch sees them, so that its containers get them when they start
// again; the spec of a claim unprepared meanwhile does not come back, and unchanged nodes
// rewrite nothing.
func TestControlNodesRewritten(t *testing.T) {
	const node = "node-a"
	ctx := context.Background()
	srv, err := nvmlmock.NewServer("h100-8x-2numa", node)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetUVM(nvmlmock.UVMNotLoaded)
	be := srv.Backend()
	inv, err := be.Enumerate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = be.Close()
	store, err := checkpoint.Open(filepath.Join(t.TempDir(), "checkpoint"), "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	writer := cdi.New(t.TempDir(), inv.Kind)
	drv, err := driver.New(ctx, driver.Options{DriverName: GPUDriverName, NodeName: node, Inventory: inv, CDI: writer, State: store, Metrics: metrics.NewPlugin(GPUDriverName)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close)
	for i, uid := range []string{"early", "gone"} {
		c := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: GPUDriverName, Pool: node, Device: inv.Devices[i].Name}},
			}}},
		}
		if res, err := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); err != nil || res[c.UID].Err != nil {
			t.Fatalf("prepare %s: %v %v", uid, err, res[c.UID].Err)
		}
	}
	if res, err := drv.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "gone"}}); err != nil || res["gone"] != nil {
		t.Fatalf("unprepare: %v %v", err, res["gone"])
	}
	nodes := func(uid string) []string {
		t.Helper()
		var out []string
		for _, n := range readSpec(t, writer, uid).ContainerEdits.DeviceNodes {
			out = append(out, n.Path)
		}
		return out
	}
	rewrites := &countingSink{EditsSink: drv}
	w := newDriverWatch(&driverSource{kind: inv.Kind}, rewrites, nil, inv.ResolveControlNodes)
	if err := w.checkControl(ctx); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(nodes("early"), "/dev/nvidia-uvm") {
		t.Fatalf("nvidia-uvm in a spec before it was loaded: %v", nodes("early"))
	}
	calls := rewrites.calls
	srv.SetUVM(nvmlmock.UVMModuleOnly)
	if err := w.checkControl(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nodes("early"); !slices.Contains(got, "/dev/nvidia-uvm") || !slices.Contains(got, "/dev/nvidia-uvm-tools") {
		t.Errorf("spec of a claim prepared before nvidia-uvm was loaded, after the watch: %v", got)
	}
	if _, err := os.Stat(writer.Path("gone")); !os.IsNotExist(err) {
		t.Errorf("the spec of an unprepared claim came back: %v", err)
	}
	if rewrites.calls != calls+1 {
		t.Errorf("%d rewrites for one change of the nodes", rewrites.calls-calls)
	}
	if err := w.checkControl(ctx); err != nil || rewrites.calls != calls+1 {
		t.Errorf("unchanged nodes: %v, %d rewrites", err, rewrites.calls-calls-1)
	}
}

type countingSink struct {
	EditsSink
	calls int
}

func (s *countingSink) SetCommonEdits(ctx context.Context, e *specs.ContainerEdits) (int, error) {
	s.calls++
	return s.EditsSink.SetCommonEdits(ctx, e)
}

// readSpec reads the CDI spec of a claim as the runtime would.
func readSpec(t *testing.T, w *cdi.Writer, uid string) specs.Spec {
	t.Helper()
	data, err := os.ReadFile(w.Path(uid))
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}
