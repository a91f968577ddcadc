package nodeplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/accel-dra/accel-dra/pkg/backend"
	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/device"
)

func TestInventoryCache(t *testing.T) {
	numa := int64(1)
	inv := &device.Inventory{Kind: device.KindGPU, Devices: []device.Device{{
		Name: "gpu-0", Kind: device.KindGPU, UUID: "GPU-0", NUMANode: &numa,
		Nodes: []device.Node{{Path: "/dev/nvidia0", Type: "c", Major: 195}},
	}}, ControlNodes: []device.Node{{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}}}
	tests := map[string]struct {
		write   func(dir string) error
		sub     string // where the plugin reads, under the test's directory
		kind    device.Kind
		want    int // devices
		wantErr string
	}{
		"round trip":       {write: func(dir string) error { return saveInventory(dir, inv) }, kind: device.KindGPU, want: 1},
		"never enumerated": {write: func(string) error { return nil }, kind: device.KindGPU, want: 0},
		"another kind's":   {write: func(dir string) error { return saveInventory(dir, inv) }, kind: device.KindNPU, wantErr: "holds gpu devices, this plugin serves npu"},
		"not an inventory": {write: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, InventoryCacheFile), []byte("{"), 0o600)
		}, kind: device.KindGPU, wantErr: "unexpected end of JSON input"},
		"directory made on write": {write: func(dir string) error { return saveInventory(filepath.Join(dir, "new"), inv) }, sub: "new", kind: device.KindGPU, want: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.write(dir); err != nil {
				t.Fatal(err)
			}
			dir = filepath.Join(dir, tc.sub)
			got, err := loadInventory(dir, tc.kind)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("loadInventory: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tc.kind || len(got.Devices) != tc.want {
				t.Fatalf("loaded %s with %d devices, want %s with %d", got.Kind, len(got.Devices), tc.kind, tc.want)
			}
			if tc.want == 1 && (got.Devices[0].UUID != "GPU-0" || *got.Devices[0].NUMANode != 1 || got.Devices[0].Nodes[0].Path != "/dev/nvidia0" || len(got.ControlNodes) != 1) {
				t.Errorf("loaded %+v, want what was saved", got)
			}
			if matches, _ := filepath.Glob(filepath.Join(dir, InventoryCacheFile+".tmp*")); len(matches) != 0 {
				t.Errorf("temporary files left: %v", matches)
			}
		})
	}
}

type recordingPlugin struct {
	kubeletplugin.DRAPlugin
	asked []types.UID
}

func (p *recordingPlugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		p.asked = append(p.asked, c.UID)
		out[c.UID] = kubeletplugin.PrepareResult{}
	}
	return out, nil
}

// TestMismatchedPlugin: claims the node holds are answered by the driver (a running pod's
// container restarted); every other claim is refused with the reason, and never reaches it.
func TestMismatchedPlugin(t *testing.T) {
	reason := errors.New("NVIDIA driver/library version mismatch: reboot the node")
	inner := &recordingPlugin{}
	p := mismatchedPlugin{DRAPlugin: inner, prepared: func() []types.UID { return []types.UID{"held"} }, reason: reason}
	claim := func(uid string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "ns", Name: uid}}
	}
	res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("held"), claim("new")})
	if err != nil {
		t.Fatal(err)
	}
	if len(inner.asked) != 1 || inner.asked[0] != "held" {
		t.Errorf("the driver was asked for %v, want only the held claim", inner.asked)
	}
	if res["held"].Err != nil {
		t.Errorf("held claim: %v, want the driver's answer", res["held"].Err)
	}
	if err := res["new"].Err; !errors.Is(err, reason) || !strings.Contains(err.Error(), "ns/new") {
		t.Errorf("new claim: %v, want a refusal naming the claim and wrapping the reason", err)
	}
}

// TestVersionsAgreeAfterLibraryReplaced: a plugin started mismatched (new libraries over the
// old module) whose libraries are then rolled back to the loaded module's version cannot find
// that out in its process, which calls the library it loaded first (nvml.ErrLibraryBound): it
// ends its wait, to start afresh, rather than wait for ever.
func TestVersionsAgreeAfterLibraryReplaced(t *testing.T) {
	ctx := context.Background()
	root, mockDir := t.TempDir(), t.TempDir()
	if err := nvmlmock.WriteDriver(root, "580.82.07"); err != nil {
		t.Fatal(err)
	}
	if err := nvmlmock.LoadModule(mockDir, "570.172.08"); err != nil {
		t.Fatal(err)
	}
	opts := backend.Options{Name: backend.Mock, NodeName: "node-a", MockDir: mockDir, NVIDIADriverRoot: root}
	be, err := backend.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.Enumerate(ctx); !errors.Is(err, nvmlbackend.ErrVersionMismatch) {
		t.Fatalf("the premise: enumerating new libraries over the old module: %v, want ErrVersionMismatch", err)
	}
	_ = be.Close()
	if err := nvmlmock.WriteDriver(root, "570.172.08"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if !awaitVersionsAgree(ctx, opts, 10*time.Millisecond) {
		t.Errorf("the wait for the versions to agree did not end within 10s of the libraries' rollback")
	}
}
