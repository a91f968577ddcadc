package health

import (
	"fmt"
	"sort"
)

// XID descriptions from NVIDIA's XID catalogue
// (https://docs.nvidia.com/deploy/xid-errors/), for messages; an XID that is not listed is still
// classified, with a generic description.
var xidNames = map[uint64]string{
	8:   "GPU stopped processing",
	13:  "Graphics Engine Exception",
	31:  "GPU memory page fault",
	32:  "Invalid or corrupted push buffer stream",
	38:  "Driver firmware error",
	43:  "GPU stopped processing",
	45:  "Preemptive cleanup, due to previous errors",
	48:  "Double Bit ECC Error",
	61:  "Internal micro-controller breakpoint/warning",
	62:  "Internal micro-controller halt",
	63:  "ECC page retirement or row remapping recording event",
	64:  "ECC page retirement or row remapper recording failure",
	68:  "Video processor exception",
	69:  "Graphics Engine class error",
	74:  "NVLink Error",
	79:  "GPU has fallen off the bus",
	92:  "High single-bit ECC error rate",
	94:  "Contained ECC error",
	95:  "Uncontained ECC error",
	109: "Context Switch Timeout Error",
	119: "GSP RPC Timeout",
	120: "GSP Error",
	140: "Unrecovered ECC Error",
}

// xidNoReset are the XIDs after which NVIDIA's XID catalogue
// (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, "Resolution Bucket
// (Immediate Action)") asks for no GPU reset: RESTART_APP, IGNORE, or a workflow without one
// (45: restart the fabric manager at most). Every other XID, listed or not, is taken to need a
// reset: the catalogue's RESET_GPU, RESTART_BM, WORKFLOW_XID_48 and WORKFLOW_NVLINK_ERR, and
// whatever it does not say.
var xidNoReset = map[uint64]bool{
	8: true, 11: true, 13: true, 25: true, 31: true, 32: true, 43: true, 45: true,
	63: true, 68: true, 92: true, 94: true, 137: true, 157: true,
}

// XIDNeedsReset tells whether NVIDIA's XID catalogue asks for a GPU reset (or more) after xid.
// It stands in for the driver's recovery action (FI_DEV_GET_GPU_RECOVERY_ACTION) where the
// driver is older than that field (docs/health.md).
func XIDNeedsReset(xid uint64) bool { return !xidNoReset[xid] }

// DefaultIgnoredXIDs are application errors: the XID reports a fault of the program that ran on
// the GPU, and the GPU itself is fine. The list is the one NVIDIA's device plugin
// (internal/rm/health.go) and DRA driver (xidsToSkip) ignore: 13, 31, 43, 45, 68 and 109
// (Context Switch Timeout, which a program that hogs the GPU causes).
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// Classifier decides what an XID means for the device.
type Classifier struct {
	ignored map[uint64]bool
}

// NewClassifier ignores the XIDs given (nil: DefaultIgnoredXIDs).
func NewClassifier(ignored []uint64) *Classifier {
	if ignored == nil {
		ignored = DefaultIgnoredXIDs
	}
	c := &Classifier{ignored: map[uint64]bool{}}
	for _, x := range ignored {
		c.ignored[x] = true
	}
	return c
}

// Ignored returns the ignored XIDs, sorted.
func (c *Classifier) Ignored() []uint64 {
	out := make([]uint64, 0, len(c.ignored))
	for x := range c.ignored {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Classify turns a critical-XID event of a device into a fault event, or returns false for an
// ignored XID. XID 79 is CauseLost: the GPU fell off the bus and answers nothing until reset.
// The ECC XIDs (48, 94, 95, 140) stay CauseXID: NVML reports the uncorrectable error itself
// as a separate double-bit ECC event, which is CauseECC, and a taint per source of the report
// keeps the XID visible to whoever tolerates ECC taints.
func (c *Classifier) Classify(device string, xid uint64) (Event, bool) {
	if c.ignored[xid] {
		return Event{}, false
	}
	ev := Event{Type: Fault, Device: device, Cause: CauseXID, Code: fmt.Sprint(xid), Message: XIDMessage(xid)}
	if xid == 79 {
		ev.Cause = CauseLost
	}
	return ev, true
}

// XIDMessage names an XID for people: "XID 48: Double Bit ECC Error".
func XIDMessage(xid uint64) string {
	name, ok := xidNames[xid]
	if !ok {
		name = "critical error"
	}
	return fmt.Sprintf("XID %d: %s", xid, name)
}
