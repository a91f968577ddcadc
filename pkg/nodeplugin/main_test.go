package nodeplugin

import (
	"testing"

	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestMain runs the tests in a mount namespace of their own, where the driver root can be
// mounted and replaced as the GPU operator does (TestDriverWatchSeesARemountedRoot).
func TestMain(m *testing.M) { standin.Main(m) }
