package capfilter

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// full is a bounding set with every capability of the table.
func full() Set {
	var s Set
	for _, n := range names {
		s |= 1 << n
	}
	return s
}

func TestFilter(t *testing.T) {
	noResource := full() &^ (1 << unix.CAP_SYS_RESOURCE)
	tests := []struct {
		name    string
		set     Set
		in      []any
		want    []any
		changed bool
	}{
		{"full set keeps all", full(), []any{"CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"}, []any{"CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"}, false},
		{"missing one is cut", noResource, []any{"CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_MKNOD"}, []any{"CAP_SYS_ADMIN", "CAP_MKNOD"}, true},
		{"unknown names stay", noResource, []any{"CAP_FROM_THE_FUTURE"}, []any{"CAP_FROM_THE_FUTURE"}, false},
		{"default set untouched", noResource, []any{"CAP_CHOWN", "CAP_KILL"}, []any{"CAP_CHOWN", "CAP_KILL"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := map[string]any{"capabilities": map[string]any{"bounding": tt.in, "effective": tt.in}}
			if got := Filter(p, tt.set); got != tt.changed {
				t.Errorf("changed = %v, want %v", got, tt.changed)
			}
			caps := p["capabilities"].(map[string]any)
			for _, k := range []string{"bounding", "effective"} {
				if !reflect.DeepEqual(caps[k], tt.want) {
					t.Errorf("%s = %v, want %v", k, caps[k], tt.want)
				}
			}
		})
	}
}

func TestSubcommandAndFlags(t *testing.T) {
	args := []string{"--root", "/run/runc", "--log", "/x/log.json", "--log-format", "json", "--systemd-cgroup", "create", "--bundle", "/b", "--pid-file", "/p", "id"}
	cmd, rest := subcommand(args)
	if cmd != "create" || flagValue(rest, "bundle", "b") != "/b" {
		t.Fatalf("subcommand = %q, bundle %q", cmd, flagValue(rest, "bundle", "b"))
	}
	if v := flagValue([]string{"--process=/p.json", "id"}, "process", "p"); v != "/p.json" {
		t.Errorf("--process= form: %q", v)
	}
	if v := flagValue([]string{"-p", "/q.json", "id"}, "process", "p"); v != "/q.json" {
		t.Errorf("-p form: %q", v)
	}
}

// TestRewriteKeepsUnknownFields checks that the config keeps what the filter does not know
// about (fields newer than any runtime-spec type) and loses only the capabilities this
// process cannot grant.
func TestRewriteKeepsUnknownFields(t *testing.T) {
	dir := t.TempDir()
	cfg := map[string]any{
		"ociVersion": "1.9.9",
		"process": map[string]any{
			"args":         []any{"sh"},
			"capabilities": map[string]any{"bounding": []any{"CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"}},
			"newField":     "kept",
		},
		"futureTopLevel": map[string]any{"a": 1.0},
	}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	set := full() &^ (1 << unix.CAP_SYS_RESOURCE)
	if err := rewriteFile(filepath.Join(dir, "config.json"), true, set); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	p := got["process"].(map[string]any)
	if p["newField"] != "kept" || got["futureTopLevel"] == nil || got["ociVersion"] != "1.9.9" {
		t.Errorf("unknown fields lost: %s", out)
	}
	if b := p["capabilities"].(map[string]any)["bounding"]; !reflect.DeepEqual(b, []any{"CAP_SYS_ADMIN"}) {
		t.Errorf("bounding = %v", b)
	}
	st, _ := os.Stat(filepath.Join(dir, "config.json"))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
}

func TestMissing(t *testing.T) {
	if m := full().Missing(); len(m) != 0 {
		t.Errorf("full set misses %v", m)
	}
	if m := (full() &^ (1 << unix.CAP_SYS_RESOURCE)).Missing(); !reflect.DeepEqual(m, []string{"CAP_SYS_RESOURCE"}) {
		t.Errorf("Missing = %v", m)
	}
}
