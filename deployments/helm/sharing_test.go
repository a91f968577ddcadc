package helm

import (
	"testing"

	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
)

// TestSharingValues: the chart's sharing values reach the plugin as its flags.
func TestSharingValues(t *testing.T) {
	for _, on := range []bool{true, false} {
		args, err := PluginArgs(map[string]any{"plugin": map[string]any{"sharing": map[string]any{"consumableMemory": on}}}, "gpu.accel-dra.io", nil)
		if err != nil {
			t.Fatal(err)
		}
		o := nodeplugin.NewOptions()
		if err := o.NewFlagSet().Parse(args); err != nil {
			t.Fatal(err)
		}
		if o.ConsumableMemory != on {
			t.Errorf("sharing.consumableMemory %v: plugin option %v (args %q)", on, o.ConsumableMemory, args)
		}
	}
	args, err := PluginArgs(map[string]any{"plugin": map[string]any{"sharing": map[string]any{"nvidiaSMIPath": "/opt/nvidia/bin/nvidia-smi", "nvidiaMPSControlPath": "/opt/nvidia/bin/nvidia-cuda-mps-control"}}}, "gpu.accel-dra.io", nil)
	if err != nil {
		t.Fatal(err)
	}
	o := nodeplugin.NewOptions()
	if err := o.NewFlagSet().Parse(args); err != nil {
		t.Fatal(err)
	}
	if o.NVIDIASMIPath != "/opt/nvidia/bin/nvidia-smi" || o.NVIDIAMPSControlPath != "/opt/nvidia/bin/nvidia-cuda-mps-control" {
		t.Errorf("sharing paths: plugin options %q %q (args %q)", o.NVIDIASMIPath, o.NVIDIAMPSControlPath, args)
	}
	if _, err := PluginArgs(map[string]any{"plugin": map[string]any{"sharing": map[string]any{"consumableMemory": "yes"}}}, "gpu.accel-dra.io", nil); err == nil {
		t.Error("a non-boolean sharing.consumableMemory passed the schema")
	}
}
