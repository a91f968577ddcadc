package ascend

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCommonEdits(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"usr/local/Ascend/driver/lib64/libascend_hal.so", "usr/local/Ascend/driver/version.info", "usr/local/bin/npu-smi", "opt/hccn.conf"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := map[string]struct {
		cfg       Config
		want      []string // container paths; host paths are hostRoot + path
		wantHost  string
		wantError string
	}{
		// /etc/ascend_install.info and /usr/local/dcmi are missing: skipped.
		"defaults": {cfg: Config{DriverRoot: root},
			want: []string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info", "/usr/local/bin/npu-smi"}, wantHost: root},
		"extra path, host root elsewhere": {cfg: Config{DriverRoot: root, HostDriverRoot: "/", ExtraPaths: []string{"/opt/hccn.conf", "/usr/local/bin/npu-smi"}},
			want: []string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info", "/usr/local/bin/npu-smi", "/opt/hccn.conf"}, wantHost: "/"},
		"own list":       {cfg: Config{DriverRoot: root, Paths: []string{"/usr/local/bin/npu-smi"}}, want: []string{"/usr/local/bin/npu-smi"}, wantHost: root},
		"nothing there":  {cfg: Config{DriverRoot: t.TempDir()}},
		"relative path":  {cfg: Config{DriverRoot: root, ExtraPaths: []string{"etc/x"}}, wantError: `"etc/x"`},
		"unclean path":   {cfg: Config{DriverRoot: root, ExtraPaths: []string{"/etc/../x"}}, wantError: `"/etc/../x"`},
		"root itself":    {cfg: Config{DriverRoot: root, ExtraPaths: []string{"/"}}, wantError: `"/"`},
		"no driver root": {cfg: Config{}, wantError: "no driver root"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e, err := CommonEdits(context.Background(), tc.cfg)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("error %v, want one containing %s", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range e.Mounts {
				got = append(got, m.ContainerPath)
				if want := filepath.Join(tc.wantHost, m.ContainerPath); m.HostPath != want {
					t.Errorf("host path %s, want %s", m.HostPath, want)
				}
				if !strings.Contains(strings.Join(m.Options, ","), "ro") {
					t.Errorf("mount %s not read-only: %v", m.ContainerPath, m.Options)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
		})
	}
}
