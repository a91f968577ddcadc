package v1alpha1

import (
	"os"
	"strings"
	"testing"
)

func TestDecodeExample(t *testing.T) {
	data, err := os.ReadFile("testdata/h100-seed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if s.Capacity.CPU.String() != "96" || s.Capacity.Memory.String() != "1000Gi" || *s.Capacity.MaxPods != 110 {
		t.Errorf("capacity = %+v", s.Capacity)
	}
	if len(s.ResourceSlices) != 1 || len(s.ResourceSlices[0].Spec.Devices) != 2 {
		t.Errorf("resourceSlices = %+v", s.ResourceSlices)
	}
	if len(s.Taints) != 1 || s.Labels["node.kubernetes.io/instance-type"] != "gpu-2x" {
		t.Errorf("labels %v taints %v", s.Labels, s.Taints)
	}
}

func TestDecodeErrors(t *testing.T) {
	const head = "apiVersion: templateconfig.accel-dra.io/v1alpha1\nkind: NodeGroupSeed\n"
	const devices = "template: {apiVersion: template.accel-dra.io/v1alpha1, kind: NodeGroupTemplate, drivers: []}\n"
	for name, tc := range map[string]struct{ doc, want string }{
		"empty":               {"", "empty"},
		"wrong kind":          {"apiVersion: templateconfig.accel-dra.io/v1alpha1\nkind: Seed\n", "kind"},
		"wrong version":       {"apiVersion: templateconfig.accel-dra.io/v2\nkind: NodeGroupSeed\n", "apiVersion"},
		"unknown field":       {head + "capacity: {cpu: 1, memory: 1Gi, gpus: 8}\n" + devices, "unknown field"},
		"duplicate field":     {head + "capacity: {cpu: 1, memory: 1Gi}\ncapacity: {cpu: 2, memory: 1Gi}\n" + devices, "already set"},
		"no cpu":              {head + "capacity: {memory: 1Gi}\n" + devices, "capacity.cpu"},
		"no memory":           {head + "capacity: {cpu: 1}\n" + devices, "capacity.memory"},
		"negative disk":       {head + "capacity: {cpu: 1, memory: 1Gi, ephemeralDisk: -1}\n" + devices, "ephemeralDisk"},
		"zero pods":           {head + "capacity: {cpu: 1, memory: 1Gi, maxPods: 0}\n" + devices, "maxPods"},
		"bad taint":           {head + "capacity: {cpu: 1, memory: 1Gi}\ntaints: [{key: a, effect: Sometimes}]\n" + devices, "taints[0].effect"},
		"no devices":          {head + "capacity: {cpu: 1, memory: 1Gi}\n", "resourceSlices"},
		"slices and template": {head + "capacity: {cpu: 1, memory: 1Gi}\nresourceSlices: [{spec: {driver: x}}]\n" + devices, "not both"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode: error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
