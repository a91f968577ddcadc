package checkpoint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// What a reader does with a record.
const (
	reads      = "reads"       // decodes it and owns it
	movesAside = "moves aside" // takes it for damage: corrupt/, and its devices are free again
	holds      = "holds"       // keeps it untouched and counts what it names as held
)

// compatRecord is a record file as some release wrote it.
type compatRecord struct {
	name string
	data []byte
}

// compatRecords are records of every released writer (testdata/, see its README) and of this
// one, for the claims each could write.
func compatRecords(t *testing.T) []compatRecord {
	t.Helper()
	var out []compatRecord
	for _, f := range []struct{ name, file string }{
		{"bbd9ab1 (v1)", "record-v1.json"},
		{"94642e0 (owner, identities)", "written-by-94642e0.json"},
		{"e47d56b (dynamic MIG)", "written-by-e47d56b.json"},
		{"83431c1 (MPS share)", "written-by-83431c1.json"},
		{"next version (v3, new fields)", "written-by-future-v3.json"},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", f.file))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, compatRecord{f.name, data})
	}
	gi, ci := 1, 0
	for name, c := range map[string]Claim{
		"this (exclusive, admin)": testClaim(uid(1)),
		"this (dynamic MIG)": {UID: uid(2), Namespace: "ns", Name: "mig", State: StatePrepareStarted, Owner: "1-ab",
			Devices: []PreparedDevice{{Request: "mig", Pool: "node-1", Device: "gpu-1-mig-1g10gb-6", UUID: "MIG-x", Nodes: []device.Node{{Path: "/dev/nvidia-caps/nvidia-cap12"}},
				MIG: &MIGRecord{ParentUUID: "GPU-1", Profile: "1g.10gb", ProfileID: 19, Start: 6, Size: 1, GI: &gi, CI: &ci}}}},
		"this (MPS share)": {UID: uid(3), Namespace: "ns", Name: "share", State: StatePrepareCompleted,
			Devices: []PreparedDevice{{Request: "gpu", Pool: "node-1", Device: "gpu-0", UUID: "GPU-0", ShareID: "s-1",
				ConsumedCapacity: map[string]resource.Quantity{"memory": resource.MustParse("10Gi")}}},
			Sharing: &Sharing{Strategy: "MPS", ActiveThreadPercentage: 30, PinnedMemoryMiB: map[string]int64{"GPU-0": 10240}}},
	} {
		data, err := encodeRecord(thisBoot, &c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, compatRecord{name, data})
	}
	return out
}

// TestReleasedReaders is what each released plugin and this one do with the records each of
// them writes, as two of them do when a rolling update runs them side by side on a node. An old
// reader moving a newer writer's record aside is the residual risk of an upgrade from that
// release (docs/node-plugin.md, "Checkpoint versions"); this reader never does.
func TestReleasedReaders(t *testing.T) {
	want := map[string]map[string]string{
		// record -> reader -> outcome; readers: the released ones, then "this".
		"bbd9ab1 (v1)":                  {"bbd9ab1": reads, "94642e0": reads, "e47d56b": reads, "83431c1": reads, "this": reads},
		"94642e0 (owner, identities)":   {"bbd9ab1": movesAside, "94642e0": reads, "e47d56b": reads, "83431c1": reads, "this": reads},
		"e47d56b (dynamic MIG)":         {"bbd9ab1": movesAside, "94642e0": movesAside, "e47d56b": reads, "83431c1": reads, "this": reads},
		"83431c1 (MPS share)":           {"bbd9ab1": movesAside, "94642e0": movesAside, "e47d56b": movesAside, "83431c1": reads, "this": reads},
		"this (exclusive, admin)":       {"bbd9ab1": movesAside, "94642e0": reads, "e47d56b": reads, "83431c1": reads, "this": reads},
		"this (dynamic MIG)":            {"bbd9ab1": movesAside, "94642e0": movesAside, "e47d56b": reads, "83431c1": reads, "this": reads},
		"this (MPS share)":              {"bbd9ab1": movesAside, "94642e0": movesAside, "e47d56b": movesAside, "83431c1": reads, "this": reads},
		"next version (v3, new fields)": {"bbd9ab1": movesAside, "94642e0": movesAside, "e47d56b": movesAside, "83431c1": movesAside, "this": holds},
	}
	for _, rec := range compatRecords(t) {
		for _, r := range releasedReaders {
			got := reads
			err := r.decode(rec.data)
			if err != nil {
				got = movesAside
			}
			if w := want[rec.name][r.commit]; got != w {
				t.Errorf("record written by %s, read by %s: %s (%v), want %s", rec.name, r.commit, got, err, w)
			}
		}
		got, detail := thisReader(t, rec.data)
		if w := want[rec.name]["this"]; got != w {
			t.Errorf("record written by %s, read by this plugin: %s (%s), want %s", rec.name, got, detail, w)
		}
	}
}

// thisReader is what this plugin's Store does with a record: it puts it in a directory of its
// own, loads it, and checks that the file is left as it was unless it was moved aside.
func thisReader(t *testing.T, data []byte) (outcome, detail string) {
	t.Helper()
	var id struct {
		Claim struct {
			UID string `json:"uid"`
		} `json:"claim"`
	}
	if err := json.Unmarshal(data, &id); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, thisBoot)
	path := filepath.Join(s.Dir(), id.Claim.UID+recordExt)
	writeFile(t, path, data)
	res := mustLoad(t, s)
	if len(res.Corrupt) > 0 {
		return movesAside, res.Corrupt[0].Err.Error()
	}
	after, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(after, data) {
		t.Errorf("the record was changed on disk by a Load (err %v)", err)
	}
	if len(res.Claims) != 1 || res.Claims[0].UID != id.Claim.UID {
		return "lost", "not among the claims loaded"
	}
	if f := res.Claims[0].Foreign; f != nil {
		return holds, f.Reason
	}
	return reads, ""
}
