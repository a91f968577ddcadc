package publisher

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

func TestCurrentMachineSet(t *testing.T) {
	deleting := func(ms *clusterv1.MachineSet) *clusterv1.MachineSet {
		ms.DeletionTimestamp = new(metav1.Now())
		return ms
	}
	for name, tc := range map[string]struct {
		sets []*clusterv1.MachineSet
		want string
	}{
		"none":                          {want: ""},
		"highest revision":              {sets: []*clusterv1.MachineSet{machineSet("a", "md", 3, time.Hour), machineSet("b", "md", 10, 2*time.Hour), machineSet("c", "md", 9, 0)}, want: "b"},
		"rollback: old set, new number": {sets: []*clusterv1.MachineSet{machineSet("old", "md", 3, 2*time.Hour), machineSet("new", "md", 2, time.Hour)}, want: "old"},
		"same revision: newest":         {sets: []*clusterv1.MachineSet{machineSet("a", "md", 1, time.Hour), machineSet("b", "md", 1, 0)}, want: "b"},
		"no revisions: newest":          {sets: []*clusterv1.MachineSet{machineSet("a", "md", 0, 0), machineSet("b", "md", 0, time.Hour)}, want: "a"},
		"being deleted loses":           {sets: []*clusterv1.MachineSet{deleting(machineSet("a", "md", 5, 0)), machineSet("b", "md", 4, 0)}, want: "b"},
		"only one, being deleted":       {sets: []*clusterv1.MachineSet{deleting(machineSet("a", "md", 5, 0))}, want: "a"},
	} {
		t.Run(name, func(t *testing.T) {
			got := ""
			if ms := CurrentMachineSet(tc.sets); ms != nil {
				got = ms.Name
			}
			if got != tc.want {
				t.Errorf("CurrentMachineSet = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestOwnership(t *testing.T) {
	ms := machineSet("ms", "md", 1, 0)
	if got := MachineDeploymentOf(ms); got != "md" {
		t.Errorf("MachineDeploymentOf (owner) = %q", got)
	}
	ms.OwnerReferences = nil
	if got := MachineDeploymentOf(ms); got != "md" {
		t.Errorf("MachineDeploymentOf (label only) = %q", got)
	}
	if got := GroupOfMachineSet(machineSet("bare", "", 0, 0)); got != (GroupKey{KindMachineSet, ns, "bare"}) {
		t.Errorf("GroupOfMachineSet(bare) = %v", got)
	}
	// An owner of another API group is not Cluster API's.
	other := machineSet("x", "", 0, 0)
	other.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: KindMachineDeployment, Name: "y", Controller: new(true)}}
	if got := MachineDeploymentOf(other); got != "" {
		t.Errorf("MachineDeploymentOf with a foreign owner = %q", got)
	}

	m := machine("m", machineSet("ms", "md", 1, 0), "n")
	if got := MachineSetOf(m); got != "ms" {
		t.Errorf("MachineSetOf (owner) = %q", got)
	}
	m.OwnerReferences = nil
	if got := MachineSetOf(m); got != "ms" {
		t.Errorf("MachineSetOf (label only) = %q", got)
	}
	delete(m.Labels, clusterv1.MachineSetNameLabel)
	if got := MachineSetOf(m); got != "" {
		t.Errorf("MachineSetOf (standalone) = %q", got)
	}
}

func TestParseCopyFrom(t *testing.T) {
	for in, want := range map[string]string{"md": "ns1/md", "other/md": "other/md", " md ": "ns1/md"} {
		n, name, err := ParseCopyFrom("ns1", in)
		if err != nil || n+"/"+name != want {
			t.Errorf("ParseCopyFrom(%q) = %s/%s, %v; want %s", in, n, name, err, want)
		}
	}
	for _, bad := range []string{"", "/md", "ns/", "a/b/c"} {
		if _, _, err := ParseCopyFrom("ns1", bad); err == nil {
			t.Errorf("ParseCopyFrom(%q): no error", bad)
		}
	}
}
