package driver

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/klog/v2/ktesting"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
)

// TestDeviceNodeGroup: the Ascend driver's device nodes are crw-rw---- with group HwHiAiUser
// (npumock.DriverGID), and a non-root process reaches them as a member of that group. A runtime
// creates a container's node with the spec's gid, else the process's primary group (the CDI
// library), else root's (runc); so unless the spec carries the host node's group, a container
// whose user is in HwHiAiUser only through a supplementary group is refused its NPU. Runtimes
// differ in when they inject CDI devices: before the container's user is set (Docker before
// moby/moby#52579: the CDI library sees uid and gid 0) or after; the node must carry the host's
// group either way (NVIDIA's toolkit fixed the same for its nodes, NVIDIA/nvidia-container-
// toolkit#1631).
func TestDeviceNodeGroup(t *testing.T) {
	dir := t.TempDir()
	be, err := npumock.New(dir, "ascend310p-2x", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	_, devRoot, err := npumock.Generate(dir, "ascend310p-2x", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := be.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = be.Close()
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, dir: t.TempDir(), inv: inv, boot: bootA, driver: "npu.accel-dra.io"}
	e.start()
	r := e.prepare(claim("npu", []result{{Device: "npu-1", Driver: "npu.accel-dra.io"}}))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	var ids []string
	for _, d := range r.Devices {
		ids = append(ids, d.CDIDeviceIDs...)
	}

	// hostGroup is the group of the host's node behind a container path, as `stat -c %g` says.
	hostGroup := func(containerPath string) uint32 {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(devRoot, path.Base(containerPath)), &st); err != nil {
			t.Fatal(err)
		}
		return st.Gid
	}
	users := map[string]oci.User{
		"user set after injection":  {},
		"user set before injection": {UID: 1000, GID: 2000, AdditionalGids: []uint32{npumock.DriverGID}},
	}
	for name, user := range users {
		t.Run(name, func(t *testing.T) {
			cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(e.cdiDir()), cdiapi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			spec := &oci.Spec{Process: &oci.Process{User: user}, Linux: &oci.Linux{}}
			if _, err := cache.InjectDevices(spec, ids...); err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{"/dev/davinci1": true, "/dev/davinci_manager": true, "/dev/devmm_svm": true, "/dev/hisi_hdc": true}
			for _, d := range spec.Linux.Devices {
				delete(want, d.Path)
				host := hostGroup(d.Path)
				if host == 0 {
					t.Fatalf("host node of %s has root's group; the mock lays out the Ascend driver's group", d.Path)
				}
				if d.GID == nil || *d.GID != host {
					got := "none (the runtime's default)"
					if d.GID != nil {
						got = strconv.FormatUint(uint64(*d.GID), 10)
					}
					t.Errorf("container's %s has group %s, want the host node's group %d", d.Path, got, host)
				}
				if d.FileMode == nil || d.FileMode.Perm() != 0o660 {
					t.Errorf("container's %s has mode %v, want the host node's 0660", d.Path, d.FileMode)
				}
			}
			if len(want) != 0 {
				t.Errorf("container lacks nodes %v", want)
			}
		})
	}
}

// TestMIGRecordGroup: with NVreg_DeviceFileGID set, a MIG device's /dev/nvidiaN (its GPU's) is
// the driver's group with 0660, and a container gets it so, static or dynamic. A dynamic MIG
// device's record holds its nodes, which keep no group (device.Node.GID is not encoded): a spec
// written again from the record (a restart that found the CDI directory wiped) must take the
// group from the GPU as the backend finds it now, as it takes the caps nodes' modes.
func TestMIGRecordGroup(t *testing.T) {
	const gid = 1234
	for name, static := range map[string]bool{"static": true, "dynamic": false} {
		t.Run(name, func(t *testing.T) {
			e := startMIGEnv(t, "mig-mixed", static)
			e.deviceFileGID = gid
			e.restart()
			dev := "gpu-1-mig-1g5gb-0"
			if static {
				dev = "gpu-0-mig-2g10gb-0"
			}
			gpuNode := e.inv.Lookup()[dev].Nodes[0].Path
			check := func(when string, ids []string) {
				t.Helper()
				found := false
				for _, d := range e.injectedDevices(t, when, ids) {
					if d.Path != gpuNode && d.Path != "/dev/nvidiactl" {
						continue
					}
					found = found || d.Path == gpuNode
					if d.GID == nil || *d.GID != gid || d.FileMode == nil || d.FileMode.Perm() != 0o660 {
						t.Errorf("%s: container's %s has group %v mode %v, want the host's %d and 0660", when, d.Path, ptrString(d.GID), d.FileMode, gid)
					}
				}
				if !found {
					t.Errorf("%s: container lacks %s", when, gpuNode)
				}
			}
			r := e.prepare(claim("a", []result{{Device: dev}}))
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			check("prepared", r.Devices[0].CDIDeviceIDs)
			e.restartWithoutSpecs()
			r = e.prepare(claim("a", []result{{Device: dev}}))
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			check("written again from the record", r.Devices[0].CDIDeviceIDs)
		})
	}
}

func ptrString(p *uint32) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatUint(uint64(*p), 10)
}

// restartWithoutSpecs restarts the plugin and removes every CDI spec, as on a node whose CDI
// directory was wiped: the specs are written again from the records.
func (e *migEnv) restartWithoutSpecs() {
	e.t.Helper()
	e.restart()
	specs, _ := filepath.Glob(filepath.Join(e.cdiDir(), "*"))
	for _, f := range specs {
		if err := os.Remove(f); err != nil {
			e.t.Fatal(err)
		}
	}
}
