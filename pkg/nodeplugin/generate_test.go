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

// TestGenerateNVIDIACompat: a seed of a node in NVIDIA's compatibility mode is what that node
// publishes: NVIDIA's driver name and NVIDIA's attributes beside accel-dra's. The flag is the
// release's GPU driver's mode: an NPU profile given it is unaffected, as the NPU plugin of
// such a release is.
func TestGenerateNVIDIACompat(t *testing.T) {
	for _, tc := range []struct {
		profile, driver string
		brand           bool
	}{
		{profile: "h100-8x-2numa", driver: "gpu.nvidia.com", brand: true},
		{profile: "mig-mixed", driver: "gpu.nvidia.com", brand: true},
		{profile: "ascend910b-8x", driver: NPUDriverName},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			var out bytes.Buffer
			if err := RunGenerate(context.Background(), []string{"--mock-profile=" + tc.profile, "--nvidia-compat"}, &out); err != nil {
				t.Fatal(err)
			}
			tmpl, err := template.DecodeDocument(out.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if len(tmpl.Drivers) != 1 || tmpl.Drivers[0].Name != tc.driver || len(tmpl.Drivers[0].Devices) == 0 {
				t.Fatalf("drivers %+v, want one of %s", tmpl.Drivers, tc.driver)
			}
			for _, d := range tmpl.Drivers[0].Devices {
				if _, ok := d.Attributes["brand"]; ok != tc.brand {
					t.Errorf("device %s: NVIDIA's attribute brand %v, want %v", d.Name, ok, tc.brand)
				}
			}
		})
	}
}
