package nvmlmock

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// model is one GPU product as NVML reports it.
type model struct {
	name    string
	arch    nvml.DeviceArchitecture
	ccMajor int
	ccMinor int
	memory  uint64
	// pciDevice is the PCI device ID (vendor 0x10de), for the synthetic sysfs and PciInfo.
	pciDevice uint16
	mig       bool
	// migTable is the MIG profile table of a MIG-capable model the mock implements MIG for.
	migTable *migTable
}

const gib = 1 << 30

var (
	a100SXM40 = model{name: "NVIDIA A100-SXM4-40GB", arch: nvml.DEVICE_ARCH_AMPERE, ccMajor: 8, ccMinor: 0, memory: 40 * gib, pciDevice: 0x20b0, mig: true, migTable: a100MIG}
	h100SXM80 = model{name: "NVIDIA H100 80GB HBM3", arch: nvml.DEVICE_ARCH_HOPPER, ccMajor: 9, ccMinor: 0, memory: 80 * gib, pciDevice: 0x2330, mig: true, migTable: h100MIG}
	l4        = model{name: "NVIDIA L4", arch: nvml.DEVICE_ARCH_ADA, ccMajor: 8, ccMinor: 9, memory: 24 * gib, pciDevice: 0x27b8}
	t4        = model{name: "Tesla T4", arch: nvml.DEVICE_ARCH_TURING, ccMajor: 7, ccMinor: 5, memory: 16 * gib, pciDevice: 0x1eb8}
)

// gpu places one GPU in the PCI tree.
type gpu struct {
	model model
	// busID is the sysfs form, "0000:1b:00.0".
	busID string
	// root is the PCIe root complex directory under /sys/devices, "pci0000:15".
	root string
	// bridges are the bridge functions between the root and the GPU (root port, switch
	// upstream port, switch downstream port), outermost first; GPUs with the same bridges up to
	// their last one sit behind the same PCIe switch.
	bridges []string
	// numa is the content of numa_node; -1 means no affinity.
	numa int
	// migMode puts a MIG-capable GPU in MIG mode; instances are the MIG devices it has when
	// the mock's state is first created (as an operator or mig-parted made them).
	migMode   bool
	instances []migInstance
}

// profile is one mock machine.
type profile struct {
	description       string
	driverVersion     string
	cudaDriverVersion int
	// modeset says whether /dev/nvidia-modeset exists (the display driver is loaded).
	modeset bool
	// drm says whether the nvidia-drm module is loaded (it needs nvidia-modeset, so a profile
	// with drm has modeset too): then each GPU has a DRM primary (card) and render node, which
	// the kernel lists under the GPU's sysfs directory, drm/card<N> and drm/renderD<M>, and
	// creates as /dev/dri/card<N> and /dev/dri/renderD<M> (see drmNodes).
	drm bool
	// firstCard is the N of the first GPU's /dev/dri/cardN where drm is set: a DRM driver that
	// probed before nvidia-drm holds the cards below it, as a server's BMC graphics (ast) or
	// the boot framebuffer (simpledrm) holds card0. Those drivers have no render node, so the
	// render minors start at 128 all the same and a GPU's card and render numbers differ.
	firstCard int
	// gpus are the GPUs in NVML index order.
	gpus []gpu
	// minors are the minor numbers (/dev/nvidiaN) of gpus by NVML index; nil means each GPU's
	// minor is its index, as on most hosts.
	minors []int
	// uuidProfile is the profile whose UUIDs the GPUs carry (UUIDs derive from node, this name
	// and minor); empty means the profile's own name. Variants of a machine set it to the base
	// machine so that the same GPU keeps its UUID.
	uuidProfile string
	// uuidOf maps a minor to the minor whose UUID that GPU carries instead of its own: a
	// different board in the slot.
	uuidOf map[int]int
	// lost are the minors of GPUs that have fallen off the bus: NVML still hands out their
	// handle, minor number and PCI info (the kernel driver keeps those) but fails every query
	// that needs the GPU with ERROR_GPU_IS_LOST.
	lost map[int]bool
	// nvlink is the machine's NVLink wiring and fabric (nvlink.go); nil is a machine whose GPUs
	// have no NVLink (NVML answers NOT_SUPPORTED). The DGX profiles above leave theirs out;
	// their -nvswitch variants (nvlinkprofiles.go) have it.
	nvlink *nvlinkGraph
}

// minor is the minor number of the GPU at NVML index i.
func (p profile) minor(i int) int {
	if p.minors == nil {
		return i
	}
	return p.minors[i]
}

// Driver 570.124.06 ships CUDA 12.8; NVML reports the CUDA version as 1000*major + 10*minor.
const (
	driverVersion     = "570.124.06"
	cudaDriverVersion = 12080
)

var profiles = map[string]profile{
	"gh200-1x": gh200x1, // arm64 Grace Hopper, gh200.go
	// DGX A100: two AMD EPYC 7742 in NPS1 mode (one NUMA node per socket), each with four PCIe
	// root complexes of which two carry a PCIe switch with a pair of GPUs. The bus IDs are those
	// of a real DGX A100.
	"a100-8x": {
		description:       "8x NVIDIA A100-SXM4-40GB (DGX A100): pairs behind one PCIe switch, 4 root complexes, NUMA 0 (gpu-0..3) and 1 (gpu-4..7)",
		driverVersion:     driverVersion,
		cudaDriverVersion: cudaDriverVersion,
		modeset:           true,
		gpus: []gpu{
			{model: a100SXM40, busID: "0000:07:00.0", root: "pci0000:00", bridges: []string{"0000:00:01.1", "0000:01:00.0", "0000:02:04.0"}, numa: 0},
			{model: a100SXM40, busID: "0000:0f:00.0", root: "pci0000:00", bridges: []string{"0000:00:01.1", "0000:01:00.0", "0000:02:0c.0"}, numa: 0},
			{model: a100SXM40, busID: "0000:47:00.0", root: "pci0000:40", bridges: []string{"0000:40:01.1", "0000:41:00.0", "0000:42:04.0"}, numa: 0},
			{model: a100SXM40, busID: "0000:4e:00.0", root: "pci0000:40", bridges: []string{"0000:40:01.1", "0000:41:00.0", "0000:42:0c.0"}, numa: 0},
			{model: a100SXM40, busID: "0000:87:00.0", root: "pci0000:80", bridges: []string{"0000:80:01.1", "0000:81:00.0", "0000:82:04.0"}, numa: 1},
			{model: a100SXM40, busID: "0000:90:00.0", root: "pci0000:80", bridges: []string{"0000:80:01.1", "0000:81:00.0", "0000:82:0c.0"}, numa: 1},
			{model: a100SXM40, busID: "0000:b7:00.0", root: "pci0000:a0", bridges: []string{"0000:a0:03.1", "0000:a1:00.0", "0000:a2:04.0"}, numa: 1},
			{model: a100SXM40, busID: "0000:bd:00.0", root: "pci0000:a0", bridges: []string{"0000:a0:03.1", "0000:a1:00.0", "0000:a2:0c.0"}, numa: 1},
		},
	},
	// DGX H100: two Xeon 8480C (Sapphire Rapids), one NUMA node per socket. The bus IDs are those
	// of a real DGX H100; each GPU sits behind its own PCIe switch, two switches per root
	// complex (pci0000:15 and pci0000:48 on socket 0, pci0000:97 and pci0000:c7 on socket 1).
	"h100-8x-2numa": {
		description:       "8x NVIDIA H100 80GB HBM3 (DGX H100): NUMA 0 = gpu-0..3 under pci0000:15 and pci0000:48, NUMA 1 = gpu-4..7 under pci0000:97 and pci0000:c7",
		driverVersion:     driverVersion,
		cudaDriverVersion: cudaDriverVersion,
		modeset:           true,
		gpus: []gpu{
			{model: h100SXM80, busID: "0000:1b:00.0", root: "pci0000:15", bridges: []string{"0000:15:01.0", "0000:16:00.0", "0000:17:01.0"}, numa: 0},
			{model: h100SXM80, busID: "0000:43:00.0", root: "pci0000:15", bridges: []string{"0000:15:05.0", "0000:41:00.0", "0000:42:00.0"}, numa: 0},
			{model: h100SXM80, busID: "0000:52:00.0", root: "pci0000:48", bridges: []string{"0000:48:01.0", "0000:50:00.0", "0000:51:00.0"}, numa: 0},
			{model: h100SXM80, busID: "0000:61:00.0", root: "pci0000:48", bridges: []string{"0000:48:05.0", "0000:5f:00.0", "0000:60:00.0"}, numa: 0},
			{model: h100SXM80, busID: "0000:9d:00.0", root: "pci0000:97", bridges: []string{"0000:97:01.0", "0000:9b:00.0", "0000:9c:00.0"}, numa: 1},
			{model: h100SXM80, busID: "0000:c3:00.0", root: "pci0000:97", bridges: []string{"0000:97:05.0", "0000:c1:00.0", "0000:c2:00.0"}, numa: 1},
			{model: h100SXM80, busID: "0000:d1:00.0", root: "pci0000:c7", bridges: []string{"0000:c7:01.0", "0000:cf:00.0", "0000:d0:00.0"}, numa: 1},
			{model: h100SXM80, busID: "0000:df:00.0", root: "pci0000:c7", bridges: []string{"0000:c7:05.0", "0000:dd:00.0", "0000:de:00.0"}, numa: 1},
		},
	},
	// A small mixed box: an L4 in a root port on NUMA 0, and a T4 passed through on a second PCI
	// domain (as hypervisors such as Hyper-V present it) whose numa_node is -1, so that it has no
	// numaNode. No nvidia-modeset, as on headless hosts without the display driver.
	"mixed-small": {
		description:       "1x NVIDIA L4 (Ada, NUMA 0) + 1x Tesla T4 (Turing, PCI domain 0001, no NUMA node); no nvidia-modeset",
		driverVersion:     driverVersion,
		cudaDriverVersion: cudaDriverVersion,
		gpus: []gpu{
			{model: l4, busID: "0000:01:00.0", root: "pci0000:00", bridges: []string{"0000:00:01.0"}, numa: 0},
			{model: t4, busID: "0001:00:04.0", root: "pci0001:00", numa: -1},
		},
	},
	// A node of mixed GPUs for MIG: gpu-0 is an A100 in MIG mode with MIG devices an operator
	// made (2g.10gb at slices 0-1, 1g.5gb at 2 and 3, 3g.20gb at 4-7), gpu-1 an A100 in MIG mode
	// without any, gpu-2 an H100 in MIG mode without any, gpu-3 an H100 that supports MIG but is
	// not in MIG mode, and gpu-4 an L4, which does not support MIG.
	"mig-mixed": {
		description:       "gpu-0 A100-SXM4-40GB in MIG mode with 2g.10gb@0, 1g.5gb@2, 1g.5gb@3, 3g.20gb@4; gpu-1 A100 in MIG mode, empty; gpu-2 H100 80GB in MIG mode, empty; gpu-3 H100 not in MIG mode; gpu-4 L4 (no MIG)",
		driverVersion:     driverVersion,
		cudaDriverVersion: cudaDriverVersion,
		modeset:           true,
		gpus: []gpu{
			{model: a100SXM40, busID: "0000:07:00.0", root: "pci0000:00", bridges: []string{"0000:00:01.1", "0000:01:00.0", "0000:02:04.0"}, numa: 0, migMode: true,
				instances: []migInstance{{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 0}, {nvml.GPU_INSTANCE_PROFILE_1_SLICE, 2}, {nvml.GPU_INSTANCE_PROFILE_1_SLICE, 3}, {nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4}}},
			{model: a100SXM40, busID: "0000:0f:00.0", root: "pci0000:00", bridges: []string{"0000:00:01.1", "0000:01:00.0", "0000:02:0c.0"}, numa: 0, migMode: true},
			{model: h100SXM80, busID: "0000:87:00.0", root: "pci0000:80", bridges: []string{"0000:80:01.1", "0000:81:00.0", "0000:82:04.0"}, numa: 1, migMode: true},
			{model: h100SXM80, busID: "0000:90:00.0", root: "pci0000:80", bridges: []string{"0000:80:01.1", "0000:81:00.0", "0000:82:0c.0"}, numa: 1},
			{model: l4, busID: "0000:b7:00.0", root: "pci0000:a0", bridges: []string{"0000:a0:03.1"}, numa: 1},
		},
	},
	// The mixed-small machine with a driver version that cannot be made semver, for tests of the
	// layer that publishes driverVersion: the devices are published without that attribute.
	"broken-driver-version": {
		description:       "mixed-small with the driver version \"bad-version\", which is not semver (published without driverVersion)",
		driverVersion:     "bad-version",
		cudaDriverVersion: cudaDriverVersion,
		gpus: []gpu{
			{model: l4, busID: "0000:01:00.0", root: "pci0000:00", bridges: []string{"0000:00:01.0"}, numa: 0},
			{model: t4, busID: "0001:00:04.0", root: "pci0001:00", numa: -1},
		},
	},
}

// Variants of the DGX H100 for tests of device identity and per-device failures. They share
// the base machine's UUIDs, so that a node restarted on a variant meets the same GPUs (or, where
// the variant says so, different ones) under the same names.
func init() {
	base := profiles["h100-8x-2numa"]
	// NVML orders GPUs by PCI bus ID by default, but driver versions and CUDA_DEVICE_ORDER have
	// changed that order on real hosts; the minor numbers are the kernel driver's and stay.
	reordered := base
	reordered.description = "h100-8x-2numa with NVML indices permuted (index i is minor 3,1,0,2,7,5,4,6 [i]): names, UUIDs and bus IDs stay with the minor"
	reordered.uuidProfile = "h100-8x-2numa"
	reordered.minors = []int{3, 1, 0, 2, 7, 5, 4, 6}
	reordered.gpus = make([]gpu, len(base.gpus))
	for i, m := range reordered.minors {
		reordered.gpus[i] = base.gpus[m]
	}
	profiles["h100-8x-2numa-reordered"] = reordered

	// A board swap between two slots: the minor follows the slot (bus ID), the UUID the board.
	swapped := base
	swapped.description = "h100-8x-2numa with the boards of gpu-0 and gpu-1 swapped: same names and bus IDs, each other's UUIDs"
	swapped.uuidProfile = "h100-8x-2numa"
	swapped.uuidOf = map[int]int{0: 1, 1: 0}
	profiles["h100-8x-2numa-swapped"] = swapped

	// MIG machines: the DGX A100 and DGX H100 with every GPU in MIG mode and no MIG devices yet
	// (for dynamic MIG), and a mixed node.
	for name, from := range map[string]string{"a100-8x-mig": "a100-8x", "h100-8x-mig": "h100-8x-2numa"} {
		p := profiles[from]
		p.description = from + " with every GPU in MIG mode and no MIG devices yet"
		p.gpus = append([]gpu(nil), p.gpus...)
		for i := range p.gpus {
			p.gpus[i].migMode = true
		}
		profiles[name] = p
	}

	// nvidia-drm loaded (the driver installed with its display modules, as on hosts that run
	// graphics or Vulkan workloads): each GPU has DRM nodes, and the DGX's BMC (an ASPEED
	// AST2600, driver ast) holds card0, so GPU minor N is card<N+1> and renderD<128+N>. Same
	// UUIDs: loading the module does not change the GPUs.
	drm := base
	drm.description = "h100-8x-2numa with nvidia-drm loaded: gpu-N has /dev/dri/card<N+1> (the BMC's ast driver holds card0) and /dev/dri/renderD<128+N>"
	drm.uuidProfile = "h100-8x-2numa"
	drm.drm, drm.firstCard = true, 1
	profiles["h100-8x-2numa-drm"] = drm
	migDRM := profiles["mig-mixed"]
	migDRM.description = "mig-mixed with nvidia-drm loaded and no other DRM driver: gpu-N has /dev/dri/card<N> and /dev/dri/renderD<128+N>; its MIG devices have none"
	migDRM.uuidProfile = "mig-mixed"
	migDRM.drm = true
	profiles["mig-mixed-drm"] = migDRM

	broken := base
	broken.description = "h100-8x-2numa where gpu-3 has fallen off the bus: its handle, minor and PCI info answer, every other NVML query fails with GPU_IS_LOST"
	broken.uuidProfile = "h100-8x-2numa"
	broken.lost = map[int]bool{3: true}
	profiles["h100-8x-one-broken"] = broken
}

// Profiles returns the names of the mock profiles, sorted.
func Profiles() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Describe returns a one-line description of a profile, "" if unknown.
func Describe(name string) string {
	p, _ := lookupProfile(name)
	return p.description
}

// maxBenchGPUs bounds the synthetic profiles; 4096 devices is 32 ResourceSlices.
const maxBenchGPUs = 4096

func lookupProfile(name string) (profile, bool) {
	if p, ok := profiles[name]; ok {
		return p, true
	}
	if rest, ok := strings.CutPrefix(name, "bench-"); ok {
		n, err := strconv.Atoi(rest)
		if err == nil && n >= 1 && n <= maxBenchGPUs && strconv.Itoa(n) == rest {
			return benchProfile(n), true
		}
	}
	return profile{}, false
}

// benchProfile is a synthetic machine of n L4s, for benchmarks that need more devices than a real
// server has (a thousand claims prepared at once each need a device of their own). It is not
// listed by Profiles: no real node looks like it. 128 GPUs share a root complex, 512 a NUMA node.
func benchProfile(n int) profile {
	p := profile{
		description:       fmt.Sprintf("synthetic: %dx NVIDIA L4, 128 per PCIe root complex, 512 per NUMA node (for benchmarks)", n),
		driverVersion:     driverVersion,
		cudaDriverVersion: cudaDriverVersion,
	}
	for i := 0; i < n; i++ {
		root := i / 128
		p.gpus = append(p.gpus, gpu{
			model: l4,
			busID: fmt.Sprintf("%04x:%02x:%02x.0", root, 1+(i%128)/32, i%32),
			root:  fmt.Sprintf("pci%04x:00", root),
			numa:  i / 512,
		})
	}
	return p
}
