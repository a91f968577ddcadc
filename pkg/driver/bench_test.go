package driver

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// benchEnv is a driver on a 1,024-GPU node, logging off.
func benchEnv(b *testing.B) *env {
	b.Helper()
	ctx := klog.NewContext(context.Background(), logr.Discard())
	inv := inventory(1024)
	for i := range inv.Devices {
		inv.Devices[i].PCIBusID = fmt.Sprintf("0000:%02x:%02x.0", 0x10+i/32, i%32)
	}
	e := &env{t: b, ctx: ctx, dir: b.TempDir(), inv: inv, kube: fake.NewClientset(), boot: bootA}
	e.start()
	b.Cleanup(e.drv.Close)
	return e
}

func benchPrepare(b *testing.B, d *Driver, e *env, c *resourceapi.ResourceClaim) {
	res, err := d.PrepareResourceClaims(e.ctx, []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil {
		b.Fatalf("prepare %s: %v %v", c.UID, err, res[c.UID].Err)
	}
	ures, err := d.UnprepareResourceClaims(e.ctx, []kubeletplugin.NamespacedObject{{UID: c.UID}})
	if err != nil || ures[c.UID] != nil {
		b.Fatalf("unprepare %s: %v %v", c.UID, err, ures[c.UID])
	}
}

// BenchmarkPrepare is the plugin's own share of a prepare+unprepare (no gRPC, no API server):
// one at a time while 10 or 1,000 other claims stay prepared (the cost must not grow), and 8
// concurrent claims on distinct devices (the node lock must not serialise the work).
func BenchmarkPrepare(b *testing.B) {
	for _, held := range []int{10, 1000} {
		b.Run(fmt.Sprintf("prepared=%d", held), func(b *testing.B) {
			e := benchEnv(b)
			for i := 0; i < held; i++ {
				c := claim(fmt.Sprintf("held-%d", i), []result{{Device: fmt.Sprintf("gpu-%d", 16+i)}})
				if res, _ := e.drv.PrepareResourceClaims(e.ctx, []*resourceapi.ResourceClaim{c}); res[c.UID].Err != nil {
					b.Fatal(res[c.UID].Err)
				}
			}
			c := claim("probe", []result{{Device: "gpu-0"}})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				benchPrepare(b, e.drv, e, c)
			}
		})
	}
	b.Run("concurrent=8", func(b *testing.B) {
		e := benchEnv(b)
		var wg sync.WaitGroup
		per := (b.N + 7) / 8
		b.ResetTimer()
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := claim(fmt.Sprintf("conc-%d", w), []result{{Device: fmt.Sprintf("gpu-%d", w)}})
				for i := 0; i < per; i++ {
					benchPrepare(b, e.drv, e, c)
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(per*8)/b.Elapsed().Seconds(), "claims/s")
	})
}

// BenchmarkRollingUpdate is a rolling update's worst case: two instances take turns preparing
// and unpreparing while 1,000 other claims stay prepared, so that every hold of the node lock
// comes after the other instance wrote. Catching up must cost the records that changed, not
// the 1,000 (one prepare+unprepare on each instance per op).
func BenchmarkRollingUpdate(b *testing.B) {
	e := benchEnv(b)
	other, _ := e.second(e.inv)
	for i := 0; i < 1000; i++ {
		c := claim(fmt.Sprintf("held-%d", i), []result{{Device: fmt.Sprintf("gpu-%d", 16+i)}})
		if res, _ := e.drv.PrepareResourceClaims(e.ctx, []*resourceapi.ResourceClaim{c}); res[c.UID].Err != nil {
			b.Fatal(res[c.UID].Err)
		}
	}
	ca, cb := claim("probe-a", []result{{Device: "gpu-0"}}), claim("probe-b", []result{{Device: "gpu-1"}})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchPrepare(b, e.drv, e, ca)
		benchPrepare(b, other, e, cb)
	}
}
