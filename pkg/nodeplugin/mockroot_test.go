package nodeplugin

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/machine"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// TestMockDriverRootOption: --mock-driver-root is generate or use, and use is for the mock
// backend with a driver root to use.
func TestMockDriverRootOption(t *testing.T) {
	for name, tc := range map[string]struct {
		backend, mockRoot, driverRoot string
		wantErr                       string
	}{
		"generate":             {backend: backend.Mock, mockRoot: MockDriverRootGenerate, driverRoot: "/"},
		"use":                  {backend: backend.Mock, mockRoot: MockDriverRootUse, driverRoot: "/driver-root-parent/driver"},
		"unknown":              {backend: backend.Mock, mockRoot: "find", driverRoot: "/", wantErr: `--mock-driver-root="find": want generate or use`},
		"use without a root":   {backend: backend.Mock, mockRoot: MockDriverRootUse, wantErr: "needs the driver root in --nvidia-driver-root"},
		"use with real GPUs":   {backend: backend.NVML, mockRoot: MockDriverRootUse, driverRoot: "/", wantErr: "is for --backend=mock"},
		"generate for nvml ok": {backend: backend.NVML, mockRoot: MockDriverRootGenerate, driverRoot: "/"},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			if err := o.NewFlagSet().Parse([]string{"--node-name=n", "--backend=" + tc.backend, "--mock-driver-root=" + tc.mockRoot, "--nvidia-driver-root=" + tc.driverRoot}); err != nil {
				t.Fatal(err)
			}
			err := o.Complete()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Complete() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestMockWaitsForItsDriverRoot: the GPU mock that uses a driver root installed by someone
// else (--mock-driver-root=use) waits for it as the nvml backend waits for a real driver,
// saying so on /healthz, and goes on once the driver is there, its NVML of that driver's
// version.
func TestMockWaitsForItsDriverRoot(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	defer func(d time.Duration) { driverPollInterval = d }(driverPollInterval)
	driverPollInterval = 50 * time.Millisecond
	dir := socketTempDir(t)
	o := slowAPIServerOptions(t, dir)
	root := filepath.Join(dir, "driver")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	o.MockDriverRoot, o.NVIDIADriverRoot = MockDriverRootUse, root
	description := filepath.Join(o.PluginDataDir, "mock", "nvidia-machine", filepath.Base(machine.Path))

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, o) }()
	if code, body := healthzSaying(ctx, t, o.HTTPAddress, done, root); code != http.StatusOK || !strings.HasPrefix(body, "starting: waiting for the NVIDIA driver under "+root) {
		t.Errorf("/healthz while the driver root is empty = %d %q, want 200 starting: waiting for the NVIDIA driver under %s ...", code, body, root)
	}
	if _, err := os.Stat(description); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the machine was described before the driver was there: %v", err)
	}

	if err := nvmlmock.WriteDriver(root, "575.57.08"); err != nil {
		t.Fatal(err)
	}
	// Past the driver, its edits and the checkpoint: the plugin asks the API server.
	healthzSaying(ctx, t, o.HTTPAddress, done, "API server")
	if m, err := machine.Read(description); err != nil || m.DriverVersion != "575.57.08" {
		t.Errorf("the machine's description for the containers' tools: %+v, %v; want driver version 575.57.08", m, err)
	}
}

// TestMockDriverRootReplaced: with --mock-driver-root=use, the edits mount the driver root's
// files and the machine's description from the mock's own directory, of the root's version;
// the driver watch sees the root replaced by another version's and, since this process can
// only call the library it loaded first, asks for a new process; there the edits mount that
// version's files and description, and the watch sees no change (the description it rewrote
// is no change of the driver).
func TestMockDriverRootReplaced(t *testing.T) {
	ctx := context.Background()
	const node = "node-a"
	root := t.TempDir()
	if err := nvmlmock.WriteDriver(root, "570.172.08"); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.NodeName, o.Backend, o.MockDriverRoot, o.NVIDIADriverRoot = node, backend.Mock, MockDriverRootUse, root
	o.MockDir, o.PluginDataDir, o.NVIDIACDIHookSource = t.TempDir(), t.TempDir(), fakeHook(t)
	be, err := backend.New(ctx, backend.Options{Name: o.Backend, NodeName: node, MockDir: o.MockDir, NVIDIADriverRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = be.Close() }()
	inv, src := enumerateSource(ctx, t, o, be)
	edits, err := src.edits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(e *specs.ContainerEdits, version, other string) {
		t.Helper()
		mounts := map[string]string{}
		for _, m := range e.Mounts {
			mounts[m.ContainerPath] = m.HostPath
		}
		if got, want := mounts["/usr/lib64/libcuda.so."+version], filepath.Join(root, "usr/lib64/libcuda.so."+version); got != want {
			t.Errorf("libcuda.so.%s mounted from %q, want %s", version, got, want)
		}
		if p, ok := mounts["/usr/lib64/libcuda.so."+other]; ok {
			t.Errorf("the edits still mount libcuda.so.%s, from %s", other, p)
		}
		desc := mounts["/"+machine.Path]
		if !strings.HasPrefix(desc, o.MockDir+"/") {
			t.Errorf("the machine's description is mounted from %q, want a file in the mock's directory %s", desc, o.MockDir)
		}
		if m, err := machine.Read(desc); err != nil || m.DriverVersion != version || len(m.GPUs) != len(inv.Devices) {
			t.Errorf("the machine's description: %+v, %v; want driver version %s and %d GPUs", m, err, version, len(inv.Devices))
		}
	}
	check(edits, "570.172.08", "580.82.07")
	if _, err := os.Stat(filepath.Join(root, machine.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the plugin wrote into the driver root it uses (%v): it is someone else's, and read-only in the plugin's pod", err)
	}

	sink := &lastEdits{}
	w := newDriverWatch(src, sink, edits, nil)
	if changed, err := w.check(ctx); changed || err != nil {
		t.Fatalf("unchanged driver: changed %v, %v", changed, err)
	}
	// The GPU operator's driver container loads its kernel module before it mounts its root;
	// the new library with the old module would be refused (TestMockDriverVersionMismatch).
	if err := nvmlmock.LoadModule(o.MockDir, "580.82.07"); err != nil {
		t.Fatal(err)
	}
	if err := nvmlmock.WriteDriver(root, "580.82.07"); err != nil {
		t.Fatal(err)
	}
	// This process calls the library it loaded first for as long as it lives (go-nvml binds
	// it, nvml.ErrLibraryBound): NVML opened anew here would be the old driver's, which the new
	// module refuses. The watch says so, for the plugin to start again in a new process.
	var replaced *LibraryReplacedError
	if changed, err := w.check(ctx); changed || !errors.As(err, &replaced) || filepath.Base(replaced.Bound) != "libnvidia-ml.so.570.172.08" || filepath.Base(replaced.Found) != "libnvidia-ml.so.580.82.07" || sink.edits != nil {
		t.Fatalf("the driver was replaced: changed %v, %v, edits handed on %v; want a LibraryReplacedError from the 570.172.08 library to the 580.82.07 one, and no edits", changed, err, sink.edits != nil)
	}
	// The new process: its backend and its edits are the new driver's, and its watch sees no
	// change.
	nvmlmock.Exec(o.MockDir)
	be2, err := backend.New(ctx, backend.Options{Name: o.Backend, NodeName: node, MockDir: o.MockDir, NVIDIADriverRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = be2.Close() }()
	_, src2 := enumerateSource(ctx, t, o, be2)
	edits2, err := src2.edits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check(edits2, "580.82.07", "570.172.08")
	w2 := newDriverWatch(src2, sink, edits2, nil)
	for range 2 {
		if changed, err := w2.check(ctx); changed || err != nil || sink.edits != nil {
			t.Errorf("the new process's watch: changed %v, %v; want no change", changed, err)
		}
	}
	if i := slices.IndexFunc(inv.Devices, func(d device.Device) bool { return d.DriverVersion != "570.172.08" }); i >= 0 {
		t.Errorf("GPU %s enumerated with driver version %q, want the root's 570.172.08", inv.Devices[i].Name, inv.Devices[i].DriverVersion)
	}
}
