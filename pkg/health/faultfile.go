package health

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// FaultDir is the directory under a mock backend's directory where tests, the demo and users
// inject faults: one file per device, named after it (gpu-3, npu-0), one fault per line:
//
//	xid <N> [<action>]  a critical XID (GPU); an ignored XID is delivered and ignored
//	ecc [<action>]      a double-bit ECC error (GPU)
//	lost          the device stops answering (GPU_IS_LOST; an NPU whose node is gone)
//	fault <code>  an NPU fault with the Ascend error code, e.g. 0x80E01801
//	fabric <condition>  the GPU's NVLink fabric reports a FabricConditions entry in its health
//	              mask while the line stays (GPUs whose fabric has a health mask: GB200)
//
// <action> is the GPU recovery action the driver reports while the line stays (RecoveryActions:
// none, reset, reboot, drain-p2p, drain-and-reset); without it, the GPU mock reports what NVIDIA's
// XID catalogue asks for (XIDNeedsReset), and a reset for an ECC error.
//
// Blank lines and lines starting with # are ignored. Removing the file, or leaving no fault in
// it, is the recovery: the GPU mock then answers again and reports recovery action none, the
// NPU mock reports the device healthy. See docs/health.md.
const FaultDir = "faults"

// InjectedFault is one line of a fault file.
type InjectedFault struct {
	Kind string
	// Code is the XID or the NPU error code; empty for ecc and lost.
	Code string
	// Action is the recovery action the line asks the GPU mock to report; empty for its
	// default.
	Action string
}

// Event is the fault without its recovery action: what the hardware reports once. A line whose
// action changes is the same event with a new recovery action, not a second event.
func (f InjectedFault) Event() InjectedFault { return InjectedFault{Kind: f.Kind, Code: f.Code} }

func (f InjectedFault) String() string {
	s := f.Kind
	for _, x := range []string{f.Code, f.Action} {
		if x != "" {
			s += " " + x
		}
	}
	return s
}

// RecoveryActions are the actions a fault line may name, as NVML's
// FI_DEV_GET_GPU_RECOVERY_ACTION values: none, GPU reset, node reboot, drain P2P, drain and
// reset.
var RecoveryActions = []string{"none", "reset", "reboot", "drain-p2p", "drain-and-reset"}

// Fault kinds of a fault file.
const (
	FaultXID    = "xid"
	FaultECC    = "ecc"
	FaultLost   = "lost"
	FaultNPU    = "fault"
	FaultFabric = "fabric"
	maxFaultSz  = 64 << 10
)

// The conditions of an NVLink fabric's health mask that make a GPU unhealthy (CauseFabric), by
// the fields of NVML's NVML_GPU_FABRIC_HEALTH_MASK_* (docs.nvidia.com/deploy/nvml-api, "Fabric
// definitions"). They are the values of the fabric cause's taint and the conditions a fault file
// may inject.
const (
	// FabricDegradedBW: DEGRADED_BW_TRUE, "bandwidth degraded".
	FabricDegradedBW = "degraded-bw"
	// FabricRouteRecovery: ROUTE_RECOVERY_TRUE, a route recovery in progress.
	FabricRouteRecovery = "route-recovery"
	// FabricRouteUnhealthy: ROUTE_UNHEALTHY_TRUE, a route is unhealthy.
	FabricRouteUnhealthy = "route-unhealthy"
	// FabricAccessTimeoutRecovery: ACCESS_TIMEOUT_RECOVERY_TRUE, an access-timeout recovery in
	// progress.
	FabricAccessTimeoutRecovery = "access-timeout-recovery"
	// FabricIncorrectConfig: INCORRECT_CONFIGURATION other than NONE (a wrong SysGUID or chassis
	// serial number, no partition, too few NVLinks); the fault file injects INSUFFICIENT_NVLINKS.
	FabricIncorrectConfig = "incorrect-config"
)

// FabricConditions are the fabric conditions, in the order of their fields in the mask.
var FabricConditions = []string{FabricDegradedBW, FabricRouteRecovery, FabricRouteUnhealthy, FabricAccessTimeoutRecovery, FabricIncorrectConfig}

// ParseFaults parses the content of one device's fault file.
func ParseFaults(data []byte) ([]InjectedFault, error) {
	if len(data) > maxFaultSz {
		return nil, fmt.Errorf("fault file is %d bytes, at most %d allowed", len(data), maxFaultSz)
	}
	var out []InjectedFault
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		f := InjectedFault{Kind: fields[0]}
		// xid and ecc may end in a recovery action.
		if f.Kind == FaultXID && len(fields) == 3 || f.Kind == FaultECC && len(fields) == 2 {
			f.Action = fields[len(fields)-1]
			if !slices.Contains(RecoveryActions, f.Action) {
				return nil, fmt.Errorf("line %d: %q: recovery action %q is not one of %s", n, line, f.Action, strings.Join(RecoveryActions, ", "))
			}
			fields = fields[:len(fields)-1]
		}
		switch {
		case f.Kind == FaultXID && len(fields) == 2:
			x, err := strconv.ParseUint(fields[1], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q: XID must be a number: %w", n, line, err)
			}
			f.Code = strconv.FormatUint(x, 10)
		case f.Kind == FaultNPU && len(fields) == 2:
			if _, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(fields[1]), "0x"), 16, 32); err != nil {
				return nil, fmt.Errorf("line %d: %q: error code must be a hexadecimal number: %w", n, line, err)
			}
			f.Code = fields[1]
		case f.Kind == FaultFabric && len(fields) == 2:
			if !slices.Contains(FabricConditions, fields[1]) {
				return nil, fmt.Errorf("line %d: %q: fabric condition %q is not one of %s", n, line, fields[1], strings.Join(FabricConditions, ", "))
			}
			f.Code = fields[1]
		case (f.Kind == FaultECC || f.Kind == FaultLost) && len(fields) == 1:
		default:
			return nil, fmt.Errorf("line %d: %q: want \"xid <N> [<action>]\", \"ecc [<action>]\", \"lost\", \"fault <code>\" or \"fabric <condition>\"", n, line)
		}
		out = append(out, f)
	}
	return out, sc.Err()
}

// ReadFaults reads every device's fault file under dir (the FaultDir of a mock). A missing dir
// means no faults. A file that cannot be read or parsed is reported in bad and left out of
// faults, so that the caller can keep what it had for that device rather than recover it by
// mistake.
func ReadFaults(dir string) (faults map[string][]InjectedFault, bad map[string]error) {
	faults, bad = map[string][]InjectedFault{}, map[string]error{}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return faults, bad
	}
	if err != nil {
		bad[""] = err
		return faults, bad
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile: recovered
		}
		if err == nil {
			var fs []InjectedFault
			if fs, err = ParseFaults(data); err == nil {
				faults[name] = fs
				continue
			}
		}
		bad[name] = fmt.Errorf("fault file %s: %w", filepath.Join(dir, name), err)
	}
	return faults, bad
}

// SortedDevices returns the keys of m, sorted.
func SortedDevices[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
