package sharing

import (
	"os"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestMain makes the test binary an MPS daemon's runner too (Processes.Self defaults to the
// running binary), and runs the tests in a mount namespace of their own.
func TestMain(m *testing.M) {
	RunDaemonCommand(os.Args)
	standin.Main(m)
}
