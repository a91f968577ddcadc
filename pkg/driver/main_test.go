package driver

import (
	"os"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestMain makes the test binary an MPS daemon's runner too (sharing.Processes.Self defaults to
// the running binary), and runs the tests in a mount namespace of their own, where the MPS tests
// mount their claims' /dev/shm.
func TestMain(m *testing.M) {
	sharing.RunDaemonCommand(os.Args)
	standin.Main(m)
}
