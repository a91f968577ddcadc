package nodeplugin

import (
	"strings"
	"testing"
)

// TestMIGProfilesFlag: --mig-profiles takes "all" or NVIDIA profile names, and only with
// --dynamic-mig (static MIG publishes the MIG devices that exist, whatever their profile).
func TestMIGProfilesFlag(t *testing.T) {
	for name, tc := range map[string]struct {
		args    []string
		want    []string
		wantErr string
	}{
		"default":         {args: []string{"--dynamic-mig"}, want: []string{"all"}},
		"default static":  {args: nil, want: []string{"all"}},
		"names":           {args: []string{"--dynamic-mig", "--mig-profiles=1g.10gb,3g.40gb"}, want: []string{"1g.10gb", "3g.40gb"}},
		"all":             {args: []string{"--dynamic-mig", "--mig-profiles=all"}, want: []string{"all"}},
		"unknown profile": {args: []string{"--dynamic-mig", "--mig-profiles=1g.10gb,1g10gb"}, wantErr: `--mig-profiles: "1g10gb" is not a MIG profile name`},
		"empty":           {args: []string{"--dynamic-mig", "--mig-profiles="}, wantErr: "--mig-profiles: no MIG profile given"},
		"without dynamic": {args: []string{"--mig-profiles=1g.10gb"}, wantErr: "--mig-profiles is for --dynamic-mig"},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			if err := o.NewFlagSet().Parse(append([]string{"--node-name=node-a"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			err := o.Complete()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Complete() = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(o.MIGProfiles, ",") != strings.Join(tc.want, ",") {
				t.Errorf("MIGProfiles = %q, want %q", o.MIGProfiles, tc.want)
			}
		})
	}
}
