package nvmlmock

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"testing/fstest"
)

// The mock machine's /proc, as far as the NVIDIA driver writes it: /proc/devices with the
// driver's character majors, and /proc/driver/nvidia/capabilities with mig/config, mig/monitor
// and an access file per GPU and compute instance that exists. It is built from the MIG state
// on every Open, as the kernel builds procfs files on every read, so an instance's files are
// there exactly while the instance is, whichever plugin process made or destroyed it.
//
// The mock has no /dev/nvidia-caps: on a real node those nodes exist only where nvidia-modprobe
// or the NVIDIA container toolkit made them on the host, never inside the plugin's container,
// so a consumer must build them from these files (Stat answers nothing for them).

// CapsMajor is the major of the nvidia-caps character devices in the mock's /proc/devices. The
// kernel allocates it dynamically on real hosts; 509 is a typical value.
const CapsMajor = 509

// imexChannelsMajor is the newer drivers' nvidia-caps-imex-channels, listed so that a reader
// must match nvidia-caps exactly.
const imexChannelsMajor = 510

// DeviceFileMode values of the driver's capabilities files: mig/config is for root only, the
// monitor and every GPU- and compute-instance access file are readable by all (S_IRUGO, which
// the files spell in decimal: 256 and 292).
const (
	capModeConfig fs.FileMode = 0o400
	capModeAccess fs.FileMode = 0o444
)

// CapMinor is the nvidia-caps minor of a GPU instance (ci < 0) or compute instance of the GPU
// with the given minor, as the mock's capabilities files report it. It follows the layout of the
// driver's /proc/driver/nvidia-caps/mig-minors (gpu0/gi1/access is 12, gpu0/gi1/ci0/access 13),
// which is all a consumer may rely on: read it from the access file. Minors 1 and 2 are
// mig/config and mig/monitor.
func CapMinor(gpuMinor, gi, ci int) int {
	base := 3 + gpuMinor*15*9 + gi*9
	if ci < 0 {
		return base
	}
	return base + 1 + ci
}

// CapabilitiesDir is where the driver's capabilities are under the proc root.
const CapabilitiesDir = "driver/nvidia/capabilities"

// ProcFS is the mock machine's /proc (see above); names are relative to /proc ("devices",
// "driver/nvidia/capabilities/gpu1/mig/gi2/access").
func (s *Server) ProcFS() fs.FS { return procFS{s} }

type procFS struct{ s *Server }

func (p procFS) Open(name string) (fs.File, error) {
	devices, err := p.s.dev.procDevices()
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	m := fstest.MapFS{"devices": &fstest.MapFile{Data: devices, Mode: 0o444}}
	file := func(rel string, minor int, mode fs.FileMode) {
		m[path.Join(CapabilitiesDir, rel)] = &fstest.MapFile{
			Data: fmt.Appendf(nil, "DeviceFileMinor: %d\nDeviceFileMode: %d\nDeviceFileModify: 1\n", minor, uint32(mode)),
			Mode: 0o444,
		}
	}
	// The loaded kernel module (module.go), where the machine keeps one.
	if p.s.moduleFile != "" {
		if b, err := os.ReadFile(p.s.moduleFile); err == nil {
			m["driver/nvidia/version"] = &fstest.MapFile{Data: b, Mode: 0o444}
		}
	}
	file("mig/config", 1, capModeConfig)
	file("mig/monitor", 2, capModeAccess)
	if err := p.s.withMIG(func(st *migState) bool {
		for i := range p.s.profile.gpus {
			mg := p.s.gpuState(st, i)
			if mg == nil {
				continue
			}
			minor := p.s.profile.minor(i)
			for _, gi := range mg.GIs {
				dir := path.Join(fmt.Sprintf("gpu%d", minor), "mig", fmt.Sprintf("gi%d", gi.ID))
				file(path.Join(dir, "access"), CapMinor(minor, gi.ID, -1), capModeAccess)
				for _, ci := range gi.CIs {
					file(path.Join(dir, fmt.Sprintf("ci%d", ci.ID), "access"), CapMinor(minor, gi.ID, ci.ID), capModeAccess)
				}
			}
		}
		return false
	}); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return m.Open(name)
}
