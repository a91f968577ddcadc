package nvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestNormalizePCIBusID(t *testing.T) {
	tests := map[string]struct {
		in, want string
		wantErr  bool
	}{
		"nvml 8-digit domain":   {in: "00000000:17:00.0", want: "0000:17:00.0"},
		"upper case":            {in: "00000000:1B:00.0", want: "0000:1b:00.0"},
		"non-zero domain":       {in: "00000001:00:04.0", want: "0001:00:04.0"},
		"already 4-digit":       {in: "0000:c3:00.0", want: "0000:c3:00.0"},
		"vmd domain":            {in: "00010000:01:00.0", want: "10000:01:00.0"},
		"trailing space":        {in: "00000000:17:00.0 ", want: "0000:17:00.0"},
		"function 7":            {in: "00000000:17:1f.7", want: "0000:17:1f.7"},
		"empty":                 {in: "", wantErr: true},
		"no domain":             {in: "17:00.0", wantErr: true},
		"device out of range":   {in: "00000000:17:20.0", wantErr: true},
		"function out of range": {in: "00000000:17:00.8", wantErr: true},
		"domain too long":       {in: "000000000:17:00.0", wantErr: true},
		"not hex":               {in: "0000000g:17:00.0", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := NormalizePCIBusID(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("NormalizePCIBusID(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("NormalizePCIBusID(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestArchitectureName(t *testing.T) {
	tests := map[nvml.DeviceArchitecture]string{
		nvml.DEVICE_ARCH_KEPLER:    "Kepler",
		nvml.DEVICE_ARCH_MAXWELL:   "Maxwell",
		nvml.DEVICE_ARCH_PASCAL:    "Pascal",
		nvml.DEVICE_ARCH_VOLTA:     "Volta",
		nvml.DEVICE_ARCH_TURING:    "Turing",
		nvml.DEVICE_ARCH_AMPERE:    "Ampere",
		nvml.DEVICE_ARCH_ADA:       "Ada",
		nvml.DEVICE_ARCH_HOPPER:    "Hopper",
		nvml.DEVICE_ARCH_BLACKWELL: "Blackwell",
		nvml.DEVICE_ARCH_UNKNOWN:   "",
		42:                         "",
	}
	for arch, want := range tests {
		if got := ArchitectureName(arch); got != want {
			t.Errorf("ArchitectureName(%d) = %q, want %q", arch, got, want)
		}
	}
}

func TestCString(t *testing.T) {
	var b [8]uint8
	copy(b[:], "ab")
	if got := cString(b[:]); got != "ab" {
		t.Errorf("cString = %q, want ab", got)
	}
	if got := cString([]uint8("full")); got != "full" {
		t.Errorf("cString without NUL = %q, want full", got)
	}
}
