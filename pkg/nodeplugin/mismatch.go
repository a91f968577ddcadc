package nodeplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/backend"
	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// A host driver upgrade without a reboot leaves the old kernel module loaded under the new
// libraries, and NVML refuses to initialise (nvml.ErrVersionMismatch) until the node reboots
// or the module is reloaded. Exiting then would crash-loop the plugin, and a plugin that never
// registers cannot unprepare: pods stay Terminating and their devices held. So the plugin starts
// mismatched instead: it serves the devices it last enumerated (InventoryCacheFile), tainted
// with health.CauseDriver, unprepares, answers prepares of claims it already holds, refuses new
// ones with the reason, and exits once NVML works again, for the kubelet to start it afresh.

// InventoryCacheFile, under the plugin data directory, is the last enumeration, for a start
// that cannot enumerate.
const InventoryCacheFile = "inventory.json"

// ReasonDriverVersionMismatch is the reason of the Node warning of a mismatched start.
const ReasonDriverVersionMismatch = "NVIDIADriverVersionMismatch"

// defaultVersionsAgreePoll is how often a mismatched plugin tries NVML again when
// --driver-check-interval does not say.
const defaultVersionsAgreePoll = 30 * time.Second

// saveInventory keeps inv for a mismatched start; written whole or not at all.
func saveInventory(dir string, inv *device.Inventory) error {
	b, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, InventoryCacheFile+".tmp*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, InventoryCacheFile))
}

// loadInventory reads what saveInventory kept: an empty inventory of kind where there is none
// (the node never enumerated), and an error for a file that cannot be read as one, which the
// plugin then does not serve from.
func loadInventory(dir string, kind device.Kind) (*device.Inventory, error) {
	b, err := os.ReadFile(filepath.Join(dir, InventoryCacheFile))
	if errors.Is(err, fs.ErrNotExist) {
		return &device.Inventory{Kind: kind}, nil
	}
	if err != nil {
		return nil, err
	}
	var inv device.Inventory
	if err := json.Unmarshal(b, &inv); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, InventoryCacheFile), err)
	}
	if inv.Kind != kind {
		return nil, fmt.Errorf("%s holds %s devices, this plugin serves %s", filepath.Join(dir, InventoryCacheFile), inv.Kind, kind)
	}
	return &inv, nil
}

// mismatchSource reports every device unhealthy for the driver's cause.
func mismatchSource(devs []device.Device, reason error) health.Source {
	return health.SourceFunc(func(ctx context.Context, emit func(health.Event)) error {
		for _, d := range devs {
			emit(health.Event{Type: health.Fault, Device: d.Name, Cause: health.CauseDriver, Code: "version-mismatch", Message: reason.Error()})
		}
		emit(health.Event{Type: health.Synced})
		<-ctx.Done()
		return nil
	})
}

// recoveredDriver tells a tracker that kept a mismatch's conditions across the restart that
// ends it (the state file outlives the process) that NVML works again, before src reports.
func recoveredDriver(devs []device.Device, src health.Source) health.Source {
	return health.SourceFunc(func(ctx context.Context, emit func(health.Event)) error {
		for _, d := range devs {
			emit(health.Event{Type: health.Recovered, Device: d.Name, Cause: health.CauseDriver})
		}
		return src.Run(ctx, emit)
	})
}

// mismatchedPlugin answers prepares of claims the node already holds (the kubelet asks again
// for a running pod's claims when it restarts) and refuses new ones: their containers would get
// libraries that cannot talk to the loaded module.
type mismatchedPlugin struct {
	kubeletplugin.DRAPlugin
	prepared func() []types.UID
	reason   error
}

func (p mismatchedPlugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	held := p.prepared()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var known []*resourceapi.ResourceClaim
	for _, c := range claims {
		if slices.Contains(held, c.UID) {
			known = append(known, c)
			continue
		}
		out[c.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("not preparing claim %s/%s on this node: %w", c.Namespace, c.Name, p.reason)}
	}
	if len(known) == 0 {
		return out, nil
	}
	res, err := p.DRAPlugin.PrepareResourceClaims(ctx, known)
	if err != nil {
		return nil, err
	}
	for uid, r := range res {
		out[uid] = r
	}
	return out, nil
}

// mismatchedPartitioner stands in for dynamic MIG's while NVML cannot be used: MIG instances
// cannot be listed, made or destroyed, so an unprepare that must destroy one fails and the
// kubelet retries it until the plugin restarts with NVML.
type mismatchedPartitioner struct{ reason error }

func (p mismatchedPartitioner) CreateGI(context.Context, string, int, device.MIGPlacement) (int, error) {
	return 0, p.reason
}
func (p mismatchedPartitioner) CreateCI(context.Context, string, int) (device.MIGInstance, error) {
	return device.MIGInstance{}, p.reason
}
func (p mismatchedPartitioner) DestroyMIG(context.Context, string, int) error { return p.reason }
func (p mismatchedPartitioner) ListMIG(context.Context) ([]device.MIGInstance, error) {
	return nil, p.reason
}

// awaitVersionsAgree tries a backend of opts every interval and returns true once one
// enumerates, false when ctx ends.
func awaitVersionsAgree(ctx context.Context, opts backend.Options, interval time.Duration) bool {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(interval)
	defer t.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		be, err := backend.New(klog.NewContext(ctx, klog.LoggerWithValues(logger, "probe", "versions")), opts)
		if err == nil {
			_, err = be.Enumerate(ctx)
			_ = be.Close()
		}
		if err == nil {
			return true
		}
		if errors.Is(err, nvmlbackend.ErrLibraryBound) {
			// The root's library was replaced again (another version, a rollback to the
			// module's): this process would call the one it loaded first for ever.
			logger.Info("The driver's NVML library was replaced: only a new process loads it", "err", err)
			return true
		}
		if err.Error() != last {
			logger.Info("NVML still refuses the driver", "err", err)
			last = err.Error()
		}
	}
}
