package template_test

import (
	"testing"

	"github.com/accel-dra/accel-dra/api/template"
	"github.com/accel-dra/accel-dra/api/template/templatetest"
)

// TestDecode runs the documents every reader must treat alike (templatetest.Cases); pkg/template
// runs the same table through the writer's Decode.
func TestDecode(t *testing.T) {
	templatetest.RunDecode(t, template.Decode)
}
