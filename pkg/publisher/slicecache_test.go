package publisher

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// dynamicMIGSlices are what the plugin publishes for a dynamic-MIG node (5 slices, shared
// counters, MIG partitions naming their GPU by parentUUID).
func dynamicMIGSlices(t *testing.T, node string) []resourceapi.ResourceSlice {
	t.Helper()
	o := nodeplugin.NewOptions()
	o.Backend, o.MockProfile, o.DynamicMIG, o.NodeName = backend.Mock, "h100-8x-mig", true, node
	out, err := nodeplugin.GenerateSlices(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func compactAll(t *testing.T, s *sliceStripper, in []resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	t.Helper()
	var out []*resourceapi.ResourceSlice
	for i := range in {
		c, err := s.compact(in[i].DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func TestSliceTransform(t *testing.T) {
	s := newSliceStripper([]string{gpuDriver}, template.BuildOptions{})
	gpu := gpuSlices("n1", h100)[0]
	other := *gpu.DeepCopy()
	other.Spec.Driver = "nic.example.com"
	for name, tc := range map[string]struct {
		in            resourceapi.ResourceSlice
		wantDevices   bool // folded into the annotations
		wantSameSpec  resourceapi.ResourceSliceSpec
		wantAnnotated bool
	}{
		"served driver: folded into shape and identity": {in: gpu, wantAnnotated: true,
			wantSameSpec: resourceapi.ResourceSliceSpec{Driver: gpuDriver, NodeName: gpu.Spec.NodeName, Pool: gpu.Spec.Pool}},
		"other driver: only what names it": {in: other,
			wantSameSpec: resourceapi.ResourceSliceSpec{Driver: "nic.example.com", NodeName: gpu.Spec.NodeName, Pool: gpu.Spec.Pool}},
	} {
		t.Run(name, func(t *testing.T) {
			in := tc.in.DeepCopy()
			in.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
			in.Annotations = map[string]string{shapeAnnotation: "forged"}
			got, err := s.transform(in)
			if err != nil {
				t.Fatal(err)
			}
			c := got.(*resourceapi.ResourceSlice)
			if !equality.Semantic.DeepEqual(c.Spec, tc.wantSameSpec) {
				t.Errorf("spec = %+v, want %+v", c.Spec, tc.wantSameSpec)
			}
			if c.ManagedFields != nil || c.Name != tc.in.Name || c.UID != tc.in.UID || c.ResourceVersion != tc.in.ResourceVersion {
				t.Errorf("metadata = %+v", c.ObjectMeta)
			}
			if compacted(c) != tc.wantAnnotated || (!tc.wantAnnotated && c.Annotations != nil) {
				t.Errorf("annotations = %v, want compacted %v", c.Annotations, tc.wantAnnotated)
			}
		})
	}
	if got, _ := s.transform(&corev1.Node{}); got == nil {
		t.Error("transform of another kind dropped it")
	}
}

func TestNodeCacheObjectsFilterDrivers(t *testing.T) {
	for name, tc := range map[string]struct {
		drivers []string
		want    string
	}{
		"one driver: the API server filters": {[]string{gpuDriver}, "spec.driver=" + gpuDriver},
		"two drivers: the transform filters": {[]string{gpuDriver, npuDriver}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			for obj, bo := range nodeCacheObjects(tc.drivers, newSliceStripper(tc.drivers, template.BuildOptions{})) {
				if _, ok := obj.(*resourceapi.ResourceSlice); !ok {
					continue
				}
				got := ""
				if bo.Field != nil {
					got = bo.Field.String()
				}
				if got != tc.want || bo.Transform == nil {
					t.Errorf("field selector %q (transform %v), want %q with a transform", got, bo.Transform != nil, tc.want)
				}
			}
		})
	}
}

// Compacting and expanding a slice gives Build the same input: the same template.
func TestExpandSliceRoundTrip(t *testing.T) {
	for name, tc := range map[string]struct {
		slices []resourceapi.ResourceSlice
		opts   template.BuildOptions
	}{
		"whole GPUs":  {slices: gpuSlices("n1", h100)},
		"dynamic MIG": {slices: dynamicMIGSlices(t, "mig-1")},
		"no identity attributes": {slices: gpuSlices("n1", h100),
			opts: template.BuildOptions{IdentityAttributes: []string{}}},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSliceStripper([]string{gpuDriver}, tc.opts)
			var expanded []resourceapi.ResourceSlice
			for _, c := range compactAll(t, s, tc.slices) {
				if c.Spec.Devices != nil || c.Spec.SharedCounters != nil {
					t.Fatalf("compacted slice %s keeps its devices", c.Name)
				}
				// The informer may transform an object it already transformed (client-go's FIFO
				// on Replace): that must leave it as it is.
				obj, err := s.transform(c.DeepCopy())
				if err != nil {
					t.Fatal(err)
				}
				if again := obj.(*resourceapi.ResourceSlice); !equality.Semantic.DeepEqual(again, c) {
					t.Fatalf("slice %s transformed twice differs from transformed once: annotations %v, want %v", c.Name, again.Annotations, c.Annotations)
				}
				e, err := s.expandSlice(obj.(*resourceapi.ResourceSlice))
				if err != nil {
					t.Fatal(err)
				}
				expanded = append(expanded, e)
			}
			for i := range expanded {
				if !equality.Semantic.DeepEqual(expanded[i].Spec, tc.slices[i].Spec) {
					t.Fatalf("slice %s: expanded spec differs from the original", tc.slices[i].Name)
				}
			}
			want, err := template.Build(tc.slices, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := template.Build(expanded, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(want) {
				t.Error("template of the expanded slices differs")
			}
		})
	}
}

// Nodes of one shape share a shape key (and so one template); anything that changes the
// template changes the key.
func TestShapeKey(t *testing.T) {
	s := newSliceStripper([]string{gpuDriver}, template.BuildOptions{})
	key := func(node string, slices []resourceapi.ResourceSlice) (string, error) {
		return shapeKey(node, compactAll(t, s, slices))
	}
	base, err := key("n1", gpuSlices("n1", h100))
	if err != nil {
		t.Fatal(err)
	}
	sharedRoot := gpuSlices("n3", h100)
	// All GPUs on one PCIe root: which devices share a value is part of the template.
	for i := range sharedRoot[0].Spec.Devices {
		sharedRoot[0].Spec.Devices[i].Attributes["resource.kubernetes.io/pcieRoot"] = resourceapi.DeviceAttribute{StringValue: new("pci0000:00")}
	}
	newer := gpuSlices("n4", shape{product: h100.product, gpus: 8, memory: "80Gi", generation: 7})
	incomplete := gpuSlices("n5", shape{product: h100.product, gpus: 8, memory: "80Gi", sliceCount: 2})
	migA, migB := dynamicMIGSlices(t, "mig-a"), dynamicMIGSlices(t, "mig-b")
	migKey, err := key("mig-a", migA)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		node    string
		slices  []resourceapi.ResourceSlice
		base    string
		same    bool
		wantErr error
	}{
		"other UUIDs and PCI addresses":  {node: "n2", slices: gpuSlices("n2", h100), base: base, same: true},
		"another generation of the pool": {node: "n4", slices: newer, base: base, same: true},
		"another product":                {node: "n2", slices: gpuSlices("n2", a100), base: base},
		"values shared in other places":  {node: "n3", slices: sharedRoot, base: base},
		"incomplete pool":                {node: "n5", slices: incomplete, wantErr: template.ErrIncompletePool},
		"dynamic MIG of another node":    {node: "mig-b", slices: migB, base: migKey, same: true},
		"dynamic MIG against whole GPUs": {node: "mig-b", slices: migB, base: base},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := key(tc.node, tc.slices)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == tc.base) != tc.same {
				t.Errorf("same key = %v, want %v", got == tc.base, tc.same)
			}
		})
	}
}

// The reconciler keeps one template per shape, not one per node, and drops a template the
// last node of its shape no longer has.
func TestReconcilerSharesTemplates(t *testing.T) {
	r := NewReconciler(nil, nil, nil, NewOptions())
	input := func(node string, s shape) NodeInput {
		slices := gpuSlices(node, s)
		// An update of the node's slice: a new resource version.
		slices[0].ResourceVersion = s.product
		in := r.nodeTemplate(node, gpuNode(node), slices)
		if in.Err != nil || in.Template == nil {
			t.Fatalf("node %s: %v", node, in.Err)
		}
		return in
	}
	n1, n2, n3 := input("n1", h100), input("n2", h100), input("n3", h100)
	if n1.Template != n2.Template || n2.Template != n3.Template || len(r.templates) != 1 {
		t.Fatalf("three nodes of one shape: %d templates", len(r.templates))
	}
	want, err := template.Build(gpuSlices("n1", h100), template.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := want.Hash(); h != n1.Hash {
		t.Errorf("hash %s, want %s (the template Build gives for the node's slices)", n1.Hash, h)
	}
	if a := input("n3", a100); a.Hash == n1.Hash || len(r.templates) != 2 {
		t.Fatalf("a node of another shape: %d templates", len(r.templates))
	}
	r.ForgetNode("n3")
	if len(r.templates) != 1 {
		t.Errorf("after the only A100 node went: %d templates, want 1", len(r.templates))
	}
	r.ForgetNode("n1")
	r.ForgetNode("n2")
	if len(r.templates) != 0 || len(r.nodeTemplates) != 0 {
		t.Errorf("after every node went: %d templates, %d nodes", len(r.templates), len(r.nodeTemplates))
	}
}

func TestStripNode(t *testing.T) {
	full := gpuNode("n1")
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	full.Annotations = map[string]string{"node.alpha.kubernetes.io/ttl": "0", "csi.volume.kubernetes.io/nodeid": "{}"}
	full.Labels["node-role.kubernetes.io/gpu"] = ""
	full.Labels["cluster.x-k8s.io/cluster-name"] = "c1"
	full.Labels["nvidia.com/gfd.timestamp"] = "1732700000"
	full.OwnerReferences = []metav1.OwnerReference{{Name: "owner"}}
	full.Spec.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	full.Spec.ProviderID = "aws:///us-east-1a/i-0123"
	full.Spec.PodCIDR = "10.0.0.0/24"
	full.Status.Images = []corev1.ContainerImage{{Names: []string{"registry/image:v1"}, SizeBytes: 1 << 30}}
	full.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	full.Status.NodeInfo.KubeletVersion = "v1.37.1"

	got, err := stripNode(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: full.UID, Labels: map[string]string{
			"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "gpu-8x", "nvidia.com/gfd.timestamp": "1732700000",
		}},
		Spec:   corev1.NodeSpec{Taints: full.Spec.Taints, ProviderID: full.Spec.ProviderID},
		Status: corev1.NodeStatus{Capacity: full.Status.Capacity, Allocatable: full.Status.Allocatable},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("stripNode =\n%+v\nwant\n%+v", got, want)
	}
}
