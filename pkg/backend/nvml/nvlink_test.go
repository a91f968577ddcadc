package nvml_test

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// TestNVLinkFailures injects NVML failures into the NVLink queries: enumeration never fails
// for them, the GPU whose own queries fail is published without topology, and an edge needs
// both the links and P2P status.
func TestNVLinkFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile string
		breakIt func(s *nvmlmock.Server)
		// islands are the island sizes by device name; 0 is no island.
		islands map[string]int
		noTopo  []string
	}{
		{name: "healthy", profile: "h100-nvl-4x", islands: map[string]int{"gpu-0": 2, "gpu-1": 2, "gpu-2": 2, "gpu-3": 2}},
		{name: "link state unknown error", profile: "h100-nvl-4x", breakIt: func(s *nvmlmock.Server) {
			s.Devices[1].GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, islands: map[string]int{"gpu-0": 0, "gpu-1": 0, "gpu-2": 2, "gpu-3": 2}, noTopo: []string{"gpu-1"}},
		{name: "remote type fails", profile: "h100-8x-nvswitch", breakIt: func(s *nvmlmock.Server) {
			s.Devices[7].GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
		}, islands: map[string]int{"gpu-0": 7, "gpu-6": 7, "gpu-7": 0}, noTopo: []string{"gpu-7"}},
		// P2P says no where the links say yes (a dishonest answer of either): no edge.
		{name: "P2P disagrees", profile: "h100-nvl-4x", breakIt: func(s *nvmlmock.Server) {
			s.Devices[2].GetP2PStatusFunc = func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
				return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
			}
		}, islands: map[string]int{"gpu-0": 2, "gpu-1": 2, "gpu-2": 0, "gpu-3": 0}},
		{name: "P2P query fails", profile: "h100-nvl-4x", breakIt: func(s *nvmlmock.Server) {
			s.Devices[0].GetP2PStatusFunc = func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
				return 0, nvml.ERROR_UNKNOWN
			}
		}, islands: map[string]int{"gpu-0": 0, "gpu-1": 0, "gpu-2": 2, "gpu-3": 2}},
		{name: "fabric info fails", profile: "gb200-4x", breakIt: func(s *nvmlmock.Server) {
			s.Devices[0].GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) { return nvml.GpuFabricInfo{}, nvml.ERROR_UNKNOWN }
		}, islands: map[string]int{"gpu-0": 4, "gpu-3": 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := server(t, tc.profile)
			if tc.breakIt != nil {
				tc.breakIt(s)
			}
			inv, err := s.Backend().Enumerate(context.Background())
			if err != nil {
				t.Fatalf("enumeration failed for an NVLink query: %v", err)
			}
			if len(inv.Failed) != 0 {
				t.Errorf("devices failed for an NVLink query: %v", inv.Failed)
			}
			size := map[string]int{}
			for _, d := range inv.Devices {
				if d.Topology != nil && d.Topology.Island != "" {
					size[d.Topology.Island]++
				}
			}
			for _, d := range inv.Devices {
				got := 0
				if d.Topology != nil && d.Topology.Island != "" {
					got = size[d.Topology.Island]
				}
				if want, ok := tc.islands[d.Name]; ok && got != want {
					t.Errorf("%s: island of %d, want %d", d.Name, got, want)
				}
				for _, n := range tc.noTopo {
					if d.Name == n && d.Topology != nil {
						t.Errorf("%s: topology %+v, want none", n, d.Topology)
					}
				}
				if tc.name == "fabric info fails" {
					if got := d.Topology.FabricClique; (d.Name == "gpu-0") != (got == "") {
						t.Errorf("%s: fabric clique %q", d.Name, got)
					}
				}
			}
		})
	}
}
