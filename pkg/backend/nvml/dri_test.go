package nvml

import (
	"context"
	"io/fs"
	"path"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

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
	stat := func(p string) (string, int64, int64, error) {
		switch path.Base(p) {
		case "card1":
			return "c", 226, 1, nil
		case "renderD128":
			return "c", 226, 128, nil
		}
		return "", 0, 0, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	b := New(nil, sysfs, "/host/dev", WithStat(stat))
	want := []device.Node{
		{Path: "/dev/dri/card1", Type: "c", Major: 226, Minor: 1},
		// renderD129 is listed but has no node: left out.
		{Path: "/dev/dri/renderD128", Type: "c", Major: 226, Minor: 128},
	}
	if diff := cmp.Diff(want, b.driNodes(context.Background(), bdf)); diff != "" {
		t.Errorf("DRM nodes (-want +got):\n%s", diff)
	}
	if got := b.driNodes(context.Background(), "0000:18:00.0"); got != nil {
		t.Errorf("GPU without drm directory: %v, want none", got)
	}
}
