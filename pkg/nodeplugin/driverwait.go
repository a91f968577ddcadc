package nodeplugin

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	nvmlbackend "github.com/accel-dra/accel-dra/pkg/backend/nvml"
)

// How often the driver root is searched for the driver while the plugin waits for it, and how
// often the wait is logged.
var (
	driverPollInterval    = 2 * time.Second
	driverWaitLogInterval = 30 * time.Second
)

// waitForDriver waits until the NVIDIA driver root has the driver's libnvidia-ml.so.1. The GPU
// operator's driver container mounts its root file system (at /run/nvidia/driver) only once it
// has installed the driver, often after the plugin started; exiting instead would only have the
// kubelet restart the plugin, with a growing back-off, until then. It returns false if ctx ended
// first.
func waitForDriver(ctx context.Context, start *startup, root, hostRoot string) bool {
	lib, err := nvmlbackend.FindLibrary(root)
	if err == nil {
		return true
	}
	where := root
	if hostRoot != "" && hostRoot != root {
		where = fmt.Sprintf("%s (%s on the host)", root, hostRoot)
	}
	start.waitAlive(ctx, fmt.Sprintf("the NVIDIA driver under %s, which has no %s yet (the GPU operator's driver container mounts the driver at /run/nvidia/driver once it has installed it)", where, nvmlbackend.LibraryName))
	logger := klog.FromContext(ctx).WithValues("root", root, "hostRoot", hostRoot)
	t := time.NewTicker(driverPollInterval)
	defer t.Stop()
	var logged time.Time
	for {
		if time.Since(logged) >= driverWaitLogInterval {
			logger.Info("Waiting for the NVIDIA driver under its root: the GPU operator's driver container mounts it at /run/nvidia/driver once it has installed the driver; a driver installed on the host is under drivers.gpu.nvidiaDriverRoot (--nvidia-host-driver-root)", "err", err)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if lib, err = nvmlbackend.FindLibrary(root); err == nil {
			logger.Info("The NVIDIA driver is there", "library", lib)
			return true
		}
	}
}
