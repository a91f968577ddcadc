// Package bootid reads the kernel's boot ID, a random UUID generated at every boot. The plugin
// stores it with its checkpoint so that state written before a reboot (when every container and
// every CDI spec on tmpfs is gone) is recognised and discarded instead of trusted.
package bootid

import (
	"fmt"
	"os"
	"strings"
)

// DefaultPath is where Linux exposes the boot ID.
const DefaultPath = "/proc/sys/kernel/random/boot_id"

// Read returns the boot ID stored at path (DefaultPath on a real node; tests pass a file of their
// own). Surrounding white space is removed; an empty ID is an error because comparing against ""
// would make every boot look like the same boot.
func Read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading boot ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("reading boot ID: %s is empty", path)
	}
	return id, nil
}
