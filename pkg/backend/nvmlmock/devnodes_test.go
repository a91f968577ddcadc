package nvmlmock

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/devnode"
)

// TestDevNodeGroups: the machine's nodes have the host's groups and modes, in Stat (a host
// whose /dev holds them) and in the stand-ins WriteDevNodes and WriteDRMNodes lay out, which
// StatFile reads: the NVIDIA driver's nodes root's with 0666 by default and the group of
// NVreg_DeviceFileGID with 0660 when it is set; the DRM nodes video's and render's, 0660.
func TestDevNodeGroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving stand-ins the host's groups needs root")
	}
	for name, gid := range map[string]uint32{"driver default": 0, "NVreg_DeviceFileGID=1234": 1234} {
		t.Run(name, func(t *testing.T) {
			s, err := NewServer("h100-8x-2numa-drm", "node-a")
			if err != nil {
				t.Fatal(err)
			}
			s.SetDeviceFileGID(gid)
			dir := t.TempDir()
			if err := s.WriteDevNodes(dir); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteDRMNodes(dir); err != nil {
				t.Fatal(err)
			}
			nvidiaMode := fs.FileMode(0o666)
			if gid != 0 {
				nvidiaMode = 0o660
			}
			for _, n := range s.DevNodes() {
				want := devnode.Info{Type: "c", Major: n.Major, Minor: n.Minor, GID: gid, Mode: nvidiaMode}
				switch {
				case strings.HasPrefix(n.Name, "dri/card"):
					want.GID, want.Mode = VideoGID, 0o660
				case strings.HasPrefix(n.Name, "dri/renderD"):
					want.GID, want.Mode = RenderGID, 0o660
				}
				if got, err := s.Stat("/dev/" + n.Name); err != nil || got != want {
					t.Errorf("Stat(/dev/%s) = %+v, %v; want %+v", n.Name, got, err, want)
				}
				if got, err := StatFile(filepath.Join(dir, n.Name)); err != nil || got != want {
					t.Errorf("StatFile of the stand-in of %s = %+v, %v; want %+v", n.Name, got, err, want)
				}
			}
		})
	}
}
