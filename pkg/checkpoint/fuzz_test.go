package checkpoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func FuzzDecodeRecord(f *testing.F) {
	c := testClaim("0e5b6a3c-7f3e-4a59-9d0a-3b1c2d4e5f60")
	good, err := encodeRecord(thisBoot, &c)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	empty := Claim{UID: "a", State: StatePrepareStarted}
	if data, err := encodeRecord("", &empty); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"apiVersion":"checkpoint.accel-dra.io/v1","kind":"PreparedClaim","claim":null}`))
	if next, err := os.ReadFile(filepath.Join("testdata", "written-by-future-v3.json")); err == nil {
		f.Add(next)
	}
	f.Add([]byte(`null`))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		bootID, claim, err := decodeRecord(data)
		if err != nil {
			return
		}
		if claim.Foreign != nil {
			// Kept, never rewritten: what this plugin cannot read would be lost.
			if _, err := encodeRecord(bootID, &claim); err == nil {
				t.Fatalf("a record this plugin does not own re-encodes: %+v", claim.Foreign)
			}
			return
		}
		again, err := encodeRecord(bootID, &claim)
		if err != nil {
			t.Fatalf("accepted record does not re-encode: %v\nclaim: %+v", err, claim)
		}
		bootID2, claim2, err := decodeRecord(again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v\n%s", err, again)
		}
		if bootID2 != bootID {
			t.Errorf("boot ID changed in round trip: %q -> %q", bootID, bootID2)
		}
		if diff := cmp.Diff(claim, claim2); diff != "" {
			t.Errorf("claim changed in round trip (-first +second):\n%s", diff)
		}
	})
}
