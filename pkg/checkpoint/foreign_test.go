package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// intactRecord is a record file as any writer that keeps the envelope's rules (package comment)
// writes it: the checksum covers the boot ID and the claim's bytes as written, whatever the
// claim holds, so that a reader can tell an intact record it does not understand from damage.
func intactRecord(t testing.TB, apiVersion, kind, bootID, claim string) []byte {
	t.Helper()
	var c bytes.Buffer
	if err := json.Compact(&c, []byte(claim)); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(struct {
		BootID string          `json:"bootID"`
		Claim  json.RawMessage `json:"claim"`
	}{bootID, c.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	return fmt.Appendf(nil, `{"apiVersion":%q,"kind":%q,"bootID":%q,"checksum":"sha256:%s","claim":%s}`+"\n",
		apiVersion, kind, bootID, hex.EncodeToString(sum[:]), c.Bytes())
}

const nextVersion = "checkpoint.accel-dra.io/v3"

// nextClaim is a claim as the next version could write it: the v2 fields and new ones.
func nextClaim(uid string) string {
	return `{"uid":"` + uid + `","namespace":"team-c","name":"next","state":"PrepareCompleted",` +
		`"devices":[{"request":"gpu","pool":"node-1","device":"gpu-3","cdiDeviceIDs":["accel-dra.io/gpu=x"],"uuid":"GPU-3","partition":{"slices":2}}],` +
		`"env":[],"reservation":"2026-12-01"}`
}

// TestLoadKeepsIntactRecordsItCannotRead: a record whose checksum matches its content was written
// whole by some plugin; if this one cannot interpret it (a newer apiVersion, fields it does not
// know), the record is not damage. Load keeps it where it is, byte for byte, and so does every
// later Load and Get, while the good record next to it loads as usual.
func TestLoadKeepsIntactRecordsItCannotRead(t *testing.T) {
	u := uid(9)
	v2, err := encodeRecord(thisBoot, ptr(testClaim(u)))
	if err != nil {
		t.Fatal(err)
	}
	var v2rec record
	if err := json.Unmarshal(v2, &v2rec); err != nil {
		t.Fatal(err)
	}
	v2claim := string(v2rec.Claim)
	tests := map[string]struct {
		data []byte
		// device is the first device's name as read, "" for an opaque record.
		device, reason string
	}{
		"next version with new fields":  {intactRecord(t, nextVersion, RecordKind, thisBoot, nextClaim(u)), "gpu-3", "newer than this plugin"},
		"far version":                   {intactRecord(t, "checkpoint.accel-dra.io/v17", RecordKind, thisBoot, nextClaim(u)), "gpu-3", "newer than this plugin"},
		"next version, new state":       {intactRecord(t, nextVersion, RecordKind, thisBoot, strings.Replace(nextClaim(u), "PrepareCompleted", "PrepareVerified", 1)), "gpu-3", "newer"},
		"next version, extra envelope":  {bytes.Replace(intactRecord(t, nextVersion, RecordKind, thisBoot, nextClaim(u)), []byte(`"claim":`), []byte(`"writer":"vNext","claim":`), 1), "gpu-3", "newer"},
		"next version, a field retyped": {intactRecord(t, nextVersion, RecordKind, thisBoot, strings.Replace(nextClaim(u), `"env":[]`, `"env":{"A":"1"}`, 1)), "", "reading its known fields"},
		"next version, another kind":    {intactRecord(t, nextVersion, "PreparedClaimSet", thisBoot, nextClaim(u)), "", "newer"},
		"v2 with a field v2 never had":  {intactRecord(t, APIVersion, RecordKind, thisBoot, strings.Replace(v2claim, `"state":`, `"priority":3,"state":`, 1)), "gpu-0", `unknown field "priority"`},
		"v1 label on v2 content":        {intactRecord(t, APIVersionV1, RecordKind, thisBoot, v2claim), "gpu-0", "has fields of"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, thisBoot)
			good := testClaim(uid(1))
			if err := s.Put(good); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(s.Dir(), u+recordExt)
			writeFile(t, path, tc.data)
			var held Claim
			for i := 0; i < 2; i++ {
				res := mustLoad(t, s)
				if len(res.Corrupt) != 0 {
					t.Fatalf("Load #%d moved an intact record aside: %v", i+1, res.Corrupt[0].Err)
				}
				if len(res.Claims) != 2 || res.Claims[0].UID != good.UID || res.Claims[1].UID != u {
					t.Fatalf("Load #%d: claims %v, want %s and %s", i+1, uids(res.Claims), good.UID, u)
				}
				if res.Claims[0].Foreign != nil {
					t.Errorf("the good record is not owned: %+v", res.Claims[0].Foreign)
				}
				held = res.Claims[1]
			}
			f := held.Foreign
			if f == nil {
				t.Fatalf("loaded as owned: %+v", held)
			}
			if !strings.Contains(f.Reason, tc.reason) {
				t.Errorf("reason %q, want it to mention %q", f.Reason, tc.reason)
			}
			if f.Opaque != (tc.device == "") {
				t.Errorf("opaque = %v, want %v (%s)", f.Opaque, tc.device == "", f.Reason)
			}
			if tc.device != "" && (len(held.Devices) == 0 || held.Devices[0].Device != tc.device || held.Devices[0].UUID == "") {
				t.Errorf("devices read %+v, want %s first, with its UUID", held.Devices, tc.device)
			}

			l, err := s.Lock()
			if err != nil {
				t.Fatal(err)
			}
			got, found, err := l.Get(u)
			if err != nil || !found || got.Foreign == nil {
				t.Errorf("Get: %+v, %v, %v; want it held", got.Foreign, found, err)
			}
			if err := l.Put(held); err == nil {
				t.Error("Put rewrote a record this plugin does not own")
			}
			l.Unlock()
			after, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(after, tc.data) {
				t.Errorf("record changed on disk (err %v)", err)
			}
			if _, err := os.Stat(filepath.Join(s.Dir(), CorruptDir)); !os.IsNotExist(err) {
				t.Errorf("corrupt/ exists (err %v)", err)
			}

			// Of another boot it holds nothing, like any record of another boot: the caller
			// deletes it (package comment).
			later := openStoreIn(t, s.Dir(), otherBoot)
			res := mustLoad(t, later)
			if len(res.Stale) != 2 || res.Stale[1].UID != u || len(res.Claims)+len(res.Corrupt) != 0 {
				t.Errorf("after a reboot: %+v, want both records stale", res)
			}
		})
	}
}

func openStoreIn(t *testing.T, dir, boot string) *Store {
	t.Helper()
	s, err := Open(dir, boot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestLoadMovesDamagedNewerRecordsAside: a newer version is no excuse for damage. A record whose
// checksum does not match, or that is cut short, is moved aside whatever its apiVersion.
func TestLoadMovesDamagedNewerRecordsAside(t *testing.T) {
	u := uid(9)
	intact := intactRecord(t, nextVersion, RecordKind, thisBoot, nextClaim(u))
	tests := map[string]struct {
		data    []byte
		wantErr string
	}{
		"checksum mismatch":         {bytes.Replace(intact, []byte(`"name":"next"`), []byte(`"name":"evil"`), 1), "checksum"},
		"boot ID edited":            {bytes.Replace(intact, []byte(thisBoot), []byte(otherBoot), 1), "checksum"},
		"truncated":                 {intact[:len(intact)/2], "unexpected end of JSON input"},
		"no checksum":               {bytes.Replace(intact, []byte(`"checksum":"sha256:`), []byte(`"checksum":"`), 1), "checksum"},
		"no claim":                  {[]byte(`{"apiVersion":"` + nextVersion + `","kind":"PreparedClaim","bootID":"x","checksum":"sha256:00"}`), "claim"},
		"claim not an object":       {intactRecord(t, nextVersion, RecordKind, thisBoot, `["`+u+`"]`), "claim"},
		"stored under another name": {intactRecord(t, nextVersion, RecordKind, thisBoot, nextClaim(uid(8))), "stored under name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, thisBoot)
			path := filepath.Join(s.Dir(), u+recordExt)
			writeFile(t, path, tc.data)
			res := mustLoad(t, s)
			if len(res.Corrupt) != 1 || len(res.Claims) != 0 {
				t.Fatalf("Load: %d corrupt, claims %v; want the damaged record moved aside", len(res.Corrupt), uids(res.Claims))
			}
			if !strings.Contains(res.Corrupt[0].Err.Error(), tc.wantErr) {
				t.Errorf("error %q, want it to mention %q", res.Corrupt[0].Err, tc.wantErr)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("damaged record still in place (err %v)", err)
			}
		})
	}
}

func uids(cs []Claim) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.UID)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
