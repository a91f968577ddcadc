package helm

import (
	"testing"

	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestMain runs the tests in a mount namespace of their own, where the driver root's mounts are
// made as the kubelet and the runtime make them (TestDriverRootFollowsTheHost).
func TestMain(m *testing.M) { standin.Main(m) }
