package nvidia

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallHook(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1, v2 := write(HookName, "hook v1"), write(HookName, "hook v2")

	got1, err := InstallHook(v1, dir)
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(got1); string(data) != "hook v1" {
		t.Errorf("installed %q, want the source's content", data)
	}
	if st, _ := os.Stat(got1); st.Mode().Perm() != 0o755 {
		t.Errorf("installed with mode %v, want 0755 (the runtime executes it)", st.Mode().Perm())
	}
	if filepath.Base(got1) != HookName || filepath.Dir(filepath.Dir(got1)) != dir {
		t.Errorf("installed at %s, want %s/<hash>/%s", got1, dir, HookName)
	}
	// Installing the same hook again (a restart) changes nothing and names the same path.
	before, _ := os.Stat(got1)
	again, err := InstallHook(v1, dir)
	if err != nil || again != got1 {
		t.Fatalf("second install: %s, %v; want %s", again, err, got1)
	}
	if after, _ := os.Stat(got1); !os.SameFile(before, after) {
		t.Error("second install replaced the file")
	}
	// Another version (the other pod of a rolling update) gets a path of its own, and the first
	// one's stays for the specs that name it.
	got2, err := InstallHook(v2, dir)
	if err != nil || got2 == got1 {
		t.Fatalf("other version: %s, %v; want a path other than %s", got2, err, got1)
	}
	if data, _ := os.ReadFile(got1); string(data) != "hook v1" {
		t.Errorf("first version's hook now holds %q", data)
	}
	entries, _ := os.ReadDir(filepath.Dir(got1))
	if len(entries) != 1 {
		t.Errorf("temporary files left beside the hook: %v", entries)
	}
}

func TestInstallHookErrors(t *testing.T) {
	for name, src := range map[string]string{
		"missing":   filepath.Join(t.TempDir(), "nope"),
		"directory": t.TempDir(),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := InstallHook(src, dir)
			if err == nil || !strings.Contains(err.Error(), src) {
				t.Errorf("error %v, want one naming %s", err, src)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a failed install left %v", entries)
			}
		})
	}
}
