package nvidia

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

const mockVersion = "570.124.06" // the driver version of the nvmlmock profiles

func mockDriver(t *testing.T) (*nvmlmock.Server, string) {
	t.Helper()
	s, err := nvmlmock.NewServer("h100-8x-2numa", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "driver")
	if err := s.WriteDriverRoot(root); err != nil {
		t.Fatal(err)
	}
	return s, root
}

// TestCommonEdits runs the toolkit's generator over the mock driver root and checks that a
// container would get what a CUDA program needs, with host paths under the host's view of the
// root and container paths as on the host.
func TestCommonEdits(t *testing.T) {
	s, root := mockDriver(t)
	for name, host := range map[string]string{"plugin on the host": "", "plugin in a container": "/host-driver"} {
		t.Run(name, func(t *testing.T) {
			e, err := CommonEdits(context.Background(), Config{NVML: s, DriverRoot: root, HostDriverRoot: host, HookPath: "/opt/nvidia/nvidia-cdi-hook"})
			if err != nil {
				t.Fatal(err)
			}
			wantHost := root
			if host != "" {
				wantHost = host
			}
			mounts := map[string]string{}
			for _, m := range e.Mounts {
				mounts[m.ContainerPath] = m.HostPath
			}
			for _, p := range []string{
				"/usr/lib64/libcuda.so." + mockVersion,
				"/usr/lib64/libnvidia-ml.so." + mockVersion,
				"/usr/lib64/libnvidia-ptxjitcompiler.so." + mockVersion,
				"/usr/bin/nvidia-smi",
				"/usr/bin/nvidia-cuda-mps-control",
				"/lib/firmware/nvidia/" + mockVersion + "/gsp_ga10x.bin",
				"/run/nvidia-persistenced/socket",
			} {
				got, ok := mounts[p]
				if !ok {
					t.Errorf("no mount of %s; mounts: %v", p, mounts)
					continue
				}
				if want := filepath.Join(wantHost, p); got != want {
					t.Errorf("mount of %s from %s, want %s", p, got, want)
				}
			}
			if len(e.DeviceNodes) != 0 {
				t.Errorf("device nodes %v: the backend owns those", e.DeviceNodes)
			}
			hooks := map[string][]string{}
			for _, h := range e.Hooks {
				if h.HookName != "createContainer" || h.Path != "/opt/nvidia/nvidia-cdi-hook" || len(h.Args) < 2 {
					t.Errorf("unexpected hook %+v", h)
					continue
				}
				hooks[h.Args[1]] = h.Args[2:]
			}
			for _, want := range []string{"create-symlinks", "update-ldcache", "enable-cuda-compat", "disable-device-node-modification"} {
				if _, ok := hooks[want]; !ok {
					t.Errorf("no %s hook; hooks: %v", want, hooks)
				}
			}
			if links := strings.Join(hooks["create-symlinks"], " "); !strings.Contains(links, "libcuda.so."+mockVersion+"::/usr/lib64/libcuda.so.1") {
				t.Errorf("create-symlinks does not link libcuda.so.1 (from the library's SONAME): %s", links)
			}
			if got := strings.Join(hooks["update-ldcache"], " "); got != "--folder /usr/lib64" {
				t.Errorf("update-ldcache args %q", got)
			}
			if got := strings.Join(hooks["enable-cuda-compat"], " "); got != "--host-driver-version="+mockVersion {
				t.Errorf("enable-cuda-compat args %q", got)
			}
			if !slices.Contains(e.Env, "NVIDIA_VISIBLE_DEVICES=void") {
				t.Errorf("env %v lacks NVIDIA_VISIBLE_DEVICES=void", e.Env)
			}

			// What a runtime would load: the CDI library must accept it.
			spec := &specs.Spec{Version: specs.CurrentVersion, Kind: "accel-dra.io/gpu", ContainerEdits: *e,
				Devices: []specs.Device{{Name: "gpu-0", ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 195}}}}}}
			cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(t.TempDir()), cdiapi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			if err := cache.WriteSpec(spec, "accel-dra.io-gpu.json"); err != nil {
				t.Errorf("CDI library rejects the edits: %v", err)
			}
		})
	}
}

func TestCommonEditsErrors(t *testing.T) {
	s, root := mockDriver(t)
	other, err := nvmlmock.NewServer("h100-8x-2numa", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	// A driver upgraded on disk but not reloaded (or a root that is not this driver's):
	// NVML reports a version whose libraries are not there.
	other.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS }
	tests := map[string]struct {
		cfg  Config
		want string
	}{
		"no NVML":              {Config{DriverRoot: root}, "no NVML"},
		"no driver root":       {Config{NVML: s}, "no driver root"},
		"empty driver root":    {Config{NVML: s, DriverRoot: t.TempDir()}, "driver root"},
		"other driver version": {Config{NVML: other, DriverRoot: root}, "580.65.06"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := CommonEdits(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func BenchmarkCommonEdits(b *testing.B) {
	s, err := nvmlmock.NewServer("h100-8x-2numa", "node-a")
	if err != nil {
		b.Fatal(err)
	}
	root := filepath.Join(b.TempDir(), "driver")
	if err := s.WriteDriverRoot(root); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := CommonEdits(context.Background(), Config{NVML: s, DriverRoot: root}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCommonEditsLeaveSandboxUtilsAlone: the driver root has libnvidia-sandboxutils (as every
// recent driver has), and the generator neither locates nor loads it. Loading it would
// dlopen a driver library into the plugin's process at start-up and on every driver change, for
// per-device answers the plugin does not use (the backend owns the device nodes); NVIDIA's DRA
// driver turns it off the same way. What the toolkit does is seen in what it logs: it names
// the library when it looks for it, loads it, or fails to.
func TestCommonEditsLeaveSandboxUtilsAlone(t *testing.T) {
	s, root := mockDriver(t)
	if _, err := os.Stat(filepath.Join(root, nvmlmock.DriverLibDir, "libnvidia-sandboxutils.so.1")); err != nil {
		t.Fatalf("the mock driver root lacks the library this test is about: %v", err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(10)))
	ctx := klog.NewContext(context.Background(), logger)
	if _, err := CommonEdits(ctx, Config{NVML: s, DriverRoot: root}); err != nil {
		t.Fatal(err)
	}
	// The temporary root is named after the test; only what the toolkit says about it counts.
	logs := strings.ReplaceAll(logger.GetSink().(ktesting.Underlier).GetBuffer().String(), filepath.Dir(root), "<tmp>")
	if !strings.Contains(logs, "nvcdi") {
		t.Fatalf("nothing logged by the toolkit at all; the test cannot see what it did:\n%s", logs)
	}
	// The library is a driver library like the others and is mounted into containers; what
	// must not happen is the loader's look-up by soname, its load, or its init.
	for _, line := range strings.Split(logs, "\n") {
		for _, use := range []string{"nvsandboxutils", `"libnvidia-sandboxutils.so.1"`, "Using <tmp>/driver/usr/lib64/libnvidia-sandboxutils"} {
			if strings.Contains(line, use) {
				t.Errorf("the toolkit's generator used nvsandboxutils: %s", line)
				break
			}
		}
	}
}
