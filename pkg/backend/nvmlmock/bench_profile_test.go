package nvmlmock

import (
	"context"
	"strings"
	"testing"
)

func TestBenchProfile(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		err  bool
	}{
		{"bench-1", 1, false}, {"bench-1024", 1024, false}, {"bench-0", 0, true}, {"bench-4097", 0, true}, {"bench-01", 0, true}, {"bench-x", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.name, "node-a")
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), "bench-<N>") {
					t.Fatalf("New(%s) error %v, want unknown-profile error", tc.name, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			inv, err := b.Enumerate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Devices) != tc.n {
				t.Fatalf("%d devices, want %d", len(inv.Devices), tc.n)
			}
			seen := map[string]bool{}
			for _, d := range inv.Devices {
				if seen[d.PCIBusID] || seen[d.UUID] {
					t.Fatalf("duplicate bus ID or UUID on %s", d.Name)
				}
				seen[d.PCIBusID], seen[d.UUID] = true, true
				if d.PCIeRoot == "" || d.NUMANode == nil {
					t.Fatalf("%s lacks topology: %+v", d.Name, d)
				}
			}
			for _, p := range Profiles() {
				if strings.HasPrefix(p, "bench-") {
					t.Fatalf("synthetic profile %s listed among real ones", p)
				}
			}
		})
	}
}
