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

package utils

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/autoscaler/cluster-autoscaler/simulator/framework"
	"k8s.io/utils/ptr"
)

// CalculateDynamicResourceUtilization calculates a map of ResourceSlice pool utilization grouped by the driver and pool. Returns
// an error if the NodeInfo doesn't have all ResourceSlices from a pool.
func CalculateDynamicResourceUtilization(nodeInfo *framework.NodeInfo) (map[string]map[string]float64, error) {
	result := map[string]map[string]float64{}
	claims := nodeInfo.ResourceClaims()
	allocatedDevices, err := groupAllocatedReservedDevices(claims)
	if err != nil {
		return nil, err
	}
	for driverName, slicesByPool := range groupSlices(nodeInfo.LocalResourceSlices) {
		result[driverName] = map[string]float64{}
		for poolName, poolSlices := range slicesByPool {
			currentSlices, err := allCurrentGenSlices(poolSlices)
			if err != nil {
				return nil, fmt.Errorf("pool %q error: %v", poolName, err)
			}
			poolDevices := getAllDevices(currentSlices)
			allocatedDeviceNames := allocatedDevices[driverName][poolName]
			unallocated, allocated := splitDevicesByAllocation(poolDevices, allocatedDeviceNames)
			result[driverName][poolName] = calculatePoolUtil(unallocated, allocated, currentSlices)
		}
	}
	return result, nil
}

// HighestDynamicResourceUtilization returns the ResourceSlice driver and pool with the highest utilization.
func HighestDynamicResourceUtilization(nodeInfo *framework.NodeInfo) (v1.ResourceName, float64, error) {
	utils, err := CalculateDynamicResourceUtilization(nodeInfo)
	if err != nil {
		return "", 0, err
	}

	highestUtil := 0.0
	var highestResourceName v1.ResourceName
	for driverName, utilsByPool := range utils {
		for poolName, util := range utilsByPool {
			if util >= highestUtil {
				highestUtil = util
				highestResourceName = v1.ResourceName(driverName + "/" + poolName)
			}
		}
	}
	return highestResourceName, highestUtil, nil
}

// calculatePoolUtil assumes that nodes pools are either partitionable (shared) or atomic (non-partitionable):
//
//  1. Partitionable (Shared) Utilization:
//     Identifies the single highest utilization ratio across all counters in a counterSet, the utilization of each counterSet is then averaged across all partitionable devices in the resourceSlice.
//     For example, if a GPU pool has shared counter with counters for memory and compute cycles, and the memory's counter is at 80% utilization, and the compute cycles' counter is at 50%,
//     the partitionable utilization for the pool would be 80% for that device. If there is another shared counter at 60%, the total partitionable utilization would be 70%.
//
//  2. Atomic (Non-partitionable) Utilization:
//     Calculated as the simple ratio of allocated devices to total devices for all devices
//     that do not support shared counters.
func calculatePoolUtil(unallocated, allocated []resourceapi.Device, resourceSlices []*resourceapi.ResourceSlice) float64 {

	isPartitionablePool := slices.ContainsFunc(resourceSlices, isPartitionable)

	if !isPartitionablePool {
		return calculateAtomicDevicesPoolUtilization(allocated, append(unallocated, allocated...))
	}

	sharedCounters := []resourceapi.CounterSet{}
	for _, slice := range resourceSlices {
		sharedCounters = append(sharedCounters, slice.Spec.SharedCounters...)
	}
	return calculatePartitionableDevicesPoolUtilization(allocated, append(unallocated, allocated...), sharedCounters)
}

// isPartitionable checks if a resource slice is partitionable by checking if it has shared counters defined.
func isPartitionable(slice *resourceapi.ResourceSlice) bool {
	return len(slice.Spec.SharedCounters) != 0
}

// calculateAtomicDevicesPoolUtilization calculates the utilization of atomic (non-partitionable) devices in a pool. the input devices must be atomic devices only.
// the calculation is based on the ratio of allocated devices to total devices.
func calculateAtomicDevicesPoolUtilization(allocated, total []resourceapi.Device) float64 {
	if len(total) == 0 {
		return 0
	}

	return float64(len(allocated)) / float64(len(total))
}

// calculatePartitionableDevicesPoolUtilization calculates the utilization of partitionable devices in a pool. the input devices must be partitionable devices only.
// the calculation is based on shared counters defined in the resource slices, it is assumed that each shared counter represents a partitionable device,
// for each shared counter, we find the highest utilized counter and use that as the utilization for that partitionable device.
// the final utilization is the average of all partitionable devices' utilizations.
func calculatePartitionableDevicesPoolUtilization(allocated, total []resourceapi.Device, sharedCounters []resourceapi.CounterSet) float64 {

	uniquePartitionableDevicesCount := getUniquePartitionableDevicesCount(total)
	if uniquePartitionableDevicesCount == 0 {
		return 0
	}

	var partitionableUtilization float64 = 0
	allocatedConsumedCounters := calculateConsumedCounters(allocated)

	for _, counterSet := range sharedCounters {
		// for each counter set, find the highest utilization counter
		highestCounterUtilization := 0.0
		for counterName, counter := range counterSet.Counters {
			if counter.Value.IsZero() {
				continue
			}
			if allocatedValue, exists := allocatedConsumedCounters[counterSet.Name][counterName]; exists {
				utilization := allocatedValue.AsApproximateFloat64() / counter.Value.AsApproximateFloat64()
				if utilization > highestCounterUtilization {
					highestCounterUtilization = utilization
				}
			}
		}
		// We assume that each counter set represents a unique partitionable device.
		partitionableUtilization += highestCounterUtilization / float64(uniquePartitionableDevicesCount)
	}

	return partitionableUtilization
}

// calculateConsumedCounters calculates the total counters consumed by a list of devices
func calculateConsumedCounters(devices []resourceapi.Device) map[string]map[string]resource.Quantity {
	countersConsumed := map[string]map[string]resource.Quantity{}
	for _, device := range devices {
		if device.ConsumesCounters == nil {
			continue
		}
		for _, consumedCounter := range device.ConsumesCounters {
			countersConsumed = addCounterSetToMapping(consumedCounter.CounterSet, consumedCounter.Counters, countersConsumed)
		}
	}
	return countersConsumed
}

// addCounterSetToMapping updates existingMapping with the provided counters under the specified counterSetName.
func addCounterSetToMapping(counterSetName string, counters map[string]resourceapi.Counter, existingMapping map[string]map[string]resource.Quantity) map[string]map[string]resource.Quantity {
	for counterName, counter := range counters {
		if _, ok := existingMapping[counterSetName]; !ok {
			existingMapping[counterSetName] = map[string]resource.Quantity{}
		}
		if _, ok := existingMapping[counterSetName][counterName]; !ok {
			existingMapping[counterSetName][counterName] = resource.Quantity{}
		}
		v := existingMapping[counterSetName][counterName]
		v.Add(counter.Value)
		existingMapping[counterSetName][counterName] = v
	}
	return existingMapping
}

// getUniquePartitionableDevicesCount returns the count of unique partitionable devices in the provided list.
// a partitionable device can be represented by multiple devices with different names and properties, and for utilization purposes we'd like to count the hardware and not the software.
func getUniquePartitionableDevicesCount(devices []resourceapi.Device) int {
	consumedCounters := map[string]bool{}
	for _, device := range devices {
		// the assumption here is that a partitionable device will consume the actual resources from the hardware, which will be represented by consumedCounters.
		// if a device consumes multiple counters of the same device, we count them both at the same time in order to not "overcount" devices with multiple counters, the assumption here is that a device will always consume some of every resource in a device. (f.e. a GPU DRA request cannot use VRAM without using GPU cycles and vice versa)
		if device.ConsumesCounters != nil {
			for _, consumedCounter := range device.ConsumesCounters {
				if _, exists := consumedCounters[consumedCounter.CounterSet]; !exists {
					consumedCounters[consumedCounter.CounterSet] = true
				}
			}
		}
	}
	return len(consumedCounters)
}

func splitDevicesByAllocation(devices []resourceapi.Device, allocatedNames []string) (unallocated, allocated []resourceapi.Device) {
	allocatedNamesSet := map[string]bool{}
	for _, allocatedName := range allocatedNames {
		allocatedNamesSet[allocatedName] = true
	}
	for _, device := range devices {
		if allocatedNamesSet[device.Name] {
			allocated = append(allocated, device)
		} else {
			unallocated = append(unallocated, device)
		}
	}
	return unallocated, allocated
}

// getAllDevices aggregates all Devices from the provided ResourceSlices into one list.
func getAllDevices(slices []*resourceapi.ResourceSlice) []resourceapi.Device {
	var devices []resourceapi.Device
	for _, slice := range slices {
		devices = append(devices, slice.Spec.Devices...)
	}
	return devices
}

// groupAllocatedReservedDevices groups reserved devices from claim allocations by their driver and pool.
// If a deviced will not exclusively reserved (i.e. AdminAccess), it will not be included in the result.
// Returns an error if any of the claims isn't allocated.
func groupAllocatedReservedDevices(claims []*resourceapi.ResourceClaim) (map[string]map[string][]string, error) {
	result := map[string]map[string][]string{}
	for _, claim := range claims {
		alloc := claim.Status.Allocation
		if alloc == nil {
			return nil, fmt.Errorf("claim %s/%s not allocated", claim.Namespace, claim.Name)
		}

		for _, deviceAlloc := range alloc.Devices.Results {
			if ptr.Deref(deviceAlloc.AdminAccess, false) {
				// Admin access Device allocations don't actually reserve the Device, so they shouldn't be counted towards utilization.
				continue
			}

			if result[deviceAlloc.Driver] == nil {
				result[deviceAlloc.Driver] = map[string][]string{}
			}
			result[deviceAlloc.Driver][deviceAlloc.Pool] = append(result[deviceAlloc.Driver][deviceAlloc.Pool], deviceAlloc.Device)
		}
	}
	return result, nil
}

// groupSlices groups the provided slices by their driver and pool name.
func groupSlices(slices []*resourceapi.ResourceSlice) map[string]map[string][]*resourceapi.ResourceSlice {
	result := map[string]map[string][]*resourceapi.ResourceSlice{}
	for _, slice := range slices {
		driver := slice.Spec.Driver
		pool := slice.Spec.Pool.Name
		if result[driver] == nil {
			result[driver] = map[string][]*resourceapi.ResourceSlice{}
		}
		result[driver][pool] = append(result[driver][pool], slice)
	}
	return result
}

// allCurrentGenSlices filters out slices that aren't from the newest pool generation, and returns an error
// if not all slices from the newest generations are provided.
func allCurrentGenSlices(slices []*resourceapi.ResourceSlice) ([]*resourceapi.ResourceSlice, error) {
	var maxGenSlices []*resourceapi.ResourceSlice
	maxGen := int64(0)
	for _, slice := range slices {
		gen := slice.Spec.Pool.Generation
		if gen > maxGen {
			maxGen = gen
			maxGenSlices = []*resourceapi.ResourceSlice{slice}
			continue
		}
		if gen == maxGen {
			maxGenSlices = append(maxGenSlices, slice)
		}
	}

	foundCurrentSlices := len(maxGenSlices)
	if foundCurrentSlices == 0 {
		return nil, nil
	}

	if wantCurrentSlices := maxGenSlices[0].Spec.Pool.ResourceSliceCount; int64(foundCurrentSlices) != wantCurrentSlices {
		return nil, fmt.Errorf("newest generation: %d, slice count: %d - found only %d slices", maxGen, wantCurrentSlices, foundCurrentSlices)
	}

	return maxGenSlices, nil
}
