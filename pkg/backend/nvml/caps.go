package nvml

import (
	"bufio"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// A MIG device's container needs the /dev/nvidia-caps nodes of its GPU and compute instance.
// NVML creates the instance and the driver lists its capability under /proc; nothing creates
// the node in the plugin's container, and on the host only nvidia-modprobe or the NVIDIA
// container toolkit does, if anything ran them. So the nodes are built as NVIDIA's toolkit
// builds them, never stat-ed: the major is the nvidia-caps driver's in /proc/devices, the minor
// and the mode come from the capability's access file, and the CDI spec carries all of it, so
// that the runtime creates the node in the container whether or not the host has it.
//
// The toolkit's own parser (internal/nvcaps) is internal to its module and reads the fixed
// /proc/driver/nvidia-caps/mig-minors table, which has no modes, and its /proc/devices reader
// (internal/info/proc/devices) is internal too; hence these few lines.

// DefaultProcRoot is where a plugin sees the host's /proc. /proc/devices and /proc/driver are
// not namespaced, so a container's own /proc serves, unless the runtime masked
// /proc/driver/nvidia (the NVIDIA runtime's legacy mode does): then mount the host's /proc
// elsewhere and point the plugin at it.
const DefaultProcRoot = "/proc"

// capabilitiesDir is the NVIDIA driver's capabilities directory under the proc root.
const capabilitiesDir = "driver/nvidia/capabilities"

// capsDriver is the character-device driver of /dev/nvidia-caps in /proc/devices.
const capsDriver = "nvidia-caps"

// WithProc sets the proc filesystem (os.DirFS of DefaultProcRoot on a real node) from which
// the nvidia-caps major and the MIG capabilities are read. Without it a MIG device's nodes
// cannot be built, so a GPU in MIG mode with MIG devices cannot be enumerated and no compute
// instance can be prepared.
func WithProc(fsys fs.FS) Option { return func(b *Backend) { b.nodes.proc = fsys } }

// capNodes are the GPU- and compute-instance nodes of a MIG device of the GPU with minor
// gpuMinor.
func (b *Backend) capNodes(gpuMinor, gi, ci int) ([]device.Node, error) {
	if b.nodes.proc == nil {
		return nil, fmt.Errorf("MIG capabilities of gpu minor %d: no proc filesystem configured", gpuMinor)
	}
	major, err := b.capsMajor()
	if err != nil {
		return nil, err
	}
	dir := path.Join(capabilitiesDir, fmt.Sprintf("gpu%d", gpuMinor), "mig", fmt.Sprintf("gi%d", gi))
	giNode, err := b.capNode(major, path.Join(dir, "access"))
	if err != nil {
		return nil, err
	}
	ciNode, err := b.capNode(major, path.Join(dir, fmt.Sprintf("ci%d", ci), "access"))
	if err != nil {
		return nil, err
	}
	return []device.Node{giNode, ciNode}, nil
}

// capsMajor reads the nvidia-caps major. It is read each time rather than once: the kernel
// allocates it when the driver loads, so a driver reload may change it.
func (b *Backend) capsMajor() (int64, error) {
	majors, err := b.nodes.majors()
	if err != nil {
		return 0, fmt.Errorf("MIG capabilities: %w", err)
	}
	major, ok := majors[capsDriver]
	if !ok {
		return 0, fmt.Errorf("MIG capabilities: no character device %s in /proc/devices: is the NVIDIA driver loaded?", capsDriver)
	}
	return major, nil
}

// capNode is the /dev/nvidia-caps node of the capability whose access file is at rel under
// the proc root.
func (b *Backend) capNode(major int64, rel string) (device.Node, error) {
	name := "/proc/" + rel
	data, err := fs.ReadFile(b.nodes.proc, rel)
	if err != nil {
		return device.Node{}, fmt.Errorf("MIG capability: %w", err)
	}
	minor, mode, err := parseCapability(string(data))
	if err != nil {
		return device.Node{}, fmt.Errorf("MIG capability %s: %w", name, err)
	}
	return device.Node{
		Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor),
		Type: "c", Major: major, Minor: minor, FileMode: mode,
	}, nil
}

// parseCapability reads an access file as the driver writes it ("DeviceFileMinor: 12",
// "DeviceFileMode: 292", the mode in decimal). Both lines are required: a node created with a
// guessed mode would give a container more, or less, than the driver grants.
func parseCapability(s string) (minor int64, mode fs.FileMode, err error) {
	var haveMinor, haveMode bool
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(key) {
		case "DeviceFileMinor":
			if minor, err = strconv.ParseInt(val, 10, 32); err != nil || minor < 0 {
				return 0, 0, fmt.Errorf("invalid DeviceFileMinor %q", val)
			}
			haveMinor = true
		case "DeviceFileMode":
			m, err := strconv.ParseUint(val, 10, 32)
			if err != nil || m > uint64(fs.ModePerm) {
				return 0, 0, fmt.Errorf("invalid DeviceFileMode %q: want permission bits in decimal, e.g. 292 for 0444", val)
			}
			mode, haveMode = fs.FileMode(m), true
		}
	}
	switch {
	case !haveMinor:
		return 0, 0, fmt.Errorf("no DeviceFileMinor line")
	case !haveMode:
		return 0, 0, fmt.Errorf("no DeviceFileMode line")
	}
	return minor, mode, nil
}
