package sharing

import (
	"os"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestMain makes the test binary the MPS shim too (MPS.Shim defaults to the running binary),
// and runs the tests in a mount namespace of their own.
func TestMain(m *testing.M) {
	RunShim(os.Args)
	standin.Main(m)
}
