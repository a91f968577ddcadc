package checkpoint

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/device"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

const (
	thisBoot  = "8a1c3f0e-5d2b-4c7a-9e61-0f2d3b4a5c6d"
	otherBoot = "11111111-2222-3333-4444-555555555555"
)

func testClaim(uid string) Claim {
	return Claim{
		UID:       uid,
		Namespace: "team-a",
		Name:      "train-" + uid[:4],
		State:     StatePrepareCompleted,
		Devices: []PreparedDevice{
			{Request: "gpu", Pool: "node-1", Device: "gpu-0", CDIDeviceIDs: []string{"accel-dra.io/gpu=" + uid + "-gpu-0"},
				UUID: "GPU-0a1b2c3d-0000-0000-0000-000000000000", Nodes: []device.Node{{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}}},
			{Request: "gpu", Pool: "node-1", Device: "gpu-1", CDIDeviceIDs: []string{"accel-dra.io/gpu=" + uid + "-gpu-1"},
				UUID: "GPU-0a1b2c3d-0000-0000-0000-000000000001", Nodes: []device.Node{{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1}}},
			{Request: "monitor", Pool: "node-1", Device: "gpu-1", CDIDeviceIDs: []string{"accel-dra.io/gpu=" + uid + "-gpu-1"},
				UUID: "GPU-0a1b2c3d-0000-0000-0000-000000000001", Nodes: []device.Node{{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1}}, AdminAccess: true},
		},
		Env: []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
	}
}

func uid(i int) string { return fmt.Sprintf("%08d-0000-4000-8000-000000000000", i) }

func openStore(t testing.TB, boot string) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "checkpoint"), boot)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustLoad(t *testing.T, s *Store) *LoadResult {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	res, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return res
}

func TestOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if _, err := Open(dir, thisBoot); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("dir mode = %v, want 0700", perm)
	}
	if _, err := Open(dir, ""); err == nil {
		t.Error("Open with empty boot ID: want error")
	}
}

func TestRoundTrip(t *testing.T) {
	s := openStore(t, thisBoot)
	want := []Claim{testClaim(uid(2)), testClaim(uid(1)), testClaim(uid(3))}
	want[1].State = StatePrepareStarted
	want[2].Devices, want[2].Env = nil, nil
	for _, c := range want {
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
	}
	// Overwrite one to check that Put replaces.
	want[0].State = StatePrepareStarted
	if err := s.Put(want[0]); err != nil {
		t.Fatal(err)
	}

	// A fresh store on the same directory, as after a restart.
	s2, err := Open(s.Dir(), thisBoot)
	if err != nil {
		t.Fatal(err)
	}
	res := mustLoad(t, s2)
	wantSorted := []Claim{want[1], want[0], want[2]}
	if diff := cmp.Diff(&LoadResult{Claims: wantSorted}, res); diff != "" {
		t.Errorf("Load() mismatch (-want +got):\n%s", diff)
	}

	fi, err := os.Stat(filepath.Join(s.Dir(), uid(1)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("record mode = %v, want 0600", perm)
	}
}

// TestGoldenRecord pins the on-disk format: a record written by this version must stay readable
// by later ones, so a change here is a format change and needs a new apiVersion.
func TestGoldenRecord(t *testing.T) {
	golden := filepath.Join("testdata", "record.golden.json")
	c := testClaim("0e5b6a3c-7f3e-4a59-9d0a-3b1c2d4e5f60")
	got, err := encodeRecord(thisBoot, &c)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("record encoding changed (-golden +got):\n%s", diff)
	}
	boot, dec, err := decodeRecord(want)
	if err != nil {
		t.Fatalf("golden record does not decode: %v", err)
	}
	if boot != thisBoot {
		t.Errorf("boot ID = %q, want %q", boot, thisBoot)
	}
	if diff := cmp.Diff(c, dec); diff != "" {
		t.Errorf("decoded golden claim mismatch (-want +got):\n%s", diff)
	}
}

// TestReadsV1Records: records of the previous format stay readable, with no identity, which the
// driver then fills in from the inventory. An intact v1 record carrying v2 fields was written by
// a plugin that broke the versioning rules: it is held, not owned; edited, it is damage.
func TestReadsV1Records(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "record-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	boot, c, err := decodeRecord(data)
	if err != nil {
		t.Fatalf("v1 record does not decode: %v", err)
	}
	want := Claim{
		UID: "0e5b6a3c-7f3e-4a59-9d0a-3b1c2d4e5f60", Namespace: "team-a", Name: "train-0e5b", State: StatePrepareCompleted,
		Devices: []PreparedDevice{
			{Request: "gpu", Pool: "node-1", Device: "gpu-0", CDIDeviceIDs: []string{"accel-dra.io/gpu=0e5b6a3c-7f3e-4a59-9d0a-3b1c2d4e5f60-gpu-0"}},
			{Request: "gpu", Pool: "node-1", Device: "gpu-1", CDIDeviceIDs: []string{"accel-dra.io/gpu=0e5b6a3c-7f3e-4a59-9d0a-3b1c2d4e5f60-gpu-1"}},
		},
		Env: []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
	}
	if boot != thisBoot {
		t.Errorf("boot = %q", boot)
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("v1 claim (-want +got):\n%s", diff)
	}

	// The same claim with a UUID, checksummed correctly but labelled v1.
	c.Devices[0].UUID = "GPU-x"
	v2, err := encodeRecord(thisBoot, &c)
	if err != nil {
		t.Fatal(err)
	}
	mixed := bytes.Replace(v2, []byte(APIVersion), []byte(APIVersionV1), 1)
	if _, held, err := decodeRecord(mixed); err != nil || held.Foreign == nil || !strings.Contains(held.Foreign.Reason, "has fields of") {
		t.Errorf("v1 record with v2 fields: %+v, %v; want it held for having fields of v2", held.Foreign, err)
	}
	edited := bytes.Replace(mixed, []byte("GPU-x"), []byte("GPU-y"), 1)
	if _, _, err := decodeRecord(edited); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("edited v1 record with v2 fields: err = %v", err)
	}
}

// TestLoadBadRecords covers every way a record can be untrustworthy. Each must be moved aside,
// reported with a telling error, and must not stop the good record next to it from loading.
func TestLoadBadRecords(t *testing.T) {
	good := testClaim(uid(1))
	goodData, err := encodeRecord(thisBoot, &good)
	if err != nil {
		t.Fatal(err)
	}
	badUID := uid(9)
	bad := testClaim(badUID)
	badData, err := encodeRecord(thisBoot, &bad)
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		// write creates the bad record at path.
		write   func(t *testing.T, path string)
		wantErr string
	}{
		"checksum mismatch": {
			write: func(t *testing.T, path string) {
				writeFile(t, path, bytes.Replace(badData, []byte(`"name":"train-0000"`), []byte(`"name":"train-evil"`), 1))
			},
			wantErr: "checksum mismatch",
		},
		"boot ID edited": {
			write: func(t *testing.T, path string) {
				writeFile(t, path, bytes.Replace(badData, []byte(thisBoot), []byte(otherBoot), 1))
			},
			wantErr: "checksum mismatch",
		},
		"bad checksum format": {
			write: func(t *testing.T, path string) {
				writeFile(t, path, bytes.Replace(badData, []byte(`"sha256:`), []byte(`"md5:`), 1))
			},
			wantErr: "is not sha256:<hex>",
		},
		"truncated": {
			write:   func(t *testing.T, path string) { writeFile(t, path, badData[:len(badData)/2]) },
			wantErr: "unexpected end of JSON input",
		},
		"empty file": {
			write:   func(t *testing.T, path string) { writeFile(t, path, nil) },
			wantErr: "not a checkpoint record",
		},
		// Intact records of an unknown apiVersion or kind are kept (TestLoadKeepsIntactRecordsItCannotRead);
		// edited ones are damage.
		"unknown apiVersion, edited": {
			write: func(t *testing.T, path string) {
				data := bytes.Replace(badData, []byte(APIVersion), []byte("checkpoint.accel-dra.io/v3"), 1)
				writeFile(t, path, bytes.Replace(data, []byte(`"name":"train-0000"`), []byte(`"name":"train-evil"`), 1))
			},
			wantErr: `unsupported apiVersion "checkpoint.accel-dra.io/v3" (newer than this plugin), want "checkpoint.accel-dra.io/v2" (or "checkpoint.accel-dra.io/v1"), and the record is not intact: checksum mismatch`,
		},
		"missing apiVersion": {
			write:   func(t *testing.T, path string) { writeFile(t, path, []byte(`{"kind":"PreparedClaim"}`)) },
			wantErr: `unsupported apiVersion ""`,
		},
		"unknown kind, edited": {
			write: func(t *testing.T, path string) {
				data := bytes.Replace(badData, []byte(`"PreparedClaim"`), []byte(`"Claim"`), 1)
				writeFile(t, path, bytes.Replace(data, []byte(`"name":"train-0000"`), []byte(`"name":"train-evil"`), 1))
			},
			wantErr: `unsupported kind "Claim"`,
		},
		"unknown field": {
			write: func(t *testing.T, path string) {
				writeFile(t, path, bytes.Replace(badData, []byte(`"state":`), []byte(`"extra":1,"state":`), 1))
			},
			wantErr: `unknown field "extra"`,
		},
		"trailing garbage": {
			write:   func(t *testing.T, path string) { writeFile(t, path, append(bytes.Clone(badData), "xyz"...)) },
			wantErr: "after top-level value",
		},
		"no claim": {
			write: func(t *testing.T, path string) {
				writeFile(t, path, []byte(`{"apiVersion":"`+APIVersion+`","kind":"PreparedClaim","bootID":"x","checksum":"sha256:00"}`))
			},
			wantErr: "record has no claim",
		},
		"stored under another name": {
			write: func(t *testing.T, path string) {
				other := testClaim(uid(8))
				data, err := encodeRecord(thisBoot, &other)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, path, data)
			},
			wantErr: "record of claim " + uid(8) + " stored under name " + badUID,
		},
		"unreadable (a directory)": {
			write: func(t *testing.T, path string) {
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "is a directory",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, thisBoot)
			writeFile(t, filepath.Join(s.Dir(), good.UID+".json"), goodData)
			badPath := filepath.Join(s.Dir(), badUID+".json")
			tc.write(t, badPath)

			res := mustLoad(t, s)
			if diff := cmp.Diff([]Claim{good}, res.Claims); diff != "" {
				t.Errorf("good claim not loaded (-want +got):\n%s", diff)
			}
			if len(res.Stale) != 0 {
				t.Errorf("Stale = %v, want none", res.Stale)
			}
			if len(res.Corrupt) != 1 {
				t.Fatalf("Corrupt = %+v, want 1 entry", res.Corrupt)
			}
			cr := res.Corrupt[0]
			if cr.Path != badPath {
				t.Errorf("Corrupt.Path = %q, want %q", cr.Path, badPath)
			}
			if cr.Err == nil || !strings.Contains(cr.Err.Error(), tc.wantErr) {
				t.Errorf("Corrupt.Err = %v, want it to contain %q", cr.Err, tc.wantErr)
			}
			wantPrefix := filepath.Join(s.Dir(), CorruptDir, badUID+".json.")
			if !strings.HasPrefix(cr.MovedTo, wantPrefix) {
				t.Errorf("Corrupt.MovedTo = %q, want prefix %q", cr.MovedTo, wantPrefix)
			}
			if _, err := os.Lstat(cr.MovedTo); err != nil {
				t.Errorf("moved record missing: %v", err)
			}
			if _, err := os.Lstat(badPath); !os.IsNotExist(err) {
				t.Errorf("bad record still in place (err=%v)", err)
			}

			// Moved aside means gone for good: a second Load is clean.
			res = mustLoad(t, s)
			if len(res.Corrupt) != 0 || len(res.Claims) != 1 {
				t.Errorf("second Load = %+v, want only the good claim", res)
			}
		})
	}
}

func TestLoadStale(t *testing.T) {
	old := openStore(t, otherBoot)
	for _, i := range []int{3, 1} {
		if err := old.Put(testClaim(uid(i))); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(old.Dir(), thisBoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(testClaim(uid(2))); err != nil {
		t.Fatal(err)
	}
	res := mustLoad(t, s)
	want := &LoadResult{
		Claims: []Claim{testClaim(uid(2))},
		Stale:  []Claim{testClaim(uid(1)), testClaim(uid(3))},
	}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("Load() mismatch (-want +got):\n%s", diff)
	}
	// The caller's clean slate.
	for _, c := range res.Stale {
		if err := s.Delete(c.UID); err != nil {
			t.Fatal(err)
		}
	}
	res = mustLoad(t, s)
	if len(res.Stale) != 0 || len(res.Claims) != 1 {
		t.Errorf("after deleting stale: %+v", res)
	}
}

func TestLoadRemovesTempFiles(t *testing.T) {
	s := openStore(t, thisBoot)
	c := testClaim(uid(1))
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	// What a crash between CreateTemp and rename leaves behind, including a half-written one.
	writeFile(t, filepath.Join(s.Dir(), "."+uid(1)+".json.123456.tmp"), []byte(`{"apiVer`))
	writeFile(t, filepath.Join(s.Dir(), "."+uid(2)+".json.987654.tmp"), nil)
	// Files that are not ours stay.
	writeFile(t, filepath.Join(s.Dir(), "README"), []byte("hello"))

	res := mustLoad(t, s)
	if diff := cmp.Diff(&LoadResult{Claims: []Claim{c}}, res); diff != "" {
		t.Errorf("Load() mismatch (-want +got):\n%s", diff)
	}
	names := dirNames(t, s.Dir())
	if diff := cmp.Diff([]string{uid(1) + ".json", "README"}, names); diff != "" {
		t.Errorf("directory after Load (-want +got):\n%s", diff)
	}
}

func TestDelete(t *testing.T) {
	s := openStore(t, thisBoot)
	if err := s.Delete(uid(42)); err != nil {
		t.Errorf("Delete of unknown UID: %v, want nil", err)
	}
	if err := s.Put(testClaim(uid(1))); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := s.Delete(uid(1)); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if res := mustLoad(t, s); len(res.Claims) != 0 {
		t.Errorf("claims after Delete: %v", res.Claims)
	}
	for _, bad := range []string{"", "../x", "a/b", ".hidden"} {
		if err := s.Delete(bad); err == nil {
			t.Errorf("Delete(%q): want error", bad)
		}
	}
}

func TestPutInvalid(t *testing.T) {
	tests := map[string]func(c *Claim){
		"empty UID":      func(c *Claim) { c.UID = "" },
		"UID with slash": func(c *Claim) { c.UID = "../../etc/passwd" },
		"UID with dot":   func(c *Claim) { c.UID = ".x" },
		"UID too long":   func(c *Claim) { c.UID = strings.Repeat("a", 129) },
		"unknown state":  func(c *Claim) { c.State = "Prepared" },
		"empty state":    func(c *Claim) { c.State = "" },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, thisBoot)
			c := testClaim(uid(1))
			mutate(&c)
			if err := s.Put(c); err == nil {
				t.Fatal("Put: want error")
			}
			if names := dirNames(t, s.Dir()); len(names) != 0 {
				t.Errorf("Put wrote %v", names)
			}
		})
	}
}

func TestConcurrentPuts(t *testing.T) {
	s := openStore(t, thisBoot)
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := testClaim(uid(i))
			c.State = StatePrepareStarted
			if err := s.Put(c); err != nil {
				errs <- err
				return
			}
			c.State = StatePrepareCompleted
			errs <- s.Put(c)
			if i%4 == 0 {
				errs <- s.Delete(c.UID)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	res := mustLoad(t, s)
	var want []Claim
	for i := 0; i < n; i++ {
		if i%4 != 0 {
			want = append(want, testClaim(uid(i)))
		}
	}
	if diff := cmp.Diff(&LoadResult{Claims: want}, res, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Load() mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadCanceled(t *testing.T) {
	s := openStore(t, thisBoot)
	if err := s.Put(testClaim(uid(1))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Load(ctx); err == nil {
		t.Error("Load with canceled context: want error")
	}
}

// BenchmarkPut shows that the cost of a Put does not depend on how many claims are prepared.
func BenchmarkPut(b *testing.B) {
	for _, existing := range []int{10, 1000} {
		// Filled once, outside b.Run, whose body runs again for every b.N it tries.
		s := openStore(b, thisBoot)
		for i := 0; i < existing; i++ {
			if err := s.Put(testClaim(uid(i))); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("existing=%d", existing), func(b *testing.B) {
			c := testClaim(uid(existing))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Put(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() == LockFile { // made by Open, not by the call under test
			continue
		}
		names = append(names, e.Name())
	}
	return names
}
