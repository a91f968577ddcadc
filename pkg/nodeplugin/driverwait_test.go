package nodeplugin

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// TestWaitsForTheDriver: a plugin started before the NVIDIA driver is under its driver root
// (the GPU operator's driver container mounts it there only once it has installed the driver)
// waits for it, saying so on /healthz, which the kubelet's liveness probe must not take for a
// failure (a restart would not bring the driver), and on /readyz, which says it does not serve
// yet. Once the driver is there, the plugin loads that root's libnvidia-ml, by its full path:
// here the mock driver root's, which no loader can load, so the plugin exits naming it.
func TestWaitsForTheDriver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	defer func(d time.Duration) { driverPollInterval = d }(driverPollInterval)
	driverPollInterval = 50 * time.Millisecond
	dir := socketTempDir(t)
	root := filepath.Join(dir, "driver")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.NodeName, o.Backend, o.NVIDIADriverRoot = "node-a", backend.NVML, root
	o.PluginDataDir, o.RegistrarDir, o.CDIRoot = filepath.Join(dir, "p"), filepath.Join(dir, "r"), filepath.Join(dir, "cdi")
	o.DriverCheckInterval, o.DeviceHealth = 0, false
	o.HTTPAddress, o.NVIDIACDIHookSource = freeAddress(t), fakeHook(t)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, o) }()

	get := func(path string) (int, string, error) { return httpGet(o.HTTPAddress, path) }
	code, body := healthzSaying(ctx, t, o.HTTPAddress, done, root)
	if code != http.StatusOK || !strings.HasPrefix(body, "starting: waiting for the NVIDIA driver under "+root) {
		t.Errorf("/healthz while waiting for the driver = %d %q, want 200 starting: waiting for the NVIDIA driver under %s ...", code, body, root)
	}
	if code, body, err := get("/readyz"); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while waiting for the driver = %d %q, %v; want 503", code, body, err)
	}

	// The driver arrives whole (its usr directory renamed into the root), with a libnvidia-ml
	// the loader refuses: the mock driver root's own libraries load, and have no NVML in them
	// to call.
	staging := t.TempDir()
	if err := nvmlmock.WriteDriverRootOfVersion(staging, "570.124.06"); err != nil {
		t.Fatal(err)
	}
	staged, err := filepath.EvalSymlinks(filepath.Join(staging, nvmlmock.DriverLibDir, "libnvidia-ml.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(staged, []byte(strings.Repeat("not an ELF file ", 16)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(staging, "usr"), filepath.Join(root, "usr")); err != nil {
		t.Fatal(err)
	}
	lib, err := filepath.EvalSymlinks(filepath.Join(root, nvmlmock.DriverLibDir, "libnvidia-ml.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), lib) {
			t.Errorf("the plugin with the mock driver root's libnvidia-ml, which no loader can load: %v; want an error loading %s", err, lib)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the plugin neither loaded the driver's library nor failed within 30s of the driver's arrival")
	}
}
