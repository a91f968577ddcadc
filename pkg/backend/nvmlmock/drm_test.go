package nvmlmock

import (
	"fmt"
	"io/fs"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// TestDRMNodes: on a profile with nvidia-drm loaded, each GPU's nodes are its /dev/nvidiaN and
// the card and render node the kernel lists under its sysfs drm/ (with a BMC's card0 before
// them on the DGX), its UUID is the one it has without nvidia-drm, and its MIG devices get
// none of the DRM nodes, as NVIDIA's container toolkit gives them none.
func TestDRMNodes(t *testing.T) {
	tests := map[string]struct {
		base      string
		firstCard int
	}{
		"h100-8x-2numa-drm": {base: "h100-8x-2numa", firstCard: 1},
		"mig-mixed-drm":     {base: "mig-mixed", firstCard: 0},
	}
	for profile, tc := range tests {
		t.Run(profile, func(t *testing.T) {
			s, err := NewServer(profile, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			for i, g := range s.profile.gpus {
				dev := fmt.Sprintf("bus/pci/devices/%s/drm/renderD%d/dev", g.busID, 128+i)
				if b, err := fs.ReadFile(s.SysFS, dev); err != nil || string(b) != fmt.Sprintf("226:%d\n", 128+i) {
					t.Errorf("sysfs %s: %q, %v", dev, b, err)
				}
			}
			inv := enumerate(t, profile, "node-a")
			without := enumerate(t, tc.base, "node-a").Lookup()
			gpus := 0
			for _, d := range inv.Devices {
				if d.MIG != nil {
					for _, n := range d.Nodes {
						if n.Major == drmMajor {
							t.Errorf("MIG device %s has DRM node %s", d.Name, n.Path)
						}
					}
					continue
				}
				gpus++
				card, render := tc.firstCard+d.Number, 128+d.Number
				want := []device.Node{
					{Path: fmt.Sprintf("/dev/nvidia%d", d.Number), Type: "c", Major: 195, Minor: int64(d.Number)},
					// udev's groups: card video, renderD render, both 0660.
					{Path: fmt.Sprintf("/dev/dri/card%d", card), Type: "c", Major: 226, Minor: int64(card), GID: VideoGID, FileMode: 0o660},
					{Path: fmt.Sprintf("/dev/dri/renderD%d", render), Type: "c", Major: 226, Minor: int64(render), GID: RenderGID, FileMode: 0o660},
				}
				if diff := cmp.Diff(want, d.Nodes); diff != "" {
					t.Errorf("%s: nodes (-want +got):\n%s", d.Name, diff)
				}
				if w, ok := without[d.Name]; !ok || w.UUID != d.UUID {
					t.Errorf("%s: UUID %s, without nvidia-drm %s: loading the module changed the GPU", d.Name, d.UUID, w.UUID)
				}
			}
			// A GPU in MIG mode is published as its MIG devices only.
			whole := 0
			for _, g := range s.profile.gpus {
				if !g.migMode {
					whole++
				}
			}
			if gpus != whole {
				t.Errorf("%d whole GPUs, want %d", gpus, whole)
			}
		})
	}
}
