package nvml

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/topology"
)

// nvlinkVersions are NVML's nvmlNvlinkVersion_t values, which nvmlDeviceGetNvLinkVersion
// answers (NVML API reference; cuda.bindings.nvml.NvlinkVersion), as published.
var nvlinkVersions = map[nvml.NvlinkVersion]string{
	nvml.NVLINK_VERSION_1_0: "1.0", nvml.NVLINK_VERSION_2_0: "2.0", nvml.NVLINK_VERSION_2_2: "2.2",
	nvml.NVLINK_VERSION_3_0: "3.0", nvml.NVLINK_VERSION_3_1: "3.1", nvml.NVLINK_VERSION_4_0: "4.0",
	nvml.NVLINK_VERSION_5_0: "5.0",
}

// nvlinkGPU is what the NVLink queries of one GPU said.
type nvlinkGPU struct {
	handle nvml.Device
	gpu    topology.GPU
	// peers are the bus IDs of GPUs at the other end of an active direct link.
	peers map[string]bool
	// switches are the bus IDs of NVSwitches at the other end of an active link; switched is
	// set when any active link goes to a switch, including one whose PCI info NVML cannot give
	// (an NVL72 rack's switch trays are not on the node's PCI bus).
	switches map[string]bool
	switched bool
}

// addTopology reads the NVLink graph and fabric of the inventory's whole GPUs and sets each
// one's Topology (package topology). Nothing here fails enumeration: a GPU whose NVLink
// queries fail is published without topology attributes (omitted, never guessed), and a
// pair whose P2P status cannot be read is no edge.
func (b *Backend) addTopology(ctx context.Context, inv *device.Inventory) {
	logger := klog.FromContext(ctx)
	var gpus []*nvlinkGPU
	byBus := map[string]*device.Device{}
	for i := range inv.Devices {
		d := &inv.Devices[i]
		// MIG devices and dynamic-MIG parents: a claim for a whole GPU never gets them.
		if d.Kind != device.KindGPU || d.MIG != nil || len(d.Consumes) > 0 {
			continue
		}
		h, ret := b.lib.DeviceGetHandleByIndex(d.Index)
		if ret != nvml.SUCCESS {
			logger.Info("Cannot read NVLink, publishing no topology", "device", d.Name, "err", callError("DeviceGetHandleByIndex", d.Index, ret))
			continue
		}
		g, err := readNVLink(h, d.PCIBusID)
		if err != nil {
			logger.Info("Cannot read NVLink, publishing no topology", "device", d.Name, "err", fmt.Errorf("gpu index %d: %w", d.Index, err))
			continue
		}
		if g.gpu.Links == 0 {
			continue
		}
		gpus = append(gpus, g)
		byBus[d.PCIBusID] = d
	}
	graph := topology.Graph{}
	for _, g := range gpus {
		graph.GPUs = append(graph.GPUs, g.gpu)
	}
	for i, a := range gpus {
		for _, c := range gpus[i+1:] {
			linked := a.peers[c.gpu.BusID] || c.peers[a.gpu.BusID] || sameFabric(a, c)
			// NVML's own verdict: P2P over NVLink. The link graph and P2P must agree, or the
			// pair is no edge: a wrong edge would let a claim for "pairwise connected" GPUs
			// get two that are not.
			st, ret := a.handle.GetP2PStatus(c.handle, nvml.P2P_CAPS_INDEX_NVLINK)
			p2p := ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK
			if ret != nvml.SUCCESS || linked != p2p {
				logger.V(2).Info("NVLink links and P2P status disagree, no edge", "gpu", a.gpu.BusID, "peer", c.gpu.BusID, "linked", linked, "p2pStatus", int(st), "err", errOrNil(ret))
			}
			if linked && p2p {
				graph.Peers = append(graph.Peers, [2]string{a.gpu.BusID, c.gpu.BusID})
			}
		}
	}
	for bus, t := range topology.Compute(graph) {
		byBus[bus].Topology = t
	}
}

// sameFabric reports whether two GPUs reach each other through NVSwitches: both have links to
// switches, and where NVML names the switches of both, they share one.
func sameFabric(a, c *nvlinkGPU) bool {
	if !a.switched || !c.switched {
		return false
	}
	if len(a.switches) == 0 || len(c.switches) == 0 {
		return true
	}
	for s := range a.switches {
		if c.switches[s] {
			return true
		}
	}
	return false
}

// readNVLink reads a GPU's links and fabric registration. A GPU without NVLink answers
// NOT_SUPPORTED for link 0; a link number it does not have answers INVALID_ARGUMENT or
// NOT_SUPPORTED. Any other failure is an error: the GPU's topology is unknown.
func readNVLink(h nvml.Device, busID string) (*nvlinkGPU, error) {
	g := &nvlinkGPU{handle: h, gpu: topology.GPU{BusID: busID}, peers: map[string]bool{}, switches: map[string]bool{}}
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		state, ret := h.GetNvLinkState(l)
		switch {
		case ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT:
			continue
		case ret != nvml.SUCCESS:
			return nil, fmt.Errorf("nvml GetNvLinkState(%d): %w", l, ret)
		case state != nvml.FEATURE_ENABLED:
			continue
		}
		g.gpu.Links++
		if g.gpu.Version == "" {
			if v, ret := h.GetNvLinkVersion(l); ret == nvml.SUCCESS {
				g.gpu.Version = nvlinkVersions[nvml.NvlinkVersion(v)]
			}
		}
		typ, ret := h.GetNvLinkRemoteDeviceType(l)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml GetNvLinkRemoteDeviceType(%d): %w", l, ret)
		}
		pci, pciRet := h.GetNvLinkRemotePciInfo(l)
		remote := ""
		if pciRet == nvml.SUCCESS {
			remote, _ = NormalizePCIBusID(cString(pci.BusId[:]))
		}
		switch typ {
		case nvml.NVLINK_DEVICE_TYPE_GPU:
			if remote == "" {
				return nil, fmt.Errorf("nvml GetNvLinkRemotePciInfo(%d) of a GPU link: %w", l, errOrNil(pciRet))
			}
			g.peers[remote] = true
		case nvml.NVLINK_DEVICE_TYPE_SWITCH:
			g.switched = true
			if remote != "" {
				g.switches[remote] = true
			}
		}
	}
	if g.gpu.Links > 0 {
		g.gpu.FabricClique = fabricClique(h)
	}
	return g, nil
}

// fabricClique is the GPU's "<clusterUUID>.<cliqueID>", as NVIDIA's GPU feature discovery
// spells the nvidia.com/gpu.clique label, or "" unless the fabric registration completed
// successfully ("status must be checked only if state returns complete", nvmlGpuFabricInfo_t)
// with a cluster UUID.
func fabricClique(h nvml.Device) string {
	info, ret := h.GetGpuFabricInfo()
	if ret != nvml.SUCCESS || info.State != nvml.GPU_FABRIC_STATE_COMPLETED || nvml.Return(info.Status) != nvml.SUCCESS || info.ClusterUuid == [16]uint8{} {
		return ""
	}
	u := info.ClusterUuid
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]) + "." + strconv.FormatUint(uint64(info.CliqueId), 10)
}

func errOrNil(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return errors.New(ret.Error())
}
