package nodeplugin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/template"
)

func TestRunGenerate(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no profile":      {nil, "--mock-profile is required"},
		"unknown profile": {[]string{"--mock-profile=h200-9x"}, `unknown NVML mock profile "h200-9x"`},
		"real backend":    {[]string{"--mock-profile=h100-8x-2numa", "--backend=nvml"}, "needs a mock backend"},
		"npu dynamic MIG": {[]string{"--mock-profile=ascend910b-8x", "--dynamic-mig"}, "cannot create MIG instances"},
		"argument":        {[]string{"--mock-profile=h100-8x-2numa", "extra"}, "takes no arguments"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := RunGenerate(context.Background(), tc.args, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if out.Len() > 0 {
				t.Errorf("wrote %q on error", out.String())
			}
		})
	}

	// The NPU profile picks its backend and driver name.
	var out bytes.Buffer
	if err := RunGenerate(context.Background(), []string{"--mock-profile=ascend310p-2x"}, &out); err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.DecodeDocument(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpl.Drivers) != 1 || tmpl.Drivers[0].Name != NPUDriverName || len(tmpl.Drivers[0].Devices) != 2 {
		t.Errorf("template of ascend310p-2x: %+v", tmpl.Drivers)
	}

	// --output writes the same document to a file (the chart's init container has no shell).
	file := filepath.Join(t.TempDir(), "seed.json")
	var none bytes.Buffer
	if err := RunGenerate(context.Background(), []string{"--mock-profile=ascend310p-2x", "--output=" + file}, &none); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, out.Bytes()) || none.Len() > 0 {
		t.Errorf("--output wrote %q (%v) and %q to standard output, want %q and nothing", got, err, none.String(), out.String())
	}
}
