package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// TestMIGCapsNodesInSpec prepares a MIG device, static (an operator's or a containerised MIG
// manager's) and dynamic (made by the prepare), and gives its spec to the CDI library as a
// runtime does. Each /dev/nvidia-caps node must be fully specified from the driver's /proc
// (nvidia-caps major, DeviceFileMinor, DeviceFileMode), so that the runtime creates it in the
// container although no such node exists where the plugin looks: the mock, like the plugin's
// container, has none.
func TestMIGCapsNodesInSpec(t *testing.T) {
	tests := map[string]struct {
		profile string
		static  bool
		device  string
		gpu     int
	}{
		"static, mig-mixed":   {profile: "mig-mixed", static: true, device: "gpu-0-mig-2g10gb-0", gpu: 0},
		"dynamic, mig-mixed":  {profile: "mig-mixed", device: "gpu-1-mig-1g5gb-0", gpu: 1},
		"dynamic, A100 (DGX)": {profile: "a100-8x-mig", device: "gpu-3-mig-3g20gb-4", gpu: 3},
		"dynamic, H100 (DGX)": {profile: "h100-8x-mig", device: "gpu-6-mig-2g20gb-2", gpu: 6},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := startMIGEnv(t, tc.profile, tc.static)
			r := e.prepare(claim("a", []result{{Device: tc.device}}))
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			// The instance's IDs: the record's for a dynamic device, the inventory's for a
			// static one.
			var gi, ci int
			if pd := e.record("a").Devices[0]; pd.MIG != nil {
				gi, ci = *pd.MIG.GI, *pd.MIG.CI
			} else {
				in := e.inv.Lookup()[tc.device].MIG.Instance
				gi, ci = in.GI, in.CI
			}
			mode := os.FileMode(0o444)
			node := func(minor int) oci.LinuxDevice {
				return oci.LinuxDevice{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor), Type: "c", Major: nvmlmock.CapsMajor, Minor: int64(minor), FileMode: &mode}
			}
			want := []oci.LinuxDevice{node(nvmlmock.CapMinor(tc.gpu, gi, -1)), node(nvmlmock.CapMinor(tc.gpu, gi, ci))}

			check := func(when string, ids []string) {
				t.Helper()
				var got []oci.LinuxDevice
				for _, d := range e.injectedDevices(t, when, ids) {
					if strings.HasPrefix(d.Path, "/dev/nvidia-caps/") {
						got = append(got, d)
					}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: container's caps nodes (-want +got):\n%s", when, diff)
				}
			}
			check("prepared", r.Devices[0].CDIDeviceIDs)
			// The record does not hold the modes (they would be a new record version); a spec
			// written again from it, after a restart that found the CDI directory wiped, gets
			// them from the driver again.
			e.restartWithoutSpecs()
			r = e.prepare(claim("a", []result{{Device: tc.device}}))
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			check("written again from the record", r.Devices[0].CDIDeviceIDs)
		})
	}
}

// TestStaticMIGRecordFromBeforeFileModes: a static MIG claim prepared by a plugin that recorded
// caps nodes without their mode (it stat-ed them) is the same device after an upgrade, whose
// inventory has the mode: it is restored, not refused as a device that changed identity.
func TestStaticMIGRecordFromBeforeFileModes(t *testing.T) {
	e := startMIGEnv(t, "", true)
	if r := e.prepare(claim("s", []result{{Device: "gpu-0-mig-3g20gb-4"}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	rec := e.record("s")
	for i := range rec.Devices[0].Nodes {
		rec.Devices[0].Nodes[i].FileMode = 0
	}
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"), e.boot)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(rec); err != nil {
		t.Fatal(err)
	}
	store.Close()
	rep := e.restart()
	if len(rep.Refused) != 0 || len(rep.Restored) != 1 {
		t.Fatalf("restart report %+v, want the claim restored", rep)
	}
	if r := e.prepare(claim("s", []result{{Device: "gpu-0-mig-3g20gb-4"}})); r.Err != nil {
		t.Errorf("prepare again after the upgrade: %v", r.Err)
	}
}
