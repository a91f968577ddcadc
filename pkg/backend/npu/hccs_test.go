package npu

import (
	"testing"
)

func TestHCCSTopology(t *testing.T) {
	p910, p910B, p310P, p910C := products[0xd801], products[0xd802], products[0xd500], products[0xd803]
	for _, tc := range []struct {
		name    string
		product Product
		udevid  int
		want    string
	}{
		{"910 first ring", p910, 0, "ring-0"},
		{"910 first ring, last", p910, 3, "ring-0"},
		{"910 second ring", p910, 4, "ring-1"},
		{"910 second ring, last", p910, 7, "ring-1"},
		{"910B module", p910B, 7, "mesh-0"},
		{"910B second module", p910B, 8, "mesh-1"},
		{"udevid unknown", p910, -1, ""},
		{"310P has no HCCS", p310P, 0, ""},
		{"910C not modelled", p910C, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if tp := hccsTopology(tc.product, tc.udevid); tp != nil {
				got = tp.HCCS
				if tp.Links != 0 || tp.Island != "" {
					t.Errorf("NVLink fields on an NPU: %+v", tp)
				}
			}
			if got != tc.want {
				t.Errorf("HCCS %q, want %q", got, tc.want)
			}
		})
	}
}
