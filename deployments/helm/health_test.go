package helm

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
)

// TestHealthValues: the chart's health values become the plugin's flags, which the plugin
// accepts (Complete checks the effects).
func TestHealthValues(t *testing.T) {
	tests := map[string]struct {
		health      map[string]any
		wantEnabled bool
		wantXIDs    []uint
		wantEffects map[string]string
	}{
		"defaults": {wantEnabled: true, wantXIDs: []uint{13, 31, 43, 45, 68, 109}, wantEffects: map[string]string{}},
		"disabled": {health: map[string]any{"enabled": false}, wantEnabled: false, wantXIDs: []uint{13, 31, 43, 45, 68, 109}, wantEffects: map[string]string{}},
		"configured": {health: map[string]any{"ignoredXIDs": []any{13, 109}, "taintEffects": map[string]any{"lost": "NoExecute", "xid": "None"}},
			wantEnabled: true, wantXIDs: []uint{13, 109}, wantEffects: map[string]string{"lost": "NoExecute", "xid": "None"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var values map[string]any
			if tc.health != nil {
				values = map[string]any{"plugin": map[string]any{"health": tc.health}}
			}
			args, err := pluginArgs(values, "gpu.accel-dra.io", map[string]string{"node-name": "n1"})
			if err != nil {
				t.Fatal(err)
			}
			o := nodeplugin.NewOptions()
			if err := o.NewFlagSet().Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := o.Complete(); err != nil {
				t.Fatalf("args %q: %v", args, err)
			}
			if o.DeviceHealth != tc.wantEnabled {
				t.Errorf("device health %v, want %v (args %q)", o.DeviceHealth, tc.wantEnabled, args)
			}
			if diff := cmp.Diff(tc.wantXIDs, o.IgnoredXIDs); diff != "" {
				t.Errorf("ignored XIDs (-want +got):\n%s", diff)
			}
			got := o.DeviceTaintEffects
			if got == nil {
				got = map[string]string{}
			}
			if diff := cmp.Diff(tc.wantEffects, got); diff != "" {
				t.Errorf("taint effects (-want +got):\n%s", diff)
			}
		})
	}
	for _, on := range []bool{true, false} {
		args, err := pluginArgs(map[string]any{"plugin": map[string]any{"deviceMetadata": on}}, "gpu.accel-dra.io", nil)
		if err != nil {
			t.Fatal(err)
		}
		o := nodeplugin.NewOptions()
		if err := o.NewFlagSet().Parse(args); err != nil {
			t.Fatal(err)
		}
		if o.DeviceMetadata != on {
			t.Errorf("deviceMetadata %v: plugin option %v (args %q)", on, o.DeviceMetadata, args)
		}
	}
	for name, h := range map[string]map[string]any{
		"unknown cause": {"taintEffects": map[string]any{"melted": "NoSchedule"}},
		"bad effect":    {"taintEffects": map[string]any{"lost": "Evict"}},
		"negative xid":  {"ignoredXIDs": []any{-1}},
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			if _, err := render(Options{Values: map[string]any{"plugin": map[string]any{"health": h}}}); err == nil {
				t.Errorf("health values %v rendered, want a schema error", h)
			}
		})
	}
}
