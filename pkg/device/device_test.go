package device

import "testing"

// TestNodeSame: a node is the same device special file whatever mode, group and host path it
// is created with (records hold none of them; the host path follows the driver's layout), and
// another one when its path or numbers differ.
func TestNodeSame(t *testing.T) {
	base := Node{Path: "/dev/davinci0", Type: "c", Major: 236, Minor: 0}
	tests := map[string]struct {
		change func(*Node)
		same   bool
	}{
		"identical":      {change: func(*Node) {}, same: true},
		"mode":           {change: func(n *Node) { n.FileMode = 0o660 }, same: true},
		"group":          {change: func(n *Node) { n.GID = 1000 }, same: true},
		"host path":      {change: func(n *Node) { n.HostPath = "/run/nvidia/driver/dev/davinci0" }, same: true},
		"path":           {change: func(n *Node) { n.Path = "/dev/davinci1" }, same: false},
		"minor":          {change: func(n *Node) { n.Minor = 1 }, same: false},
		"major":          {change: func(n *Node) { n.Major = 237 }, same: false},
		"type":           {change: func(n *Node) { n.Type = "b" }, same: false},
		"group and path": {change: func(n *Node) { n.GID, n.Path = 1000, "/dev/davinci1" }, same: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := base
			tc.change(&o)
			if got := base.Same(o); got != tc.same {
				t.Errorf("Same(%+v, %+v) = %v, want %v", base, o, got, tc.same)
			}
			if got := o.Same(base); got != tc.same {
				t.Errorf("Same is not symmetric for %+v", o)
			}
		})
	}
}
