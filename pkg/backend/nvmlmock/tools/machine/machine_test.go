package machine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	m := Machine{DriverVersion: "570.124.06", CUDAVersion: 12080, GPUs: []GPU{
		{Minor: 1, UUID: "GPU-b", Name: "NVIDIA L4", MemoryMiB: 24576, PCIBusID: "00000000:02:00.0"},
		{Minor: 0, PCIBusID: "00000000:01:00.0", Lost: true},
	}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Read(good)
	if err != nil {
		t.Fatal(err)
	}
	// Encoded by minor number, whatever the order it was given in.
	if len(got.GPUs) != 2 || got.GPUs[0].Minor != 0 || !got.GPUs[0].Lost || got.GPUs[1].UUID != "GPU-b" {
		t.Errorf("read back %+v", got)
	}
	if _, err := Read(filepath.Join(dir, "missing.json")); !errors.Is(err, ErrMissing) {
		t.Errorf("missing file: %v, want ErrMissing", err)
	}
	for name, tc := range map[string]struct{ content, want string }{
		"unknown field":  {`{"gpus":[],"temperature":3}`, "unknown field"},
		"two minors":     {`{"gpus":[{"minor":0,"uuid":"a","pciBusID":"x"},{"minor":0,"uuid":"b","pciBusID":"y"}]}`, "two GPUs with minor number 0"},
		"no UUID":        {`{"gpus":[{"minor":0,"pciBusID":"x"}]}`, "has no UUID"},
		"no bus ID":      {`{"gpus":[{"minor":0,"uuid":"a"}]}`, "no PCI bus ID"},
		"negative minor": {`{"gpus":[{"minor":-1,"uuid":"a","pciBusID":"x"}]}`, "negative minor"},
		"not JSON":       {`gpus`, "invalid character"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(p); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v, want one naming the file and %q", name, err, tc.want)
		}
	}
	if _, err := (&Machine{GPUs: []GPU{{Minor: 0}}}).Encode(); err == nil {
		t.Error("a GPU without bus ID was encoded")
	}
}
