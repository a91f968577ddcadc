package nvml

import (
	"context"
	"io/fs"
	"path"
	"regexp"
	"sort"

	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// driNode matches the DRM nodes of a GPU in sysfs <bdf>/drm: cardN (modesetting, display) and
// renderDN (rendering, which Vulkan and EGL programs open). They exist only where the
// nvidia-drm module is loaded.
var driNode = regexp.MustCompile(`^(card|renderD)[0-9]+$`)

// driNodes returns the GPU's /dev/dri nodes, found as the kernel lists them under
// bus/pci/devices/<busID>/drm, as NVIDIA's toolkit puts them in a GPU's CDI device. They belong
// to this GPU alone, so a container that gets another GPU must not see them. A GPU without
// them (no nvidia-drm) has none, and a node that cannot be statted is left out with a log
// line: compute does not need it, and the GPU stays usable.
func (b *Backend) driNodes(ctx context.Context, busID string) []device.Node {
	entries, err := fs.ReadDir(b.sysfs, path.Join("bus/pci/devices", busID, "drm"))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if driNode.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var nodes []device.Node
	for _, name := range names {
		n, err := b.nodes.find(path.Join("dri", name))
		if err != nil {
			klog.FromContext(ctx).Info("GPU DRM node listed in sysfs but not usable, leaving it out", "pciBusID", busID, "node", n.Path, "err", err)
			continue
		}
		nodes = append(nodes, n)
	}
	return nodes
}
