package npu

import (
	"strconv"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// hccsTopology is an NPU's HCCS group (device.Topology.HCCS), from its chip's udevid, the ID
// the driver gives the chip (the minor of its /dev/davinci node, which Huawei's tools call its
// physical ID), and nothing else: sysfs exposes no HCCS links, and npu-smi's topology needs
// Huawei's closed DCMI library, which this backend deliberately does not load.
//
//   - Ascend 910 (Atlas 800 training server, model 9000/9010): the eight NPUs form two HCCS
//     rings of four, physical IDs 0-3 and 4-7, and a job of up to four NPUs must keep to one
//     ring. Huawei's MindCluster scheduling guide, "Affinity Scheduling Description" and
//     "Resource Allocation Constraints of Atlas Training Products"
//     (hiascend.com/document/detail/en/mindcluster/730/clustersched/schedulingug/
//     dl_affinity_0002.html and dl_affinity_0013.html): "Four Ascend AI processors are
//     interconnected through HCCS, and Ascend AI processors in HCCS rings are interconnected
//     through PCIe"; "If the number of Ascend AI Processors allocated to a training job is less
//     than or equal to 4, the required Ascend AI Processors need to be scheduled to the same
//     HCCS". Which four: physical IDs 0-3 and 4-7, as that guide's tables and Huawei Cloud
//     CCE's "Ascend HCCS-Interconnected NPU Affinity" (eight chips in two groups of four) have
//     them. Ring = physical ID / 4.
//   - Ascend 910B (Atlas 800T A2 and its 8-NPU modules): the eight NPUs of a module are one
//     HCCS full mesh. Mesh = physical ID / 8.
//
// Other chips (310, 310P inference cards; the 910C, whose HCCS reaches across a supernode) get
// none: omitted, never guessed. So does an NPU whose udevid the driver does not state.
func hccsTopology(p Product, udevid int) *device.Topology {
	if udevid < 0 {
		return nil
	}
	switch p.Architecture {
	case "Ascend910":
		return &device.Topology{HCCS: "ring-" + strconv.Itoa(udevid/4)}
	case "Ascend910B":
		return &device.Topology{HCCS: "mesh-" + strconv.Itoa(udevid/8)}
	}
	return nil
}
