package stableid

import (
	"regexp"
	"testing"
)

func TestUUID(t *testing.T) {
	format := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	a := UUID("GPU", "node-a", "a100-8x", "0")
	if !format.MatchString(a) {
		t.Errorf("UUID = %q, not in GPU-8-4-4-4-12 format", a)
	}
	if b := UUID("GPU", "node-a", "a100-8x", "0"); b != a {
		t.Errorf("same parts gave %q then %q", a, b)
	}
	for _, other := range [][]string{
		{"node-b", "a100-8x", "0"},
		{"node-a", "a100-8x", "1"},
		{"node-a", "h100-8x-2numa", "0"},
	} {
		if got := UUID("GPU", other...); got == a {
			t.Errorf("UUID(%q) = UUID(node-a, a100-8x, 0) = %q", other, got)
		}
	}
}
