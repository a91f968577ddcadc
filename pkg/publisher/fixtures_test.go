package publisher

import (
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	ns        = "clusters"
	gpuDriver = "gpu.accel-dra.io"
	npuDriver = "npu.accel-dra.io"
)

// shape is what a node of a group looks like; nodes of one shape differ only in identity.
type shape struct {
	product string
	gpus    int
	memory  string
	// generation and sliceCount let a test publish an incomplete pool.
	generation, sliceCount int64
}

var (
	h100 = shape{product: "NVIDIA H100 80GB HBM3", gpus: 8, memory: "80Gi"}
	a100 = shape{product: "NVIDIA A100-SXM4-40GB", gpus: 8, memory: "40Gi"}
)

// gpuSlices returns the ResourceSlice a node of the shape publishes, with UUIDs and PCI
// addresses derived from the node name (so two nodes differ in them).
func gpuSlices(nodeName string, s shape) []resourceapi.ResourceSlice {
	r := rand.New(rand.NewPCG(uint64(len(nodeName)), uint64(nodeName[len(nodeName)-1])))
	// GPUs 2k and 2k+1 share a PCIe root on every node; the root's name differs per node.
	roots := make([]string, (s.gpus+1)/2)
	for i := range roots {
		roots[i] = fmt.Sprintf("pci%04x:%02x", r.IntN(1<<16), 16*i)
	}
	var devices []resourceapi.Device
	for i := range s.gpus {
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":                            {StringValue: new("gpu")},
				"uuid":                            {StringValue: new(fmt.Sprintf("GPU-%s-%d-%08x", nodeName, i, r.Uint32()))},
				"productName":                     {StringValue: new(s.product)},
				"index":                           {IntValue: new(int64(i))},
				"resource.kubernetes.io/pciBusID": {StringValue: new(fmt.Sprintf("0000:%02x:00.0", r.IntN(256)))},
				"resource.kubernetes.io/numaNode": {IntValue: new(int64(i * 2 / max(s.gpus, 1)))},
				"resource.kubernetes.io/pcieRoot": {StringValue: new(roots[i/2])},
				"driverVersion":                   {VersionValue: new("570.124.6")},
				"cudaComputeCapability":           {VersionValue: new("9.0.0")},
				"architecture":                    {StringValue: new("Hopper")},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(s.memory)}},
		})
	}
	gen, count := max(s.generation, 1), max(s.sliceCount, 1)
	return []resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-gpu", UID: types.UID("uid-" + nodeName + "-gpu"), ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   gpuDriver,
			NodeName: new(nodeName),
			Pool:     resourceapi.ResourcePool{Name: nodeName, Generation: gen, ResourceSliceCount: count},
			Devices:  devices,
		},
	}}
}

func gpuNode(name string) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("96"),
		corev1.ResourceMemory:           resource.MustParse("1000Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{
			"kubernetes.io/hostname":           name,
			"kubernetes.io/arch":               "amd64",
			"node.kubernetes.io/instance-type": "gpu-8x",
		}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy()},
	}
}

func machineDeployment(name string, annotations map[string]string) *clusterv1.MachineDeployment {
	return &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-md-" + name), Annotations: annotations},
		Spec:       clusterv1.MachineDeploymentSpec{ClusterName: "c1"},
	}
}

func machineSet(name, md string, revision int, age time.Duration) *clusterv1.MachineSet {
	ms := &clusterv1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-ms-" + name),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-age)),
			Annotations:       map[string]string{},
			Labels:            map[string]string{clusterv1.ClusterNameLabel: "c1"},
		},
		Spec: clusterv1.MachineSetSpec{ClusterName: "c1"},
	}
	if revision > 0 {
		ms.Annotations[clusterv1.RevisionAnnotation] = fmt.Sprint(revision)
	}
	if md != "" {
		ms.Labels[clusterv1.MachineDeploymentNameLabel] = md
		ms.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: clusterv1.GroupVersion.String(), Kind: KindMachineDeployment, Name: md,
			UID: types.UID("uid-md-" + md), Controller: new(true),
		}}
	}
	return ms
}

func machine(name string, ms *clusterv1.MachineSet, node string) *clusterv1.Machine {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-m-" + name),
			Labels: map[string]string{clusterv1.ClusterNameLabel: "c1", clusterv1.MachineSetNameLabel: ms.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: KindMachineSet, Name: ms.Name, UID: ms.UID, Controller: new(true),
			}},
		},
		Spec: clusterv1.MachineSpec{ClusterName: "c1"},
	}
	if md := ms.Labels[clusterv1.MachineDeploymentNameLabel]; md != "" {
		m.Labels[clusterv1.MachineDeploymentNameLabel] = md
	}
	m.Status.NodeRef.Name = node
	return m
}
