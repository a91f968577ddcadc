package nvml

import (
	"context"
	"io/fs"
	"path"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/backend/internal/devnode"
	"github.com/accel-dra/accel-dra/pkg/device"
)

func TestDRINodes(t *testing.T) {
	const bdf = "0000:17:00.0"
	sysfs := fstest.MapFS{
		"bus/pci/devices/" + bdf:                               {Data: []byte("../../../devices/pci0000:00/" + bdf), Mode: fs.ModeSymlink | 0o777},
		"devices/pci0000:00/" + bdf + "/vendor":                {Data: []byte("0x10de\n")},
		"devices/pci0000:00/" + bdf + "/drm/card1/dev":         {Data: []byte("226:1\n")},
		"devices/pci0000:00/" + bdf + "/drm/renderD128/dev":    {Data: []byte("226:128\n")},
		"devices/pci0000:00/" + bdf + "/drm/card1-DP-1/status": {Data: []byte("disconnected\n")},
		"devices/pci0000:00/" + bdf + "/drm/renderD129/dev":    {Data: []byte("226:129\n")},
	}
	stat := func(p string) (devnode.Info, error) {
		switch path.Base(p) {
		case "card1":
			// A host whose card nodes are root's (no udev rule), and render nodes the render
			// group's: only the group that is not root's reaches the spec, with the node's mode.
			return devnode.Info{Type: "c", Major: 226, Minor: 1, Mode: 0o666}, nil
		case "renderD128":
			return devnode.Info{Type: "c", Major: 226, Minor: 128, GID: 109, Mode: 0o660}, nil
		}
		return devnode.Info{}, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	b := New(nil, sysfs, "/host/dev", WithStat(stat))
	want := []device.Node{
		{Path: "/dev/dri/card1", Type: "c", Major: 226, Minor: 1},
		// renderD129 is listed but has no node: left out.
		{Path: "/dev/dri/renderD128", Type: "c", Major: 226, Minor: 128, GID: 109, FileMode: 0o660},
	}
	if diff := cmp.Diff(want, b.driNodes(context.Background(), bdf)); diff != "" {
		t.Errorf("DRM nodes (-want +got):\n%s", diff)
	}
	if got := b.driNodes(context.Background(), "0000:18:00.0"); got != nil {
		t.Errorf("GPU without drm directory: %v, want none", got)
	}
}
