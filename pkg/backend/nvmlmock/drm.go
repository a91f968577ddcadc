package nvmlmock

import "fmt"

// The DRM nodes of a GPU where nvidia-drm is loaded, as the kernel makes them:
//
//   - Character major 226 is DRM's (Documentation/admin-guide/devices.txt: "226 char Direct
//     Rendering Infrastructure (DRI)", minor N = /dev/dri/cardN).
//   - Every DRM device gets a primary minor from 0..63 and, if its driver renders (nvidia-drm
//     does; ast and simpledrm, which hold card0 on many servers, do not), a render minor from
//     128..191, each allocated in probe order (drivers/gpu/drm/drm_drv.c, drm_minor_alloc).
//     The nodes are named after the minor, card<minor> and renderD<minor>
//     (drivers/gpu/drm/drm_sysfs.c), and are children of the GPU's PCI device, so sysfs lists
//     them under /sys/bus/pci/devices/<bdf>/drm/, each with a dev file "226:<minor>".
//   - nvidia-drm registers the GPUs in the order the nvidia driver probed them, which is also
//     the order of their /dev/nvidiaN minors; the mock numbers them from the minor.
//
// NVIDIA's container toolkit puts a GPU's card and render node in the GPU's CDI device and none
// in a MIG device's (nvcdi's full-GPU device discovers the DRM nodes of the GPU's PCI bus ID,
// its MIG device the parent's /dev/nvidiaN and the nvidia-caps nodes only).
const (
	drmMajor       = 226
	drmRenderFirst = 128
)

// drmNodes returns the names and minors of the card and render node of the GPU with minor
// number minor; nil where the profile has no nvidia-drm.
func (p profile) drmNodes(minor int) map[string]int64 {
	if !p.drm {
		return nil
	}
	card, render := p.firstCard+minor, drmRenderFirst+minor
	return map[string]int64{fmt.Sprintf("card%d", card): int64(card), fmt.Sprintf("renderD%d", render): int64(render)}
}
