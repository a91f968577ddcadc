package driver

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/apimachinery/pkg/types"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// injectedDevices resolves ids against the CDI directory as a runtime does when it creates a
// container, and returns the devices the container gets; when says which container, for the
// failure's message.
func (e *env) injectedDevices(t *testing.T, when string, ids []string) []oci.LinuxDevice {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(e.cdiDir()), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, ids...); err != nil {
		t.Fatalf("%s: a container of the claim cannot start: InjectDevices(%v): %v (unresolved %v)", when, ids, err, unresolved)
	}
	return spec.Linux.Devices
}

// containerNodes are the paths of the device nodes injectedDevices gives a container, sorted.
func (e *env) containerNodes(t *testing.T, ids []string) []string {
	t.Helper()
	var paths []string
	for _, d := range e.injectedDevices(t, "container", ids) {
		paths = append(paths, d.Path)
	}
	slices.Sort(paths)
	return paths
}

func paths(nodes []device.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Path)
	}
	return out
}

// TestDRMLoadedAfterPrepare: claims prepared on a machine without nvidia-drm (their records
// hold each GPU's /dev/nvidiaN alone, as the previous release or a host before the module was
// loaded wrote them) meet the same GPUs with their /dev/dri card and render nodes after a
// restart. The GPUs are the same devices: the claims are restored, not refused; their records
// take the new nodes and their CDI specs follow, so that a container of the claim restarted with
// the device IDs the kubelet got at the first prepare starts, with the DRM nodes; MIG devices
// get none; and unprepare cleans up.
func TestDRMLoadedAfterPrepare(t *testing.T) {
	tests := map[string]struct {
		before, after string
		static        bool
		devices       []string
		// dri are the DRM nodes each device has after nvidia-drm is loaded.
		dri map[string][]string
		// fresh is a device prepared after the restart, with its DRM nodes.
		fresh    string
		freshDRI []string
	}{
		"DGX H100, BMC holds card0": {
			before: "h100-8x-2numa", after: "h100-8x-2numa-drm", static: true,
			devices: []string{"gpu-1", "gpu-6"},
			dri: map[string][]string{
				"gpu-1": {"/dev/dri/card2", "/dev/dri/renderD129"},
				"gpu-6": {"/dev/dri/card7", "/dev/dri/renderD134"},
			},
			fresh: "gpu-2", freshDRI: []string{"/dev/dri/card3", "/dev/dri/renderD130"},
		},
		"static MIG beside whole GPUs": {
			before: "mig-mixed", after: "mig-mixed-drm", static: true,
			devices: []string{"gpu-3", "gpu-0-mig-3g20gb-4"},
			dri: map[string][]string{
				"gpu-3": {"/dev/dri/card3", "/dev/dri/renderD131"},
			},
			fresh: "gpu-0-mig-2g10gb-0",
		},
		"dynamic MIG beside a whole GPU": {
			before: "mig-mixed", after: "mig-mixed-drm",
			devices: []string{"gpu-4", "gpu-1-mig-1g5gb-0"},
			dri: map[string][]string{
				"gpu-4": {"/dev/dri/card4", "/dev/dri/renderD132"},
			},
			fresh: "gpu-2-mig-1g10gb-0",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := startMIGEnv(t, tc.before, tc.static)
			var results []result
			for _, d := range tc.devices {
				results = append(results, result{Device: d})
			}
			r := e.prepare(claim("a", results))
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			var ids []string
			for _, d := range r.Devices {
				ids = append(ids, d.CDIDeviceIDs...)
			}
			before := e.containerNodes(t, ids)
			for _, p := range before {
				if strings.HasPrefix(p, "/dev/dri/") {
					t.Fatalf("%s has DRM nodes before nvidia-drm is loaded: %v", tc.before, before)
				}
			}

			e.profile = tc.after
			rep := e.restart()
			if len(rep.Refused) != 0 || !slices.Equal(rep.Restored, []string{"a"}) {
				t.Fatalf("restart with nvidia-drm loaded: report %+v, want the claim restored", rep)
			}
			for _, msg := range e.events.msgs {
				t.Errorf("event %s", msg)
			}
			rec := e.record("a")
			var want []string
			for _, pd := range rec.Devices {
				inv := e.inv.Lookup()[pd.Device]
				var dri []string
				for _, n := range pd.Nodes {
					if strings.HasPrefix(n.Path, "/dev/dri/") {
						dri = append(dri, n.Path)
					}
				}
				if diff := cmp.Diff(tc.dri[pd.Device], dri); diff != "" {
					t.Errorf("record of %s: DRM nodes (-want +got):\n%s", pd.Device, diff)
				}
				if pd.MIG == nil && !slices.EqualFunc(pd.Nodes, inv.Nodes, device.Node.Same) {
					t.Errorf("record of %s: nodes %v, the GPU's are %v", pd.Device, paths(pd.Nodes), paths(inv.Nodes))
				}
				want = append(want, paths(pd.Nodes)...)
			}
			for _, p := range before {
				if !strings.HasPrefix(p, "/dev/nvidia") || slices.Contains(want, p) {
					continue
				}
				want = append(want, p)
			}
			slices.Sort(want)
			want = slices.Compact(want)
			// The kubelet restarts a container of the claim with the IDs it got at the first
			// prepare; the spec must resolve them, and give what the record holds.
			after := e.containerNodes(t, ids)
			if diff := cmp.Diff(want, after); diff != "" {
				t.Errorf("restarted container's nodes (-record and control nodes +spec):\n%s", diff)
			}
			// The kubelet's next prepare of the claim gets the same IDs.
			r2 := e.prepare(claim("a", results))
			if r2.Err != nil {
				t.Fatalf("prepare again after nvidia-drm was loaded: %v", r2.Err)
			}
			if diff := cmp.Diff(r.Devices, r2.Devices); diff != "" {
				t.Errorf("prepare again: devices (-first +again):\n%s", diff)
			}

			// A claim prepared now gets the DRM nodes of a whole GPU, none for a MIG device.
			f := e.prepare(claim("fresh", []result{{Device: tc.fresh}}))
			if f.Err != nil {
				t.Fatal(f.Err)
			}
			var got []string
			for _, p := range e.containerNodes(t, f.Devices[0].CDIDeviceIDs) {
				if strings.HasPrefix(p, "/dev/dri/") {
					got = append(got, p)
				}
			}
			if diff := cmp.Diff(tc.freshDRI, got); diff != "" {
				t.Errorf("claim prepared with nvidia-drm loaded, %s: DRM nodes (-want +got):\n%s", tc.fresh, diff)
			}

			for _, uid := range []types.UID{"a", "fresh"} {
				if err := e.unprepare(uid); err != nil {
					t.Fatalf("unprepare %s: %v", uid, err)
				}
				if exists(e.recordPath(uid)) || exists(e.specPath(uid)) {
					t.Errorf("unprepare %s left its record or spec", uid)
				}
			}
		})
	}
}
