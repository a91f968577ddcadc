//go:build e2e

package autoscaler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// nvidiaGPU is the extended resource name real users have: the NVIDIA device plugin's. The
// autoscaler lists it among its GPU vendor resources (utils/gpu.GPUVendorResourceNames): a
// pending pod that requests it holds every scale-up back until the pod is 30 s old
// (unschedulablePodWithGpuTimeBuffer in core/static_autoscaler.go), and a template node with it
// in capacity is a GPU node (gpu.NodeHasGpu).
const nvidiaGPU corev1.ResourceName = "nvidia.com/gpu"

// nvidiaCases: one GPU as the GPU class's extended resource nvidia.com/gpu, on a group with the
// publisher's annotations, and on a group that also has the clusterapi provider's gpu-type key
// naming it (the publisher does not write gpu-type; the row shows what it would do). The
// provider puts gpu-count of gpu-type into the template node's capacity, so the simulated
// scheduler finds nvidia.com/gpu in the node's allocatable and fits the pod as it would with a
// device plugin, without DRA; the real node has no such allocatable and gets the GPU through
// the class, as any node does.
var nvidiaCases = []claimCase{
	{name: "nvidia-gpu", extendedResource: nvidiaGPU, count: 1, scales: map[string]string{"slicefix": "h100", "accel-dra": "h100"}},
	{name: "nvidia-gpu-type", extendedResource: nvidiaGPU, count: 1, annotations: map[string]string{nodegroup.CapacityPrefix + "gpu-type": string(nvidiaGPU)},
		scales: map[string]string{"released": "h100", "pinned": "h100", "slicefix": "h100", "accel-dra": "h100"}},
}

// TestAutoscalerNvidiaGPU: pods that ask for nvidia.com/gpu (the GPU class's extendedResourceName)
// and no claim, on MachineDeployments at zero; where a build scales one up, a real node joins,
// the pod runs on it and the template mismatch count is judged as for example.com/gpu.
func TestAutoscalerNvidiaGPU(t *testing.T) {
	runScaleUps(t, machineDeployment, nvidiaCases)
}
