package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// TestGC: the periodic collection drops a record only when its claim is deleted, replaced, no
// longer allocated or allocated elsewhere, and reserved for nobody, on two passes a grace
// period apart; it keeps every claim a pod may still use, and every claim it cannot check. It
// also removes CDI specs without a record.
func TestGC(t *testing.T) {
	e := newEnv(t, inventory(8))
	reserved := []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-uid"}}
	type tc struct {
		uid  string
		api  func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim // nil: not in the API
		drop bool
	}
	cases := []tc{
		{"live", func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
			c.Status.ReservedFor = reserved
			return c
		}, false},
		{"allocated-unreserved", func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim { return c }, false},
		{"deleted", nil, true},
		{"replaced", func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
			c.UID = "other-uid"
			return c
		}, true},
		{"deallocated", func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
			c.Status.Allocation = nil
			return c
		}, true},
		{"moved", func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
			c.Status.Allocation.Devices.Results[0].Pool = "node-b"
			return c
		}, true},
		{"moved-but-reserved", func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
			c.Status.Allocation.Devices.Results[0].Pool = "node-b"
			c.Status.ReservedFor = reserved
			return c
		}, false},
		{"api-error", func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim { return c }, false},
	}
	for i, c := range cases {
		cl := claim(c.uid, []result{{Device: device.NameFor(device.KindGPU, i)}})
		if r := e.prepare(cl); r.Err != nil {
			t.Fatal(r.Err)
		}
		if c.api != nil {
			e.exist(c.api(cl.DeepCopy()))
		}
	}
	e.kube.PrependReactor("get", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "claim-api-error" {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	// A spec no record owns.
	w := cdi.New(e.cdiDir(), device.KindGPU)
	spec, err := w.Build(cdi.Claim{UID: "orphan", Requests: []cdi.Request{{Name: "gpu", Devices: e.inv.Devices[7:8]}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write("orphan", spec); err != nil {
		t.Fatal(err)
	}

	start := time.Unix(1000, 0)
	grace := time.Minute
	rep, err := e.drv.gc.collect(e.ctx, start, grace)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, c := range cases {
		if c.drop {
			want = append(want, c.uid)
		}
	}
	slices.Sort(want)
	slices.Sort(rep.Waiting)
	if len(rep.Dropped) != 0 || fmt.Sprint(rep.Waiting) != fmt.Sprint(want) {
		t.Errorf("first pass dropped %v, waiting %v; want none dropped, %v waiting", rep.Dropped, rep.Waiting, want)
	}
	if fmt.Sprint(rep.Orphans) != "[orphan]" || exists(e.specPath("orphan")) {
		t.Errorf("orphan specs %v", rep.Orphans)
	}
	// Before the grace period is over, nothing goes.
	if rep, _ := e.drv.gc.collect(e.ctx, start.Add(grace/2), grace); len(rep.Dropped) != 0 {
		t.Errorf("dropped %v within the grace period", rep.Dropped)
	}
	rep, err = e.drv.gc.collect(e.ctx, start.Add(grace), grace)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.Dropped)
	if fmt.Sprint(rep.Dropped) != fmt.Sprint(want) {
		t.Errorf("dropped %v, want %v", rep.Dropped, want)
	}
	for _, c := range cases {
		if got := exists(e.recordPath(types.UID(c.uid))); got == c.drop {
			t.Errorf("claim %s: record kept %v, want %v", c.uid, got, !c.drop)
		}
		if got := exists(e.specPath(types.UID(c.uid))); got == c.drop {
			t.Errorf("claim %s: spec kept %v, want %v", c.uid, got, !c.drop)
		}
	}
	// A dropped claim's GPU is free again.
	if r := e.prepare(claim("after", []result{{Device: "gpu-2"}})); r.Err != nil {
		t.Errorf("GPU of a dropped claim: %v", r.Err)
	}
}

// TestGCGraceRestarts: a claim that looked droppable and then did not (the API server's answer
// changed back) waits a full grace period again.
func TestGCGraceRestarts(t *testing.T) {
	e := newEnv(t, inventory(1))
	c := claim("u1", []result{{Device: "gpu-0"}})
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	start, grace := time.Unix(1000, 0), time.Minute
	if _, err := e.drv.gc.collect(e.ctx, start, grace); err != nil {
		t.Fatal(err)
	}
	e.exist(c)
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod"}}
	if _, err := e.kube.ResourceV1().ResourceClaims("ns").UpdateStatus(context.Background(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if rep, _ := e.drv.gc.collect(e.ctx, start.Add(grace/2), grace); len(rep.Waiting)+len(rep.Dropped) != 0 {
		t.Fatalf("reserved claim: %+v", rep)
	}
	if err := e.kube.ResourceV1().ResourceClaims("ns").Delete(context.Background(), c.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if rep, _ := e.drv.gc.collect(e.ctx, start.Add(grace+time.Second), grace); len(rep.Dropped) != 0 {
		t.Fatalf("dropped %v at once after it was reserved a moment ago", rep.Dropped)
	}
	if rep, _ := e.drv.gc.collect(e.ctx, start.Add(2*grace+time.Second), grace); fmt.Sprint(rep.Dropped) != "[u1]" {
		t.Fatalf("dropped %v after a full grace period, want [u1]", rep.Dropped)
	}
}
