package driver

import (
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/slices"
)

// EnvMemoryLimits names, in a claim's CDI spec, the memory share of each device the claim got
// by consumable capacity: "<uuid>=<bytes>[,<uuid>=<bytes>...]", sorted by UUID. Nothing on the
// GPU enforces it by itself (see docs/sharing.md): it tells the workload, and whatever it runs
// (a framework's allocator limit, an MPS client limit), what the scheduler gave it.
const EnvMemoryLimits = "ACCEL_DRA_GPU_MEMORY_LIMITS"

// shareOptions are the slices.Build options of the sharing modes.
func (d *Driver) shareOptions() []slices.Option {
	if !d.opts.ConsumableMemory {
		return nil
	}
	return []slices.Option{slices.WithConsumableMemory()}
}

// share copies a result's share of a device that allows multiple allocations into pd.
func share(pd *checkpoint.PreparedDevice, r *resourceapi.DeviceRequestAllocationResult) {
	if r.ShareID == nil {
		return
	}
	pd.ShareID = string(*r.ShareID)
	if len(r.ConsumedCapacity) > 0 {
		pd.ConsumedCapacity = make(map[string]resource.Quantity, len(r.ConsumedCapacity))
		for name, q := range r.ConsumedCapacity {
			pd.ConsumedCapacity[string(name)] = q.DeepCopy()
		}
	}
}

// memoryLimitEnv is the EnvMemoryLimits entry of a claim, if any of its devices is a share
// with consumed memory. A device shared twice by one claim (two requests) counts both shares.
func memoryLimitEnv(devs []checkpoint.PreparedDevice) []string {
	limits := map[string]int64{}
	for _, pd := range devs {
		if pd.ShareID == "" {
			continue
		}
		if q, ok := pd.ConsumedCapacity[string(slices.CapacityMemory)]; ok {
			limits[pd.UUID] += q.Value()
		}
	}
	if len(limits) == 0 {
		return nil
	}
	uuids := make([]string, 0, len(limits))
	for u := range limits {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	parts := make([]string, 0, len(uuids))
	for _, u := range uuids {
		parts = append(parts, fmt.Sprintf("%s=%d", u, limits[u]))
	}
	return []string{EnvMemoryLimits + "=" + strings.Join(parts, ",")}
}

// holder is a claim other than self that stands in the way of preparing pd: for a share, a claim
// holding the device exclusively; for an exclusive device, a claim holding it exclusively or a
// share of it. Shares of one device do not stand in each other's way: the scheduler, which
// alone knows the device's capacity and every allocation, decided that they fit. The result
// is deterministic (the smallest UID) so that errors name the same claim every time. Called
// with the node lock held.
func (d *Driver) holder(pd *checkpoint.PreparedDevice, self types.UID) (types.UID, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := d.ownerKey(pd)
	if other, held := d.owner[key]; held && other != self {
		return other, true
	}
	if pd.ShareID != "" {
		return "", false
	}
	var first types.UID
	for uid := range d.shares[key] {
		if uid != self && (first == "" || uid < first) {
			first = uid
		}
	}
	return first, first != ""
}

// conflict explains why pd cannot be prepared next to the claim other.
func conflict(pd *checkpoint.PreparedDevice, oc *checkpoint.Claim) string {
	theirs := false
	if oc != nil {
		for _, o := range oc.Devices {
			if o.UUID == pd.UUID && o.ShareID != "" {
				theirs = true
			}
		}
	}
	switch {
	case pd.ShareID != "":
		return "holds it exclusively; a share of it cannot be prepared next to that claim"
	case theirs:
		return "holds a share of it; it cannot also be prepared for exclusive use"
	}
	return "holds it"
}
