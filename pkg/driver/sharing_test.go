package driver

import (
	"fmt"
	"os"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/accel-dra/accel-dra/pkg/slices"
)

// shareClaim is a claim with one share of device dev, consuming memory.
func shareClaim(uid, dev, memory string) *resourceapi.ResourceClaim {
	c := claim(uid, []result{{Device: dev}})
	r := &c.Status.Allocation.Devices.Results[0]
	id := types.UID("share-" + uid)
	r.ShareID = &id
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
	return c
}

func TestConsumableMemoryShares(t *testing.T) {
	e := newEnv(t, inventory(2))
	e.drv.opts.ConsumableMemory = true
	uuid0 := e.inv.Devices[0].UUID

	shares := []*resourceapi.ResourceClaim{shareClaim("s1", "gpu-0", "20Gi"), shareClaim("s2", "gpu-0", "20Gi"), shareClaim("s3", "gpu-0", "40Gi")}
	e.exist(shares...)
	for _, c := range shares {
		r := e.prepare(c)
		if r.Err != nil {
			t.Fatalf("share %s: %v", c.Name, r.Err)
		}
		if len(r.Devices) != 1 || r.Devices[0].ShareID == nil || *r.Devices[0].ShareID != *c.Status.Allocation.Devices.Results[0].ShareID {
			t.Fatalf("share %s: devices %+v, want the allocation's share ID", c.Name, r.Devices)
		}
		spec, err := os.ReadFile(e.specPath(c.UID))
		if err != nil {
			t.Fatal(err)
		}
		q := c.Status.Allocation.Devices.Results[0].ConsumedCapacity["memory"]
		if want := fmt.Sprintf("%s=%s=%d", EnvMemoryLimits, uuid0, q.Value()); !strings.Contains(string(spec), want) {
			t.Errorf("spec of %s lacks %q:\n%s", c.Name, want, spec)
		}
	}

	// An exclusive claim on the shared GPU is refused, naming a share holder; another GPU is free.
	r := e.prepare(claim("x1", []result{{Device: "gpu-0"}}))
	if r.Err == nil || !strings.Contains(r.Err.Error(), "ns/claim-s1") || !strings.Contains(r.Err.Error(), "holds a share") {
		t.Fatalf("exclusive claim on a shared GPU: error %v, want one naming ns/claim-s1 and its share", r.Err)
	}
	if r := e.prepare(claim("x2", []result{{Device: "gpu-1"}})); r.Err != nil {
		t.Fatalf("exclusive claim on a free GPU: %v", r.Err)
	}
	// A share of the exclusively held GPU is refused.
	if r := e.prepare(shareClaim("s4", "gpu-1", "1Gi")); r.Err == nil || !strings.Contains(r.Err.Error(), "holds it exclusively") {
		t.Fatalf("share of an exclusively held GPU: error %v", r.Err)
	}

	// The shares survive a restart: the index is rebuilt from the records.
	e.exist(claim("x2", []result{{Device: "gpu-1"}}))
	e.start()
	e.drv.opts.ConsumableMemory = true
	if r := e.prepare(claim("x1", []result{{Device: "gpu-0"}})); r.Err == nil {
		t.Fatal("after restart an exclusive claim got a shared GPU")
	}
	if r := e.prepare(shareClaim("s5", "gpu-0", "1Gi")); r.Err != nil {
		t.Fatalf("after restart a fourth share: %v", r.Err)
	}
	if again := e.prepare(shares[0]); again.Err != nil || *again.Devices[0].ShareID != "share-s1" {
		t.Fatalf("prepare again after restart: %+v", again)
	}

	// Only once the last share is gone does the GPU become free for exclusive use.
	for _, uid := range []types.UID{"s1", "s2", "s3"} {
		if err := e.unprepare(uid); err != nil {
			t.Fatal(err)
		}
		if r := e.prepare(claim("x1", []result{{Device: "gpu-0"}})); r.Err == nil {
			t.Fatalf("exclusive claim prepared while share s5 still holds the GPU (after unpreparing %s)", uid)
		}
	}
	if err := e.unprepare("s5"); err != nil {
		t.Fatal(err)
	}
	if r := e.prepare(claim("x1", []result{{Device: "gpu-0"}})); r.Err != nil {
		t.Fatalf("exclusive claim on a GPU whose shares are all gone: %v", r.Err)
	}
}

func TestConsumableMemoryPublishing(t *testing.T) {
	e := newEnv(t, inventory(2))
	for _, on := range []bool{false, true} {
		e.drv.opts.ConsumableMemory = on
		for _, s := range e.drv.Resources().Pools[nodeName].Slices {
			for _, d := range s.Devices {
				multi := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
				policy := d.Capacity[slices.CapacityMemory].RequestPolicy != nil
				if multi != on || policy != on {
					t.Errorf("consumable memory %v: device %s allowMultipleAllocations %v, request policy %v", on, d.Name, multi, policy)
				}
			}
		}
	}
}
