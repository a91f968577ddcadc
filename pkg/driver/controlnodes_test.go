package driver

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// TestControlNodesLoadedAfterStart: nvidia-uvm is loaded after the plugin enumerated (CUDA
// loads it on first use), and a claim prepared afterwards gets its nodes, with the numbers the
// kernel gave them, whether or not /dev already has them; a claim prepared before gets none,
// since there were none to give. The driver is wired as the plugin wires it: the inventory of
// the real NVML backend over the mock machine, a backend that is closed after enumeration.
func TestControlNodesLoadedAfterStart(t *testing.T) {
	for name, later := range map[string]nvmlmock.UVMState{
		"module and nodes": nvmlmock.UVMReady,
		"module only":      nvmlmock.UVMModuleOnly,
	} {
		t.Run(name, func(t *testing.T) {
			srv, err := nvmlmock.NewServer("h100-8x-2numa", "node-a")
			if err != nil {
				t.Fatal(err)
			}
			srv.SetUVM(nvmlmock.UVMNotLoaded)
			be := srv.Backend()
			inv, err := be.Enumerate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := be.Close(); err != nil {
				t.Fatal(err)
			}
			e := &env{t: t, ctx: context.Background(), dir: t.TempDir(), inv: inv, boot: bootA}
			e.start()

			if r := e.prepare(claim("before", []result{{Device: "gpu-0"}})); r.Err != nil {
				t.Fatal(r.Err)
			}
			if got := controlNodesOf(t, e, "before"); got["/dev/nvidia-uvm"] != nil {
				t.Errorf("a claim prepared before nvidia-uvm was loaded got %+v", got["/dev/nvidia-uvm"])
			}

			srv.SetUVM(later)
			if r := e.prepare(claim("after", []result{{Device: "gpu-1"}})); r.Err != nil {
				t.Fatal(r.Err)
			}
			got := controlNodesOf(t, e, "after")
			for path, minor := range map[string]int64{"/dev/nvidia-uvm": 0, "/dev/nvidia-uvm-tools": 1, "/dev/nvidiactl": 255} {
				n := got[path]
				if n == nil {
					t.Errorf("claim prepared after nvidia-uvm was loaded: no %s; control nodes %v", path, keys(got))
					continue
				}
				// 508 is the mock kernel's major of nvidia-uvm (/proc/devices); 195 nvidia's.
				wantMajor := int64(508)
				if path == "/dev/nvidiactl" {
					wantMajor = 195
				}
				if n.Type != "c" || n.Major != wantMajor || n.Minor != minor {
					t.Errorf("%s = %s %d:%d, want c %d:%d", path, n.Type, n.Major, n.Minor, wantMajor, minor)
				}
			}
		})
	}
}

// controlNodesOf reads the spec-wide device nodes of a claim's CDI spec.
func controlNodesOf(t *testing.T, e *env, uid string) map[string]*specs.DeviceNode {
	t.Helper()
	data, err := os.ReadFile(e.drv.opts.CDI.Path(uid))
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	out := map[string]*specs.DeviceNode{}
	for _, n := range spec.ContainerEdits.DeviceNodes {
		out[n.Path] = n
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
