package nvml_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// TestFindLibrary: libnvidia-ml.so.1 is found under a driver root in the layouts distributions
// and the .run installer use, as the versioned file it links to; a root without it is an error
// naming the root and what was searched.
func TestFindLibrary(t *testing.T) {
	const version = "570.124.06"
	debianDir := "usr/lib/" + map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH] + "-linux-gnu"
	for name, tc := range map[string]struct {
		// write lays the driver out under root.
		write func(t *testing.T, root string)
		// want is the library's path under root; "" for an error.
		want string
	}{
		"rpm and .run layout": {
			write: func(t *testing.T, root string) {
				if err := nvmlmock.WriteDriverRootOfVersion(root, version); err != nil {
					t.Fatal(err)
				}
			},
			want: "usr/lib64/libnvidia-ml.so." + version,
		},
		"debian layout": {
			write: func(t *testing.T, root string) {
				writeLibrary(t, filepath.Join(root, debianDir), version)
			},
			want: debianDir + "/libnvidia-ml.so." + version,
		},
		"no driver": {
			write: func(t *testing.T, root string) {
				// The host's other libraries are there, the driver's not.
				if err := os.MkdirAll(filepath.Join(root, debianDir), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, debianDir, "libc.so.6"), []byte("the host's"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
		},
		"soname link without its file": {
			write: func(t *testing.T, root string) {
				dir := filepath.Join(root, "usr/lib64")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("libnvidia-ml.so."+version, filepath.Join(dir, nvmlbackend.LibraryName)); err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			tc.write(t, root)
			got, err := nvmlbackend.FindLibrary(root)
			if tc.want == "" {
				if err == nil || !errors.Is(err, nvmlbackend.ErrNoDriverLibrary) {
					t.Fatalf("FindLibrary = %q, %v; want an error wrapping ErrNoDriverLibrary", got, err)
				}
				for _, w := range []string{root, "usr/lib64", "etc/ld.so.cache"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, tc.want); got != want {
				t.Errorf("FindLibrary = %s, want %s", got, want)
			}
		})
	}
}

// writeLibrary writes libnvidia-ml.so.<version> and its soname link into dir.
func writeLibrary(t *testing.T, dir, version string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "libnvidia-ml.so."+version), []byte("NVML"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("libnvidia-ml.so."+version, filepath.Join(dir, nvmlbackend.LibraryName)); err != nil {
		t.Fatal(err)
	}
}

// TestNewFromSystemLoadsByPath: the backend loads the library at the path it is given, not one
// the loader would find by name, and says why it refused it, without ending the process: a file
// the loader refuses gets the loader's reason; the mock driver root's libnvidia-ml, which loads
// but has no NVML functions, whose initialisation go-nvml would call (and the loader end the
// process at), is refused as not NVML.
func TestNewFromSystemLoadsByPath(t *testing.T) {
	for name, tc := range map[string]struct {
		write func(t *testing.T, root string)
		want  string
	}{
		"not ELF": {write: func(t *testing.T, root string) { writeLibrary(t, filepath.Join(root, "usr/lib64"), "570.124.06") }, want: "ELF"},
		"not NVML": {write: func(t *testing.T, root string) {
			if err := nvmlmock.WriteDriverRootOfVersion(root, "570.124.06"); err != nil {
				t.Fatal(err)
			}
		}, want: "nvmlInit_v2"},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			tc.write(t, root)
			lib, err := nvmlbackend.FindLibrary(root)
			if err != nil {
				t.Fatal(err)
			}
			b, err := nvmlbackend.NewFromSystem(context.Background(), lib, "/sys", "/dev")
			if err == nil {
				_ = b.Close()
				t.Fatalf("NVML loaded from %s, which is no NVML", lib)
			}
			if !errors.Is(err, nvmlbackend.ErrLibraryNotFound) || !strings.HasPrefix(err.Error(), "loading NVML from "+lib+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewFromSystem(%s) = %v; want ErrLibraryNotFound, the path and %q", lib, err, tc.want)
			}
		})
	}
}
