// Package ascend computes the node-common CDI edits of Ascend NPUs: the driver files that
// Ascend's own container runtime (ascend-docker-runtime) mounts into every NPU container, so
// that CANN programs find the driver's libraries, its version and npu-smi when the runtime is
// plain containerd or CRI-O with CDI. Like the GPU edits they are computed once at start-up.
package ascend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// DefaultDriverPaths are what ascend-docker-runtime mounts from the host by default (its
// mount.list): the driver's user-space libraries, the driver's version file, the install
// record, the DCMI library that npu-smi and monitoring tools use, and npu-smi itself. Paths are
// the same on the host and in the container.
var DefaultDriverPaths = []string{
	"/usr/local/Ascend/driver/lib64",
	"/usr/local/Ascend/driver/version.info",
	"/etc/ascend_install.info",
	"/usr/local/dcmi",
	"/usr/local/bin/npu-smi",
}

// mountOptions: read-only bind mounts, as the toolkit mounts NVIDIA's driver files.
var mountOptions = []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}

// Config says where the driver is and what to mount.
type Config struct {
	// DriverRoot is where this process sees the root under which the driver is installed ("/"
	// on the host, the mount point of the host's root in a container).
	DriverRoot string
	// HostDriverRoot is the same tree as the container runtime sees it; empty means DriverRoot.
	HostDriverRoot string
	// Paths are the absolute paths, relative to the root, to mount; DefaultDriverPaths when nil.
	// ExtraPaths are mounted as well (the chart's ascend.extraDriverPaths).
	Paths, ExtraPaths []string
}

// CommonEdits returns the mounts of the paths of c that exist under the driver root. A missing
// path is skipped with a log line: a node without npu-smi or DCMI still runs CANN programs, and
// failing the whole node for it would help nobody. A bad path (relative, not clean) is an error.
func CommonEdits(ctx context.Context, c Config) (*specs.ContainerEdits, error) {
	logger := klog.FromContext(ctx)
	if c.DriverRoot == "" {
		return nil, errors.New("Ascend CDI edits: no driver root")
	}
	root := filepath.Clean(c.DriverRoot)
	hostRoot := root
	if c.HostDriverRoot != "" {
		hostRoot = filepath.Clean(c.HostDriverRoot)
	}
	paths := c.Paths
	if paths == nil {
		paths = DefaultDriverPaths
	}
	edits := &specs.ContainerEdits{}
	seen := map[string]bool{}
	for _, p := range slices.Concat(paths, c.ExtraPaths) {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("Ascend CDI edits: driver path %q must be an absolute, clean path below /", p)
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			logger.Info("Ascend driver path not found, not mounting it into NPU containers", "path", p, "driverRoot", root, "err", err)
			continue
		}
		edits.Mounts = append(edits.Mounts, &specs.Mount{
			HostPath:      filepath.Join(hostRoot, p),
			ContainerPath: p,
			Options:       slices.Clone(mountOptions),
		})
	}
	if len(edits.Mounts) == 0 {
		logger.Info("No Ascend driver files found: NPU containers get device nodes only and must bring the driver themselves", "driverRoot", root)
	}
	return edits, nil
}
