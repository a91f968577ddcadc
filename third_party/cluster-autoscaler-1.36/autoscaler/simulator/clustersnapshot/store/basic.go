/*
Copyright 2024 The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package store

import (
	"fmt"

	apiv1 "k8s.io/api/core/v1"
	"k8s.io/autoscaler/cluster-autoscaler/simulator/clustersnapshot"
	"k8s.io/autoscaler/cluster-autoscaler/simulator/framework"
	"k8s.io/klog/v2"
	schedulerinterface "k8s.io/kube-scheduler/framework"
	schedulerimpl "k8s.io/kubernetes/pkg/scheduler/framework"
)

// BasicSnapshotStore is simple, reference implementation of ClusterSnapshotStore.
// It is inefficient. But hopefully bug-free and good for initial testing.
type BasicSnapshotStore struct {
	data []*internalBasicSnapshotData
}

type internalBasicSnapshotData struct {
	nodeInfoMap        map[string]schedulerinterface.NodeInfo
	pvcNamespacePodMap map[string]map[string]bool
}

func (data *internalBasicSnapshotData) listNodeInfos() []schedulerinterface.NodeInfo {
	nodeInfoList := make([]schedulerinterface.NodeInfo, 0, len(data.nodeInfoMap))
	for _, v := range data.nodeInfoMap {
		nodeInfoList = append(nodeInfoList, v)
	}
	return nodeInfoList
}

func (data *internalBasicSnapshotData) listNodeInfosThatHavePodsWithAffinityList() ([]schedulerinterface.NodeInfo, error) {
	havePodsWithAffinityList := make([]schedulerinterface.NodeInfo, 0, len(data.nodeInfoMap))
	for _, v := range data.nodeInfoMap {
		if len(v.GetPodsWithAffinity()) > 0 {
			havePodsWithAffinityList = append(havePodsWithAffinityList, v)
		}
	}

	return havePodsWithAffinityList, nil
}

func (data *internalBasicSnapshotData) listNodeInfosThatHavePodsWithRequiredAntiAffinityList() ([]schedulerinterface.NodeInfo, error) {
	havePodsWithRequiredAntiAffinityList := make([]schedulerinterface.NodeInfo, 0, len(data.nodeInfoMap))
	for _, v := range data.nodeInfoMap {
		if len(v.GetPodsWithRequiredAntiAffinity()) > 0 {
			havePodsWithRequiredAntiAffinityList = append(havePodsWithRequiredAntiAffinityList, v)
		}
	}

	return havePodsWithRequiredAntiAffinityList, nil
}

func (data *internalBasicSnapshotData) getNodeInfo(nodeName string) (schedulerinterface.NodeInfo, error) {
	if v, ok := data.nodeInfoMap[nodeName]; ok {
		return v, nil
	}
	return nil, clustersnapshot.ErrNodeNotFound
}

func (data *internalBasicSnapshotData) isPVCUsedByPods(key string) bool {
	if v, found := data.pvcNamespacePodMap[key]; found && v != nil && len(v) > 0 {
		return true
	}
	return false
}

func (data *internalBasicSnapshotData) addPvcUsedByPod(pod *apiv1.Pod) {
	if pod == nil {
		return
	}
	nameSpace := pod.GetNamespace()
	for _, volume := range pod.Spec.Volumes {
		if volume.PersistentVolumeClaim == nil {
			continue
		}
		k := schedulerimpl.GetNamespacedName(nameSpace, volume.PersistentVolumeClaim.ClaimName)
		_, found := data.pvcNamespacePodMap[k]
		if !found {
			data.pvcNamespacePodMap[k] = make(map[string]bool)
		}
		data.pvcNamespacePodMap[k][pod.GetName()] = true
	}
}

func (data *internalBasicSnapshotData) removePvcUsedByPod(pod *apiv1.Pod) {
	if pod == nil {
		return
	}

	nameSpace := pod.GetNamespace()
	for _, volume := range pod.Spec.Volumes {
		if volume.PersistentVolumeClaim == nil {
			continue
		}
		k := schedulerimpl.GetNamespacedName(nameSpace, volume.PersistentVolumeClaim.ClaimName)
		if _, found := data.pvcNamespacePodMap[k]; found {
			delete(data.pvcNamespacePodMap[k], pod.GetName())
			if len(data.pvcNamespacePodMap[k]) == 0 {
				delete(data.pvcNamespacePodMap, k)
			}
		}
	}
}

func newInternalBasicSnapshotData() *internalBasicSnapshotData {
	return &internalBasicSnapshotData{
		nodeInfoMap:        make(map[string]schedulerinterface.NodeInfo),
		pvcNamespacePodMap: make(map[string]map[string]bool),
	}
}

func (data *internalBasicSnapshotData) clone() *internalBasicSnapshotData {
	clonedNodeInfoMap := make(map[string]schedulerinterface.NodeInfo)
	for k, v := range data.nodeInfoMap {
		clonedNodeInfoMap[k] = v.Snapshot()
	}
	clonedPvcNamespaceNodeMap := make(map[string]map[string]bool)
	for k, v := range data.pvcNamespacePodMap {
		clonedPvcNamespaceNodeMap[k] = make(map[string]bool)
		for k1, v1 := range v {
			clonedPvcNamespaceNodeMap[k][k1] = v1
		}
	}
	return &internalBasicSnapshotData{
		nodeInfoMap:        clonedNodeInfoMap,
		pvcNamespacePodMap: clonedPvcNamespaceNodeMap,
	}
}

func (data *internalBasicSnapshotData) addNodeInfo(nodeInfo schedulerinterface.NodeInfo) error {
	name := nodeInfo.Node().Name
	if _, found := data.nodeInfoMap[name]; found {
		return fmt.Errorf("node %s already in snapshot", name)
	}
	data.nodeInfoMap[name] = nodeInfo
	for _, podInfo := range nodeInfo.GetPods() {
		data.addPvcUsedByPod(podInfo.GetPod())
	}
	return nil
}

func (data *internalBasicSnapshotData) removeNodeInfo(nodeName string) error {
	if _, found := data.nodeInfoMap[nodeName]; !found {
		return clustersnapshot.ErrNodeNotFound
	}
	for _, pod := range data.nodeInfoMap[nodeName].GetPods() {
		data.removePvcUsedByPod(pod.GetPod())
	}
	delete(data.nodeInfoMap, nodeName)
	return nil
}

func (data *internalBasicSnapshotData) addPodInfo(podInfo schedulerinterface.PodInfo, nodeName string) error {
	if _, found := data.nodeInfoMap[nodeName]; !found {
		return clustersnapshot.ErrNodeNotFound
	}
	data.nodeInfoMap[nodeName].AddPodInfo(podInfo)
	data.addPvcUsedByPod(podInfo.GetPod())
	return nil
}

func (data *internalBasicSnapshotData) removePod(namespace, podName, nodeName string) error {
	nodeInfo, found := data.nodeInfoMap[nodeName]
	if !found {
		return clustersnapshot.ErrNodeNotFound
	}
	logger := klog.Background()
	for _, podInfo := range nodeInfo.GetPods() {
		if podInfo.GetPod().Namespace == namespace && podInfo.GetPod().Name == podName {
			data.removePvcUsedByPod(podInfo.GetPod())
			err := nodeInfo.RemovePod(logger, podInfo.GetPod())
			if err != nil {
				data.addPvcUsedByPod(podInfo.GetPod())
				return fmt.Errorf("cannot remove pod; %v", err)
			}
			return nil
		}
	}
	return fmt.Errorf("pod %s/%s not in snapshot", namespace, podName)
}

// NewBasicSnapshotStore creates instances of BasicSnapshotStore.
func NewBasicSnapshotStore() *BasicSnapshotStore {
	snapshot := &BasicSnapshotStore{}
	snapshot.Clear()
	return snapshot
}

func (snapshot *BasicSnapshotStore) getInternalData() *internalBasicSnapshotData {
	return snapshot.data[len(snapshot.data)-1]
}

// RemoveNodeInfo removes nodes (and pods scheduled to it) from the snapshot.
func (snapshot *BasicSnapshotStore) RemoveNodeInfo(nodeName string) error {
	return snapshot.getInternalData().removeNodeInfo(nodeName)
}

// StoreNodeInfo adds the given *framework.NodeInfo to the snapshot without checking scheduler predicates.
func (snapshot *BasicSnapshotStore) StoreNodeInfo(nodeInfo *framework.NodeInfo) error {
	return snapshot.getInternalData().addNodeInfo(nodeInfo)
}

// StorePodInfo adds pod to the snapshot and schedules it to given node.
func (snapshot *BasicSnapshotStore) StorePodInfo(podInfo *framework.PodInfo, nodeName string) error {
	return snapshot.getInternalData().addPodInfo(podInfo, nodeName)
}

// RemovePodInfo removes pod from the snapshot.
func (snapshot *BasicSnapshotStore) RemovePodInfo(namespace, podName, nodeName string) error {
	return snapshot.getInternalData().removePod(namespace, podName, nodeName)
}

// IsPVCUsedByPods returns if the pvc is used by any pod
func (snapshot *BasicSnapshotStore) IsPVCUsedByPods(key string) bool {
	return snapshot.getInternalData().isPVCUsedByPods(key)
}

// Fork creates a fork of snapshot state. All modifications can later be reverted to moment of forking via Revert()
func (snapshot *BasicSnapshotStore) Fork() {
	forkData := snapshot.getInternalData().clone()
	snapshot.data = append(snapshot.data, forkData)
}

// Revert reverts snapshot state to moment of forking.
func (snapshot *BasicSnapshotStore) Revert() {
	if len(snapshot.data) == 1 {
		return
	}
	snapshot.data = snapshot.data[:len(snapshot.data)-1]
}

// Commit commits changes done after forking.
func (snapshot *BasicSnapshotStore) Commit() error {
	if len(snapshot.data) <= 1 {
		// do nothing
		return nil
	}
	snapshot.data = append(snapshot.data[:len(snapshot.data)-2], snapshot.data[len(snapshot.data)-1])
	return nil
}

// Clear reset cluster snapshot to empty, unforked state
func (snapshot *BasicSnapshotStore) Clear() {
	baseData := newInternalBasicSnapshotData()
	snapshot.data = []*internalBasicSnapshotData{baseData}
}

// implementation of SharedLister interface

type basicSnapshotStoreNodeLister BasicSnapshotStore
type basicSnapshotStoreStorageLister BasicSnapshotStore
type basicSnapshotStorePodGroupStateLister BasicSnapshotStore

// NodeInfos exposes snapshot as NodeInfoLister.
func (snapshot *BasicSnapshotStore) NodeInfos() schedulerinterface.NodeInfoLister {
	return (*basicSnapshotStoreNodeLister)(snapshot)
}

// StorageInfos exposes snapshot as StorageInfoLister.
func (snapshot *BasicSnapshotStore) StorageInfos() schedulerinterface.StorageInfoLister {
	return (*basicSnapshotStoreStorageLister)(snapshot)
}

// PodGroupStates exposes snapshot as PodGroupStateLister.
func (snapshot *BasicSnapshotStore) PodGroupStates() schedulerinterface.PodGroupStateLister {
	return (*basicSnapshotStorePodGroupStateLister)(snapshot)
}

// List returns the list of nodes in the snapshot.
func (snapshot *basicSnapshotStoreNodeLister) List() ([]schedulerinterface.NodeInfo, error) {
	return (*BasicSnapshotStore)(snapshot).getInternalData().listNodeInfos(), nil
}

// HavePodsWithAffinityList returns the list of nodes with at least one pods with inter-pod affinity
func (snapshot *basicSnapshotStoreNodeLister) HavePodsWithAffinityList() ([]schedulerinterface.NodeInfo, error) {
	return (*BasicSnapshotStore)(snapshot).getInternalData().listNodeInfosThatHavePodsWithAffinityList()
}

// HavePodsWithRequiredAntiAffinityList returns the list of NodeInfos of nodes with pods with required anti-affinity terms.
func (snapshot *basicSnapshotStoreNodeLister) HavePodsWithRequiredAntiAffinityList() ([]schedulerinterface.NodeInfo, error) {
	return (*BasicSnapshotStore)(snapshot).getInternalData().listNodeInfosThatHavePodsWithRequiredAntiAffinityList()
}

// Returns the NodeInfo of the given node name.
func (snapshot *basicSnapshotStoreNodeLister) Get(nodeName string) (schedulerinterface.NodeInfo, error) {
	return (*BasicSnapshotStore)(snapshot).getInternalData().getNodeInfo(nodeName)
}

// Returns the IsPVCUsedByPods in a given key.
func (snapshot *basicSnapshotStoreStorageLister) IsPVCUsedByPods(key string) bool {
	return (*BasicSnapshotStore)(snapshot).getInternalData().isPVCUsedByPods(key)
}

// Get returns pod group state by namespace and pod group name.
//
// This method is never supposed to be called in the cluster autoscaler simulations
// as pod group states are not integrated with cluster autoscaler.
func (snapshot *basicSnapshotStorePodGroupStateLister) Get(namespace string, podGroupName string) (schedulerinterface.PodGroupState, error) {
	return nil, errorGettingPodGroupState
}
