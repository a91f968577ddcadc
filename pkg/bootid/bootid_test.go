package bootid

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRead(t *testing.T) {
	tests := map[string]struct {
		content *string // nil: file does not exist
		want    string
		wantErr bool
	}{
		"kernel format": {content: ptr("0e5b6a3c-7f3e-4a59-9d0a-3b1c2d4e5f60\n"), want: "0e5b6a3c-7f3e-4a59-9d0a-3b1c2d4e5f60"},
		"no newline":    {content: ptr("abc"), want: "abc"},
		"padded":        {content: ptr("  abc \t\n\n"), want: "abc"},
		"empty":         {content: ptr(""), wantErr: true},
		"only newline":  {content: ptr("\n"), wantErr: true},
		"missing":       {wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "boot_id")
			if tc.content != nil {
				if err := os.WriteFile(path, []byte(*tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Read(path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Read() error = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("Read() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReadDefaultPath(t *testing.T) {
	if _, err := os.Stat(DefaultPath); err != nil {
		t.Skipf("no %s on this host: %v", DefaultPath, err)
	}
	id, err := Read(DefaultPath)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Read(DefaultPath)
	if err != nil {
		t.Fatal(err)
	}
	if id != again {
		t.Errorf("boot ID changed between reads: %q then %q", id, again)
	}
}

func ptr(s string) *string { return &s }
