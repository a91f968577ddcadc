package cdi

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/device"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

const claimUID = "0e5b6a3c-7f3e-4a59-9d0a-3b1c2d4e5f60"

// Mock devices: their nodes do not exist on the test host, which is the point: type, major and
// minor come from the spec, as with the mock backends.
func gpu(i int) device.Device {
	return device.Device{
		Name:  device.NameFor(device.KindGPU, i),
		Kind:  device.KindGPU,
		Index: i,
		UUID:  fmt.Sprintf("GPU-%08d-aaaa-bbbb-cccc-dddddddddddd", i),
		Nodes: []device.Node{{Path: fmt.Sprintf("/dev/nvidia%d", i), HostPath: fmt.Sprintf("/var/lib/mock/dev/nvidia%d", i), Type: "c", Major: 195, Minor: int64(i)}},
	}
}

func npu(i int) device.Device {
	return device.Device{
		Name:  device.NameFor(device.KindNPU, i),
		Kind:  device.KindNPU,
		Index: i,
		UUID:  fmt.Sprintf("NPU-%d", i),
		Nodes: []device.Node{{Path: fmt.Sprintf("/dev/davinci%d", i), Type: "c", Major: 236, Minor: int64(i)}},
	}
}

var (
	gpuControl = []device.Node{
		{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255},
		{Path: "/dev/nvidia-uvm", Type: "c", Major: 510, Minor: 0},
		{Path: "/dev/nvidia-uvm-tools", Type: "c", Major: 510, Minor: 1},
	}
	npuControl = []device.Node{
		{Path: "/dev/davinci_manager", Type: "c", Major: 237, Minor: 0},
		{Path: "/dev/devmm_svm", Type: "c", Major: 238, Minor: 0},
		{Path: "/dev/hisi_hdc", Type: "c", Major: 239, Minor: 0},
	}
)

// commonEdits stand for the node-common edits of pkg/cdi/nvidia: a library, a hook and the
// toolkit's environment.
var commonEdits = &specs.ContainerEdits{
	Env:    []string{"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64", "NVIDIA_VISIBLE_DEVICES=void"},
	Mounts: []*specs.Mount{{HostPath: "/driver/usr/lib64/libcuda.so.570.124.06", ContainerPath: "/usr/lib64/libcuda.so.570.124.06", Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}}},
	Hooks:  []*specs.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64"}}},
	// Ignored: the backend's control nodes are the authority.
	DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidiactl"}},
}

type buildCase struct {
	kind     device.Kind
	requests []Request
	control  []device.Node
	env      []string
	common   *specs.ContainerEdits
}

func (c buildCase) claim(uid string) Claim {
	return Claim{UID: uid, Requests: c.requests, Common: c.common, Control: c.control, Env: c.env}
}

// ids are the CDI IDs the kubelet gives a container that uses requests (all when none), built
// as the driver builds them: ResultIDs per allocated device, in allocation order.
func (c buildCase) ids(uid string, requests ...string) []string {
	var ids []string
	seen := map[string]bool{}
	for _, r := range c.requests {
		base, _, _ := strings.Cut(r.Name, "/")
		for _, d := range r.Devices {
			first := !seen[base]
			seen[base] = true
			if len(requests) == 0 || slices.Contains(requests, base) {
				ids = append(ids, ResultIDs(c.kind, uid, r.Name, d.Name, first)...)
			}
		}
	}
	return ids
}

func req(name string, devs ...device.Device) Request { return Request{Name: name, Devices: devs} }

var goldenCases = map[string]buildCase{
	"gpu-1": {kind: device.KindGPU, requests: []Request{req("gpu", gpu(3))}, control: gpuControl,
		env: []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"}, common: commonEdits},
	// Given out of order: the spec lists devices by index. Without common edits the spec still
	// sets NVIDIA_VISIBLE_DEVICES=void.
	"gpu-2": {kind: device.KindGPU, requests: []Request{req("gpus", gpu(5), gpu(1))}, control: gpuControl,
		env: []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility,video"}},
	"npu-1": {kind: device.KindNPU, requests: []Request{req("npu", npu(2))}, control: npuControl,
		env: []string{"ASCEND_RUNTIME_OPTIONS=NODRV"}},
	// Two requests, one of them a prioritized-list subrequest: one CDI device per request with
	// that request's ASCEND_VISIBLE_DEVICES.
	"npu-2-requests": {kind: device.KindNPU, requests: []Request{req("a", npu(3), npu(1)), req("b/large", npu(4))}, control: npuControl,
		common: &specs.ContainerEdits{Mounts: []*specs.Mount{{HostPath: "/usr/local/Ascend/driver/lib64", ContainerPath: "/usr/local/Ascend/driver/lib64", Options: []string{"ro", "rbind"}}}}},
}

func TestGoldenSpecs(t *testing.T) {
	for name, tc := range goldenCases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			w := New(dir, tc.kind)
			spec, err := w.Build(tc.claim(claimUID))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(claimUID, spec); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(w.Path(claimUID))
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("spec differs from %s (-want +got):\n%s", golden, diff)
			}
			if names := dirNames(t, dir); len(names) != 1 {
				t.Errorf("directory holds %v, want only the spec", names)
			}
		})
	}
}

// TestInject applies written specs to an OCI spec through the CDI library exactly as a container
// runtime does: a cache over the spec directory, InjectDevices with the IDs the kubelet passes
// for the requests a container uses.
func TestInject(t *testing.T) {
	type wantDev struct {
		Path         string
		Type         string
		Major, Minor int64
	}
	npuControlDevs := []wantDev{
		{"/dev/davinci_manager", "c", 237, 0},
		{"/dev/devmm_svm", "c", 238, 0},
		{"/dev/hisi_hdc", "c", 239, 0},
	}
	tests := map[string]struct {
		buildCase
		requests   []string // requests the container uses; all when nil
		wantDev    []wantDev
		wantEnv    []string
		wantMounts []string
		wantHooks  int
	}{
		"one gpu": {
			buildCase: goldenCases["gpu-1"],
			wantDev: []wantDev{
				{"/dev/nvidiactl", "c", 195, 255},
				{"/dev/nvidia-uvm", "c", 510, 0},
				{"/dev/nvidia-uvm-tools", "c", 510, 1},
				{"/dev/nvidia3", "c", 195, 3},
			},
			wantEnv: []string{
				"PATH=/usr/bin",
				"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64",
				"NVIDIA_DRIVER_CAPABILITIES=compute,utility",
				"NVIDIA_VISIBLE_DEVICES=void",
			},
			wantMounts: []string{"/usr/lib64/libcuda.so.570.124.06"},
			wantHooks:  1,
		},
		"two gpus": {
			buildCase: goldenCases["gpu-2"],
			// The runtime applies the spec-wide edits, then each device's in the order asked.
			wantDev: []wantDev{
				{"/dev/nvidiactl", "c", 195, 255},
				{"/dev/nvidia-uvm", "c", 510, 0},
				{"/dev/nvidia-uvm-tools", "c", 510, 1},
				{"/dev/nvidia5", "c", 195, 5},
				{"/dev/nvidia1", "c", 195, 1},
			},
			wantEnv: []string{
				"PATH=/usr/bin",
				"NVIDIA_DRIVER_CAPABILITIES=compute,utility,video",
				"NVIDIA_VISIBLE_DEVICES=void",
			},
		},
		"one npu": {
			buildCase: goldenCases["npu-1"],
			wantDev:   append(slices.Clone(npuControlDevs), wantDev{"/dev/davinci2", "c", 236, 2}),
			wantEnv: []string{
				"PATH=/usr/bin",
				"ASCEND_RUNTIME_OPTIONS=NODRV",
				"ASCEND_VISIBLE_DEVICES=2",
			},
		},
		"request a of two": {
			buildCase: goldenCases["npu-2-requests"],
			requests:  []string{"a"},
			wantDev: append(slices.Clone(npuControlDevs),
				wantDev{"/dev/davinci3", "c", 236, 3}, wantDev{"/dev/davinci1", "c", 236, 1}),
			wantEnv:    []string{"PATH=/usr/bin", "ASCEND_VISIBLE_DEVICES=1,3"},
			wantMounts: []string{"/usr/local/Ascend/driver/lib64"},
		},
		"subrequest b of two": {
			buildCase:  goldenCases["npu-2-requests"],
			requests:   []string{"b"},
			wantDev:    append(slices.Clone(npuControlDevs), wantDev{"/dev/davinci4", "c", 236, 4}),
			wantEnv:    []string{"PATH=/usr/bin", "ASCEND_VISIBLE_DEVICES=4"},
			wantMounts: []string{"/usr/local/Ascend/driver/lib64"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			w := New(dir, tc.kind)
			spec, err := w.Build(tc.claim(claimUID))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(claimUID, spec); err != nil {
				t.Fatal(err)
			}
			// Another claim's spec in the same directory must not interfere.
			const otherUID = "11111111-2222-3333-4444-555555555555"
			other := New(dir, tc.kind)
			otherCase := tc.buildCase
			otherCase.env = nil
			otherSpec, err := other.Build(otherCase.claim(otherUID))
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Write(otherUID, otherSpec); err != nil {
				t.Fatal(err)
			}

			cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			if errs := cache.GetErrors(); len(errs) != 0 {
				t.Fatalf("CDI cache errors: %v", errs)
			}
			ids := tc.ids(claimUID, tc.requests...)
			ociSpec := &oci.Spec{
				Process: &oci.Process{Env: []string{"PATH=/usr/bin"}},
				Linux:   &oci.Linux{},
			}
			unresolved, err := cache.InjectDevices(ociSpec, ids...)
			if err != nil {
				t.Fatalf("InjectDevices(%v): %v (unresolved %v)", ids, err, unresolved)
			}

			var gotDev []wantDev
			for _, d := range ociSpec.Linux.Devices {
				gotDev = append(gotDev, wantDev{d.Path, d.Type, d.Major, d.Minor})
			}
			if diff := cmp.Diff(tc.wantDev, gotDev); diff != "" {
				t.Errorf("linux devices (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEnv, ociSpec.Process.Env); diff != "" {
				t.Errorf("process env (-want +got):\n%s", diff)
			}
			var gotMounts []string
			for _, m := range ociSpec.Mounts {
				gotMounts = append(gotMounts, m.Destination)
			}
			if diff := cmp.Diff(tc.wantMounts, gotMounts); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
			gotHooks := 0
			if ociSpec.Hooks != nil {
				gotHooks = len(ociSpec.Hooks.CreateContainer)
			}
			if gotHooks != tc.wantHooks {
				t.Errorf("%d createContainer hooks, want %d", gotHooks, tc.wantHooks)
			}
			// Each node is allowed in the device cgroup with the permissions of the spec.
			if got, want := len(ociSpec.Linux.Resources.Devices), len(tc.wantDev); got != want {
				t.Fatalf("%d cgroup device rules, want %d", got, want)
			}
			for _, r := range ociSpec.Linux.Resources.Devices {
				if !r.Allow || r.Access != "rw" {
					t.Errorf("cgroup rule %+v: want allow rw", r)
				}
			}
		})
	}
}

func TestIDs(t *testing.T) {
	if got, want := RequestID(device.KindNPU, claimUID, "b/large"), "accel-dra.io/npu="+claimUID+".b"; got != want {
		t.Errorf("RequestID = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		kind  device.Kind
		first bool
		want  []string
	}{
		{device.KindGPU, true, []string{"accel-dra.io/gpu=" + claimUID + "-gpu-1"}},
		{device.KindNPU, false, []string{"accel-dra.io/npu=" + claimUID + "-gpu-1"}},
		{device.KindNPU, true, []string{"accel-dra.io/npu=" + claimUID + "-gpu-1", "accel-dra.io/npu=" + claimUID + ".r"}},
	} {
		if diff := cmp.Diff(tc.want, ResultIDs(tc.kind, claimUID, "r/s", "gpu-1", tc.first)); diff != "" {
			t.Errorf("ResultIDs(%s, first=%v) (-want +got):\n%s", tc.kind, tc.first, diff)
		}
	}
}

func TestDeviceID(t *testing.T) {
	if got, want := DeviceID(device.KindGPU, claimUID, "gpu-3"), "accel-dra.io/gpu="+claimUID+"-gpu-3"; got != want {
		t.Errorf("DeviceID = %q, want %q", got, want)
	}
	if got, want := DeviceID(device.KindNPU, claimUID, "npu-0"), "accel-dra.io/npu="+claimUID+"-npu-0"; got != want {
		t.Errorf("DeviceID = %q, want %q", got, want)
	}
}

// TestInvalid: bad input is refused by Build or by Write's validation, and nothing appears in the
// directory either way.
func TestInvalid(t *testing.T) {
	withNode := func(n device.Node) []device.Device {
		d := gpu(0)
		d.Nodes = []device.Node{n}
		return []device.Device{d}
	}
	tests := map[string]struct {
		kind    device.Kind
		uid     string
		devs    []device.Device
		control []device.Node
		env     []string
		common  *specs.ContainerEdits
		reqName string
		wantErr string
	}{
		"device node without path": {
			devs:    withNode(device.Node{Type: "c", Major: 195}),
			wantErr: "invalid (empty) device path",
		},
		"control node without path": {
			devs:    []device.Device{gpu(0)},
			control: []device.Node{{Type: "c", Major: 195, Minor: 255}},
			wantErr: "invalid (empty) device path",
		},
		"bad node type": {
			devs:    withNode(device.Node{Path: "/dev/nvidia0", Type: "x", Major: 195}),
			wantErr: `invalid type "x"`,
		},
		"env without =": {
			devs:    []device.Device{gpu(0)},
			env:     []string{"NVIDIA_DRIVER_CAPABILITIES"},
			wantErr: `invalid environment variable "NVIDIA_DRIVER_CAPABILITIES"`,
		},
		"env with empty name": {
			devs:    []device.Device{gpu(0)},
			env:     []string{"=x"},
			wantErr: `invalid environment variable "=x"`,
		},
		"env overrides visible devices": {
			devs:    []device.Device{gpu(0)},
			env:     []string{"NVIDIA_VISIBLE_DEVICES=all"},
			wantErr: "NVIDIA_VISIBLE_DEVICES set twice",
		},
		"env conflicts with common edits": {
			devs:    []device.Device{gpu(0)},
			common:  commonEdits,
			env:     []string{"NVIDIA_CTK_LIBCUDA_DIR=/lib"},
			wantErr: "NVIDIA_CTK_LIBCUDA_DIR set twice",
		},
		"bad common mount": {
			devs:    []device.Device{gpu(0)},
			common:  &specs.ContainerEdits{Mounts: []*specs.Mount{{HostPath: "/x"}}},
			wantErr: "invalid mount",
		},
		"request without name": {
			devs:    []device.Device{gpu(0)},
			reqName: "-",
			wantErr: "request without a name",
		},
		"no devices": {
			wantErr: "no devices",
		},
		"device without nodes": {
			devs:    func() []device.Device { d := gpu(0); d.Nodes = nil; return []device.Device{d} }(),
			wantErr: "has no device nodes",
		},
		"gpu without uuid": {
			devs:    func() []device.Device { d := gpu(0); d.UUID = ""; return []device.Device{d} }(),
			wantErr: "has no UUID",
		},
		"wrong kind": {
			kind:    device.KindNPU,
			devs:    []device.Device{gpu(0)},
			wantErr: "device gpu-0 is a gpu, this writer is for npu",
		},
		"bad claim UID": {
			uid:     "-",
			devs:    []device.Device{gpu(0)},
			wantErr: "claim UID",
		},
		"claim UID with slash": {
			uid:     "../etc",
			devs:    []device.Device{gpu(0)},
			wantErr: "claim UID",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.kind == "" {
				tc.kind = device.KindGPU
			}
			uid := claimUID
			if tc.uid != "" {
				uid = tc.uid
			}
			dir := t.TempDir()
			w := New(dir, tc.kind)
			name := "r"
			if tc.reqName == "-" {
				name = ""
			}
			spec, err := w.Build(Claim{UID: uid, Requests: []Request{req(name, tc.devs...)}, Control: tc.control, Env: tc.env, Common: tc.common})
			if err == nil {
				err = w.Write(uid, spec)
			}
			if err == nil {
				t.Fatal("want error")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
			if validateUID(uid) == nil && !strings.Contains(err.Error(), uid) {
				t.Errorf("error %q does not name the claim", err)
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("files written: %v", names)
			}
		})
	}
}

func TestWriteRejectsForeignSpec(t *testing.T) {
	dir := t.TempDir()
	spec, err := New(dir, device.KindNPU).Build(Claim{UID: claimUID, Requests: []Request{req("r", npu(0))}})
	if err != nil {
		t.Fatal(err)
	}
	if err := New(dir, device.KindGPU).Write(claimUID, spec); err == nil {
		t.Error("GPU writer wrote an NPU spec")
	}
	if err := New(dir, device.KindGPU).Write(claimUID, nil); err == nil {
		t.Error("Write(nil): want error")
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("files written: %v", names)
	}
}

func TestRemoveExistsList(t *testing.T) {
	dir := t.TempDir()
	gpus, npus := New(dir, device.KindGPU), New(dir, device.KindNPU)
	if uids, err := New(filepath.Join(dir, "missing"), device.KindGPU).List(); err != nil || len(uids) != 0 {
		t.Errorf("List of missing dir = %v, %v; want none, nil", uids, err)
	}
	uids := []string{"b-2", "a", "a-b", "c"}
	for _, uid := range uids {
		spec, err := gpus.Build(Claim{UID: uid, Requests: []Request{req("r", gpu(0))}})
		if err != nil {
			t.Fatal(err)
		}
		if err := gpus.Write(uid, spec); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := npus.Build(Claim{UID: "n", Requests: []Request{req("r", npu(0))}})
	if err != nil {
		t.Fatal(err)
	}
	if err := npus.Write("n", spec); err != nil {
		t.Fatal(err)
	}
	// Noise: another vendor's spec, a leftover temporary file, a directory.
	writeFile(t, filepath.Join(dir, "nvidia.com-gpu.yaml"), "x")
	writeFile(t, filepath.Join(dir, ".accel-dra.io-gpu_z.123.tmp"), "x")
	if err := os.Mkdir(filepath.Join(dir, "accel-dra.io-gpu_d.json"), 0o755); err != nil {
		t.Fatal(err)
	}

	list := func(w *Writer) []string {
		t.Helper()
		got, err := w.List()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if diff := cmp.Diff([]string{"a", "a-b", "b-2", "c"}, list(gpus)); diff != "" {
		t.Errorf("GPU List (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"n"}, list(npus)); diff != "" {
		t.Errorf("NPU List (-want +got):\n%s", diff)
	}
	if !gpus.Exists("a") || gpus.Exists("n") || npus.Exists("a") || gpus.Exists("../x") {
		t.Error("Exists reports wrong")
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := gpus.Remove("a"); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if gpus.Exists("a") {
		t.Error("spec still exists after Remove")
	}
	if diff := cmp.Diff([]string{"a-b", "b-2", "c"}, list(gpus)); diff != "" {
		t.Errorf("GPU List after Remove (-want +got):\n%s", diff)
	}
	if err := gpus.Remove("../x"); err == nil {
		t.Error("Remove(../x): want error")
	}
}

func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	w := New(dir, device.KindGPU)
	for _, env := range [][]string{{"A=1"}, {"A=2"}} {
		spec, err := w.Build(Claim{UID: claimUID, Requests: []Request{req("r", gpu(0))}, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(claimUID, spec); err != nil {
			t.Fatal(err)
		}
	}
	got, err := cdiapi.ReadSpec(w.Path(claimUID), 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"A=2", "NVIDIA_VISIBLE_DEVICES=void"}, got.ContainerEdits.Env); diff != "" {
		t.Errorf("env after rewrite (-want +got):\n%s", diff)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want one spec", names)
	}
}

func BenchmarkWrite(b *testing.B) {
	w := New(b.TempDir(), device.KindGPU)
	spec, err := w.Build(Claim{UID: claimUID, Requests: []Request{req("r", gpu(0), gpu(1))}, Common: commonEdits, Control: gpuControl, Env: []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.Write(claimUID, spec); err != nil {
			b.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestDeviceNodeFileMode: a node with a mode prescribed by the driver (a MIG caps node, which
// the host may lack) carries it in the spec, and the runtime creates the node with it; a node
// without one leaves the mode to the runtime.
func TestDeviceNodeFileMode(t *testing.T) {
	caps := device.Node{Path: "/dev/nvidia-caps/nvidia-cap12", Type: "c", Major: 509, Minor: 12, FileMode: 0o444}
	mig := gpu(0)
	mig.Nodes = append(mig.Nodes, caps)
	dir := t.TempDir()
	w := New(dir, device.KindGPU)
	c := buildCase{kind: device.KindGPU, requests: []Request{req("gpu", mig)}, control: gpuControl}
	spec, err := w.Build(c.claim(claimUID))
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]string{}
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			modes[n.Path] = "none"
			if n.FileMode != nil {
				modes[n.Path] = n.FileMode.String()
			}
		}
	}
	if diff := cmp.Diff(map[string]string{"/dev/nvidia0": "none", caps.Path: "-r--r--r--"}, modes); diff != "" {
		t.Errorf("device nodes' modes in the spec (-want +got):\n%s", diff)
	}
	if err := w.Write(claimUID, spec); err != nil {
		t.Fatal(err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ociSpec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(ociSpec, c.ids(claimUID)...); err != nil {
		t.Fatal(err)
	}
	var got *oci.LinuxDevice
	for i, d := range ociSpec.Linux.Devices {
		if d.Path == caps.Path {
			got = &ociSpec.Linux.Devices[i]
		}
	}
	if got == nil || got.Type != "c" || got.Major != 509 || got.Minor != 12 || got.FileMode == nil || *got.FileMode != 0o444 {
		t.Errorf("container's caps node %+v, want c 509:12 with mode 0444, though the host has no such node", got)
	}
}

// TestDeviceNodeGID: a node whose host group is not root's (the Ascend driver's HwHiAiUser)
// carries it in the spec, device and control nodes alike, and the runtime creates the
// container's node with it whatever the process's own group; a node without one gets the
// runtime's default (the process's primary group, as the CDI library does).
func TestDeviceNodeGID(t *testing.T) {
	const hwHiAiUser = 1000
	dev := npu(0)
	dev.Nodes[0].GID, dev.Nodes[0].FileMode = hwHiAiUser, 0o660
	control := slices.Clone(npuControl)
	control[0].GID, control[0].FileMode = hwHiAiUser, 0o660
	plain := npu(1)
	dir := t.TempDir()
	w := New(dir, device.KindNPU)
	c := buildCase{kind: device.KindNPU, requests: []Request{req("npu", dev, plain)}, control: control}
	spec, err := w.Build(c.claim(claimUID))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(claimUID, spec); err != nil {
		t.Fatal(err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	// A non-root process in HwHiAiUser through a supplementary group only.
	ociSpec := &oci.Spec{Process: &oci.Process{User: oci.User{UID: 1000, GID: 2000, AdditionalGids: []uint32{hwHiAiUser}}}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(ociSpec, c.ids(claimUID)...); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range ociSpec.Linux.Devices {
		got[d.Path] = "none"
		if d.GID != nil {
			got[d.Path] = strconv.FormatUint(uint64(*d.GID), 10)
		}
	}
	want := map[string]string{
		dev.Nodes[0].Path: "1000", control[0].Path: "1000",
		plain.Nodes[0].Path: "2000", control[1].Path: "2000", control[2].Path: "2000",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("container's device nodes' groups (-want +got):\n%s", diff)
	}
}
