package nvmlmock

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// NVLink and fabric of the mock machines: each GPU's links as NVML reports them, per link
// (nvmlDeviceGetNvLinkState, ...RemoteDeviceType, ...RemotePciInfo, ...Version), the P2P status
// over NVLink between two GPUs (nvmlDeviceGetP2PStatus with NVML_P2P_CAPS_INDEX_NVLINK), and the
// fabric registration (nvmlDeviceGetGpuFabricInfo). The calls and their answers follow the NVML
// API reference (docs.nvidia.com/deploy/nvml-api, "NvLink Methods" and nvmlGpuFabricInfo_t):
//
//   - a GPU without NVLink answers NVML_ERROR_NOT_SUPPORTED for every link; a link number the
//     GPU does not have answers NVML_ERROR_INVALID_ARGUMENT;
//   - a link's remote device is a GPU (its PciInfo is the peer's) or an NVSwitch (its PciInfo is
//     the switch's where the switch is on the node's PCI bus, as on HGX baseboards);
//   - P2P over NVLink is OK between two GPUs with an active link to each other or to one switch
//     fabric, and NVML_P2P_STATUS_NOT_SUPPORTED otherwise;
//   - the fabric info of a GPU in a multi-node NVLink domain (GB200 NVL72) has state COMPLETED,
//     status SUCCESS, the cluster UUID and the clique ID the fabric manager assigned; a Hopper
//     HGX answers with state NOT_SUPPORTED; GPUs before Hopper answer NVML_ERROR_NOT_SUPPORTED.
//
// go-nvml's GetGpuFabricInfoV returns a handler bound to a real library device, which a mock
// cannot make: the mock answers nvmlGpuFabricInfo_v3_t through Server.FabricInfoV3, which its
// backend reads instead (nvmlbackend.WithFabricInfo). Its health mask has every field a GB200
// reports: FALSE (healthy) unless a fault file's "fabric <condition>" line makes it TRUE.

// nvlinkEnd is where one link of a GPU goes.
type nvlinkEnd struct {
	// peer is the index of the GPU at the other end, or -1 for a switch.
	peer int
	// sw is the index of the switch in nvlinkGraph.switches when peer is -1.
	sw int
	// down is a link that is not active (training failed, a cable or bridge pulled).
	down bool
}

// fabric is the fabric manager's registration of a GPU (nvmlGpuFabricInfo_t).
type fabric struct {
	clusterUUID [16]byte
	cliqueID    uint32
	state       uint8
	status      nvml.Return
}

// nvlinkGraph is a profile's NVLink wiring.
type nvlinkGraph struct {
	version nvml.NvlinkVersion
	// links[i] are GPU i's links by link number.
	links [][]nvlinkEnd
	// switches are the NVSwitches' PCI bus IDs; "" for a switch off the node's PCI bus (the
	// switch trays of an NVL72 rack), whose remote PCI info NVML cannot give.
	switches []string
	// fabric is every GPU's registration, nil where the GPUs predate Hopper (NOT_SUPPORTED).
	fabric *fabric
}

// switched wires n GPUs to switches: GPU i has perSwitch[s] links to switch s, numbered in
// switch order (NVIDIA DGX H100 User Guide: each H100 has 18 NVLink 4 links to the four
// NVSwitch chips of the HGX baseboard, 5, 4, 4 and 5 of them; DGX A100 User Guide: each A100
// has 12 NVLink 3 links, 2 to each of six NVSwitches).
func switched(n int, perSwitch []int, switches []string, v nvml.NvlinkVersion) *nvlinkGraph {
	g := &nvlinkGraph{version: v, switches: switches}
	for range n {
		var links []nvlinkEnd
		for s, k := range perSwitch {
			for range k {
				links = append(links, nvlinkEnd{peer: -1, sw: s})
			}
		}
		g.links = append(g.links, links)
	}
	return g
}

// direct wires GPUs to each other by a symmetric matrix of link counts (nvidia-smi topo -m's
// NV<k>), links numbered by peer.
func direct(m [][]int, v nvml.NvlinkVersion) *nvlinkGraph {
	g := &nvlinkGraph{version: v}
	for i, row := range m {
		var links []nvlinkEnd
		for j, k := range row {
			if m[j][i] != k {
				panic(fmt.Sprintf("nvmlmock: NVLink matrix not symmetric at %d,%d", i, j))
			}
			for range k {
				links = append(links, nvlinkEnd{peer: j})
			}
		}
		g.links = append(g.links, links)
	}
	return g
}

// down marks links of GPU i down; none given means all of them.
func (g *nvlinkGraph) down(i int, links ...int) *nvlinkGraph {
	c := *g
	c.links = make([][]nvlinkEnd, len(g.links))
	for j := range g.links {
		c.links[j] = append([]nvlinkEnd(nil), g.links[j]...)
	}
	if len(links) == 0 {
		for l := range c.links[i] {
			links = append(links, l)
		}
	}
	for _, l := range links {
		c.links[i][l].down = true
		// A link is down at both ends: the peer's end of a direct link too.
		if p := c.links[i][l].peer; p >= 0 {
			for k := range c.links[p] {
				if c.links[p][k].peer == i && !c.links[p][k].down {
					c.links[p][k].down = true
					break
				}
			}
		}
	}
	return &c
}

// nvlinkPeers reports whether GPUs a and b reach each other over NVLink in one hop: an active
// direct link, or active links to switches of one fabric (all switches of a node, or of a rack,
// form one fabric: every GPU reaches every switch).
func (g *nvlinkGraph) nvlinkPeers(a, b int) bool {
	if g == nil || a == b {
		return false
	}
	var aSwitch, bSwitch bool
	for _, e := range g.links[a] {
		if e.down {
			continue
		}
		if e.peer == b {
			return true
		}
		aSwitch = aSwitch || e.peer < 0
	}
	for _, e := range g.links[b] {
		bSwitch = bSwitch || (!e.down && e.peer < 0)
	}
	return aSwitch && bSwitch
}

// setNVLinkFuncs gives GPU i the NVLink and fabric calls of the profile's graph; a profile
// without one is a PCIe-only machine.
func (s *Server) setNVLinkFuncs(d *mock.Device, i int) {
	g := s.profile.nvlink
	link := func(l int) (nvlinkEnd, nvml.Return) {
		switch {
		case g == nil:
			return nvlinkEnd{}, nvml.ERROR_NOT_SUPPORTED
		case l < 0 || l >= len(g.links[i]):
			return nvlinkEnd{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return g.links[i][l], nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		e, ret := link(l)
		if ret != nvml.SUCCESS {
			return 0, ret
		}
		if e.down {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkVersionFunc = func(l int) (uint32, nvml.Return) {
		if _, ret := link(l); ret != nvml.SUCCESS {
			return 0, ret
		}
		return uint32(g.version), nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		e, ret := link(l)
		if ret != nvml.SUCCESS {
			return 0, ret
		}
		if e.peer < 0 {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
		e, ret := link(l)
		if ret != nvml.SUCCESS {
			return nvml.PciInfo{}, ret
		}
		if e.peer >= 0 {
			return s.Devices[e.peer].GetPciInfo()
		}
		busID := g.switches[e.sw]
		if busID == "" {
			return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		var pci nvml.PciInfo
		copy(pci.BusId[:len(pci.BusId)-1], nvmlBusID(busID))
		copy(pci.BusIdLegacy[:len(pci.BusIdLegacy)-1], strings.ToUpper(busID))
		return pci, nvml.SUCCESS
	}
	d.GetP2PStatusFunc = func(other nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		j := s.indexOf(other)
		if j < 0 {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if idx != nvml.P2P_CAPS_INDEX_NVLINK {
			// Only the NVLink capability is modelled; a caller of another learns so.
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if g.nvlinkPeers(i, j) {
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
		return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
	}
	arch := s.profile.gpus[i].model.arch
	d.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		switch {
		case g != nil && g.fabric != nil:
			f := g.fabric
			return nvml.GpuFabricInfo{ClusterUuid: f.clusterUUID, CliqueId: f.cliqueID, State: f.state, Status: uint32(f.status)}, nvml.SUCCESS
		case arch >= nvml.DEVICE_ARCH_HOPPER:
			return nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_NOT_SUPPORTED}, nvml.SUCCESS
		}
		return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetGpuFabricInfoVFunc = func() nvml.GpuFabricInfoHandler {
		// A handler can only be bound to a real library device (see above); nothing here
		// may call it.
		panic("nvmlmock: GetGpuFabricInfoV cannot be mocked (go-nvml's handler needs a real device); use GetGpuFabricInfo")
	}
}

// NVLinkPeers returns the machine's pairs of NVLink peers by device name (gpu-<minor>), both
// orders, as its P2P status over NVLink says: the truth that tests check the published
// topology against.
func (s *Server) NVLinkPeers() map[[2]string]bool {
	out := map[[2]string]bool{}
	for i := range s.Devices {
		for j := range s.Devices {
			if s.profile.nvlink.nvlinkPeers(i, j) {
				out[[2]string{fmt.Sprintf("gpu-%d", s.profile.minor(i)), fmt.Sprintf("gpu-%d", s.profile.minor(j))}] = true
			}
		}
	}
	return out
}

// FabricInfoV3 is nvmlDeviceGetGpuFabricInfoV with nvmlGpuFabricInfo_v3_t for one of the
// machine's GPUs. A GPU with a fabric registration reports each field of the health mask
// (NVML_GPU_FABRIC_HEALTH_MASK_*, docs.nvidia.com/deploy/nvml-api "Fabric definitions") as not
// degraded, no recovery in progress, route healthy, configuration correct, unless an injected
// "fabric <condition>" line says otherwise; its summary is HEALTHY, or UNHEALTHY with any
// condition (the plugin reads the mask, not the summary). A Hopper HGX answers state and mask
// NOT_SUPPORTED (every field 0), whatever is injected, as it has no fabric to report on; GPUs
// before Hopper answer NVML_ERROR_NOT_SUPPORTED; a lost GPU answers GPU_IS_LOST.
func (s *Server) FabricInfoV3(d nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return) {
	i := s.indexOf(d)
	if i < 0 {
		return nvml.GpuFabricInfo_v3{}, nvml.ERROR_INVALID_ARGUMENT
	}
	name := device.NameFor(device.KindGPU, s.profile.minor(i))
	if s.faults != nil && s.faults.has(name, health.FaultLost) {
		return nvml.GpuFabricInfo_v3{}, nvml.ERROR_GPU_IS_LOST
	}
	g := s.profile.nvlink
	switch {
	case g != nil && g.fabric != nil:
	case s.profile.gpus[i].model.arch >= nvml.DEVICE_ARCH_HOPPER:
		return nvml.GpuFabricInfo_v3{Version: fabricInfoV3Version, State: nvml.GPU_FABRIC_STATE_NOT_SUPPORTED}, nvml.SUCCESS
	default:
		return nvml.GpuFabricInfo_v3{}, nvml.ERROR_NOT_SUPPORTED
	}
	var injected []string
	if s.faults != nil {
		injected = s.faults.fabricConditions(name)
	}
	field := func(shift, width, trueValue, falseValue uint32, cond string) uint32 {
		v := falseValue
		if slices.Contains(injected, cond) {
			v = trueValue
		}
		return (v & width) << shift
	}
	mask := field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW,
		nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE, nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE, health.FabricDegradedBW) |
		field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_RECOVERY,
			nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE, nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE, health.FabricRouteRecovery) |
		field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY,
			nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE, nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE, health.FabricRouteUnhealthy) |
		field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ACCESS_TIMEOUT_RECOVERY,
			nvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE, nvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE, health.FabricAccessTimeoutRecovery) |
		field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION,
			nvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS, nvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE, health.FabricIncorrectConfig)
	summary := uint8(nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY)
	if len(injected) > 0 {
		summary = nvml.GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
	}
	f := g.fabric
	return nvml.GpuFabricInfo_v3{Version: fabricInfoV3Version, ClusterUuid: f.clusterUUID, Status: uint32(f.status), CliqueId: f.cliqueID,
		State: f.state, HealthMask: mask, HealthSummary: summary}, nvml.SUCCESS
}

// fabricInfoV3Version is what the library's caller sets, NVML_STRUCT_VERSION(GpuFabricInfo, 3).
var fabricInfoV3Version = nvml.STRUCT_VERSION(nvml.GpuFabricInfo_v3{}, 3)
