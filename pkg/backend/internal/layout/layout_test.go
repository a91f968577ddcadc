package layout

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSpread(t *testing.T) {
	got, err := Spread(4, 2, 2, "perRoot")
	if err != nil {
		t.Fatal(err)
	}
	want := []Slot{
		{BusID: "0000:11:00.0", Root: "pci0000:10", Bridge: "0000:10:01.0", NUMA: 0},
		{BusID: "0000:12:00.0", Root: "pci0000:10", Bridge: "0000:10:02.0", NUMA: 0},
		{BusID: "0000:21:00.0", Root: "pci0000:20", Bridge: "0000:20:01.0", NUMA: 1},
		{BusID: "0000:22:00.0", Root: "pci0000:20", Bridge: "0000:20:02.0", NUMA: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Spread(4, 2, 2) (-want +got):\n%s", diff)
	}
	if got, _ := Spread(2, -1, 0, "perRoot"); got[0].NUMA != -1 || got[0].Root == got[1].Root {
		t.Errorf("no NUMA, one per root: %+v", got)
	}
	for _, tc := range []struct {
		count, numa, perRoot int
		want                 string
	}{
		{0, 0, 0, "count 0"}, {65, 0, 0, "count 65"}, {2, 3, 0, "numaNodes 3"}, {2, -2, 0, "numaNodes -2"},
		{2, 0, 3, "perRoot 3"}, {64, 0, 1, "too many PCIe root complexes"},
	} {
		if _, err := Spread(tc.count, tc.numa, tc.perRoot, "perRoot"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Spread(%d, %d, %d): error %v, want %q", tc.count, tc.numa, tc.perRoot, err, tc.want)
		}
	}
}
