package checkpoint

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestShareRoundTrip: a share's ID and consumed capacity survive a write and a load exactly,
// and a v1 record claiming to have them is refused as damaged.
func TestShareRoundTrip(t *testing.T) {
	s := openStore(t, thisBoot)
	c := testClaim(uid(1))
	c.Devices[0].ShareID = "6d1d6fbd-4a2e-4c39-a4e5-9b0c3e1f2a7d"
	c.Devices[0].ConsumedCapacity = map[string]resource.Quantity{"memory": resource.MustParse("20Gi")}
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	res := mustLoad(t, s)
	if len(res.Claims) != 1 || len(res.Corrupt) != 0 {
		t.Fatalf("loaded %d claims, %d corrupt", len(res.Claims), len(res.Corrupt))
	}
	got := res.Claims[0].Devices[0]
	if got.ShareID != c.Devices[0].ShareID {
		t.Errorf("shareID %q, want %q", got.ShareID, c.Devices[0].ShareID)
	}
	if q := got.ConsumedCapacity["memory"]; q.Cmp(resource.MustParse("20Gi")) != 0 {
		t.Errorf("consumed memory %s, want 20Gi", q.String())
	}
	if res.Claims[0].Devices[1].ShareID != "" {
		t.Error("an exclusive device got a share ID")
	}

	// A record whose only v2 fields are the share's, under the v1 apiVersion: a v1 plugin
	// never wrote shares, so this plugin does not own it, and holds the share.
	v1c := Claim{UID: uid(2), Namespace: "team-a", Name: "share", State: StatePrepareCompleted,
		Devices: []PreparedDevice{{Request: "gpu", Pool: "node-1", Device: "gpu-0", ShareID: "s-1",
			ConsumedCapacity: map[string]resource.Quantity{"memory": resource.MustParse("1Gi")}}}}
	data, err := encodeRecord(thisBoot, &v1c)
	if err != nil {
		t.Fatal(err)
	}
	v1 := strings.Replace(string(data), APIVersion, APIVersionV1, 1)
	_, held, err := decodeRecord([]byte(v1))
	if err != nil || held.Foreign == nil || !strings.Contains(held.Foreign.Reason, "fields of") || held.Devices[0].ShareID != "s-1" {
		t.Errorf("v1 record with a share: %+v, %v; want it held, with its share, for having v2 fields", held, err)
	}
}
