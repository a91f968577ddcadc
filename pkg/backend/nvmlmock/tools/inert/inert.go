// Package inert stands in for the driver tools that a mock GPU gives nothing to do
// (nvidia-debugdump, nvidia-persistenced): the NVIDIA toolkit mounts
// them into containers, so the mock's driver root has them, and each says that it is the mock's
// and fails, rather than pretend to have dumped, persisted or served anything.
package inert

import (
	"fmt"
	"io"
)

// Main runs the tool called name and returns its exit code: 0 for --help, which tells what it
// is, and 1 for anything else.
func Main(name string, args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintf(stdout, "%s of the accel-dra GPU mock: a mock GPU has nothing for it to do.\n", name)
		return 0
	}
	fmt.Fprintf(stderr, "%s (accel-dra mock): a mock GPU has nothing for %s to do\n", name, name)
	return 1
}
