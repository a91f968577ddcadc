package driver

import (
	"context"
	"fmt"
	stdslices "slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
)

// verifyIdentity refuses a record whose devices are no longer the devices it was prepared with:
// a device name that now has another UUID or another /dev/nvidiaN (or, for a MIG device, other
// nvidia-caps nodes) is another device, and handing it to the claim would give the container a
// GPU that another claim may hold. A record written before identities were recorded
// (checkpoint v1) gets them from the inventory and is rewritten.
//
// A GPU's DRM nodes are not its identity (device.Node.DRM): they come and go with the
// nvidia-drm module, so a record prepared without them (by a release that ran where the module
// was not loaded, or before it was) meets the same GPU with them. Such a record takes the
// GPU's nodes as they are now, and so does the claim's CDI spec, rewritten before the record
// so that the two never disagree on disk: a container of the claim started from now on (the
// kubelet restarting one, with the CDI device IDs it got at the first prepare, which stay) gets
// what a claim prepared now gets, and a running container keeps the nodes the runtime made for
// it. If the spec cannot be written, both stay as they were (the old spec still names the same
// GPU) and the next start or prepare tries again. A dynamic-MIG record that holds its parent's
// DRM nodes (a plugin before MIG devices lost them wrote it) loses them the same way.
//
// c's devices are replaced, never changed in place: the caller's copy may share them with the
// index, which must keep matching the disk.
func (p *preparer) verifyIdentity(ctx context.Context, l *checkpoint.Locked, c *checkpoint.Claim) error {
	logger := klog.FromContext(ctx)
	was := c.Devices
	c.Devices = stdslices.Clone(c.Devices)
	migrated, respec, v1 := false, false, false
	for i := range c.Devices {
		pd := &c.Devices[i]
		dev, ok := p.n.devices[pd.Device]
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("claim %s/%s (%s): device %s (UUID %s) was prepared but is no longer on node %s", c.Namespace, c.Name, c.UID, pd.Device, pd.UUID, p.n.opts.NodeName)
		case pd.MIG != nil:
			if err = p.mig.verify(ctx, c, pd); err == nil && stdslices.ContainsFunc(pd.Nodes, device.Node.DRM) {
				logger.Info("MIG device's record holds its GPU's DRM nodes, which MIG devices do not get; updating the record and CDI spec", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device, "nodes", nodePaths(pd.Nodes))
				pd.Nodes, migrated, respec = device.WithoutDRM(pd.Nodes), true, true
			}
		case pd.UUID == "":
			pd.UUID, pd.Nodes, migrated, v1 = dev.UUID, stdslices.Clone(dev.Nodes), true, true
		case pd.UUID != dev.UUID && stdslices.Contains(dev.FormerUUIDs, pd.UUID) && stdslices.EqualFunc(device.WithoutDRM(pd.Nodes), device.WithoutDRM(dev.Nodes), device.Node.Same):
			// The same nodes, so the same device, which an earlier release named by another UUID.
			logger.Info("Prepared device's UUID was corrected by the backend since the claim was prepared; updating the claim's record", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device, "uuid", pd.UUID, "now", dev.UUID)
			pd.UUID, migrated = dev.UUID, true
		case pd.UUID != dev.UUID || !stdslices.EqualFunc(device.WithoutDRM(pd.Nodes), device.WithoutDRM(dev.Nodes), device.Node.Same):
			err = fmt.Errorf("claim %s/%s (%s): device %s was prepared as UUID %s (nodes %s) but is now UUID %s (nodes %s); refusing to give the claim a different device: delete its pod so that the claim is allocated again",
				c.Namespace, c.Name, c.UID, pd.Device, pd.UUID, nodePaths(pd.Nodes), dev.UUID, nodePaths(dev.Nodes))
		case !stdslices.EqualFunc(pd.Nodes, dev.Nodes, device.Node.Same):
			logger.Info("GPU's DRM nodes changed since the claim was prepared (nvidia-drm loaded or unloaded); updating the claim's record and CDI spec", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device, "uuid", pd.UUID, "nodes", nodePaths(pd.Nodes), "now", nodePaths(dev.Nodes))
			pd.Nodes, migrated, respec = stdslices.Clone(dev.Nodes), true, true
		}
		if err != nil {
			c.Devices = was
			p.n.opts.Metrics.CheckpointErrors.WithLabelValues("identity").Inc()
			logger.Error(err, "Prepared device changed identity", "claim", klog.KRef(c.Namespace, c.Name), "device", pd.Device)
			p.n.warn("DeviceIdentityChanged", fmt.Sprintf("%s: %v", p.n.opts.DriverName, err))
			return err
		}
	}
	if respec {
		if err := p.spec.write(ctx, c); err != nil {
			logger.Error(err, "Cannot rewrite the CDI spec of a claim whose GPUs' DRM nodes changed; keeping its record and spec as they were", "claim", klog.KRef(c.Namespace, c.Name))
			c.Devices = was
			return nil
		}
	}
	if migrated {
		if err := p.held.put(l, c); err != nil {
			err = fmt.Errorf("claim %s/%s: checkpoint: %w", c.Namespace, c.Name, err)
			if v1 {
				return err
			}
			// The spec has the GPUs' nodes as they are now and the record the ones it had: the
			// same GPUs, which the next start or prepare brings together again. Refusing the
			// claim for it would take away its spec.
			logger.Error(err, "Cannot record a claim's GPUs' changed DRM nodes; its CDI spec has them", "claim", klog.KRef(c.Namespace, c.Name))
			c.Devices = was
			return nil
		}
	}
	return nil
}

func nodePaths(nodes []device.Node) string {
	paths := make([]string, 0, len(nodes))
	for _, n := range nodes {
		paths = append(paths, n.Path)
	}
	return "[" + strings.Join(paths, " ") + "]"
}
