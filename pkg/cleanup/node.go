// Package cleanup removes what accel-dra's kubelet plugin leaves on a node and in the cluster
// when the chart is uninstalled (docs/uninstall.md). The plugin undoes each claim when the
// kubelet unprepares it, so a node without prepared claims holds only the plugin's own state:
// its data directory (checkpoint, instance locks, the nvidia-cdi-hook it installed, the mock's
// machine), records of an earlier boot and their CDI specs, MPS mounts of a plugin that died,
// and registration sockets. Claims still prepared are refused unless forced: their pods still
// use the devices, and the records are what a reinstalled plugin needs to unprepare them.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/bootid"
	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

// NodeOptions say where one driver's plugin kept its state on this node: the plugin's own
// flags, with the same defaults.
type NodeOptions struct {
	DriverName string
	// SharedName says that another driver on the cluster has the same name, node by node
	// (NVIDIA's compatibility mode: gpu.nvidia.com, docs/migrate-from-nvidia.md). That driver
	// owns <plugins>/<driver> and <driver>-reg.sock, so the clean-up never removes either: the
	// mode's plugin keeps its state in <driver>-accel-dra and registers under a name with its
	// pod UID.
	SharedName bool
	// Kind is the kind of the driver's devices, which names its CDI specs.
	Kind          device.Kind
	PluginDataDir string
	// CheckpointDir defaults to <PluginDataDir>/checkpoint.
	CheckpointDir string
	CDIRoot       string
	RegistrarDir  string
	BootIDFile    string
	// Force removes the records and CDI specs of claims still prepared. Their containers keep
	// the devices they have; what prepare changed on the devices (a compute mode, a MIG
	// instance, an MPS daemon) stays as it is.
	Force bool
	// WaitForPlugin is how long to wait for the driver's plugin processes on this node to end
	// (a pod being deleted still serves, and owns the directory); 0: do not wait.
	WaitForPlugin time.Duration
}

// Report is what Node removed.
type Report struct {
	Records   []string // claim UIDs whose records went
	Specs     []string // claim UIDs whose CDI specs went
	Unmounted []string // mount points under the data directory
	Removed   []string // files and directories
}

// PreparedError is Node's refusal: claims are prepared on this node, and nothing was removed.
type PreparedError struct {
	Driver string
	Claims []checkpoint.Claim
}

func (e *PreparedError) Error() string {
	names := make([]string, 0, len(e.Claims))
	for _, c := range e.Claims {
		names = append(names, fmt.Sprintf("%s/%s (%s)", c.Namespace, c.Name, c.UID))
	}
	return fmt.Sprintf("%d claim(s) of %s are still prepared on this node: %s; delete the pods that use them and run the clean-up again, or force it (cleanup.force=true), which leaves their containers running on devices no plugin serves; nothing was removed",
		len(e.Claims), e.Driver, strings.Join(names, ", "))
}

// Node removes the driver's state from this node, or removes nothing and returns a
// *PreparedError when claims are still prepared (unless forced).
func Node(ctx context.Context, o NodeOptions) (*Report, error) {
	logger := klog.FromContext(ctx).WithValues("driver", o.DriverName)
	if o.DriverName == "" || o.PluginDataDir == "" || o.CDIRoot == "" {
		return nil, errors.New("cleanup: driver name, plugin data directory and CDI root are required")
	}
	if o.CheckpointDir == "" {
		o.CheckpointDir = filepath.Join(o.PluginDataDir, "checkpoint")
	}
	if o.SharedName && filepath.Base(filepath.Clean(o.PluginDataDir)) == o.DriverName {
		return nil, fmt.Errorf("cleanup: %s is the directory of the other driver named %s, not this plugin's (its own is %s-accel-dra); nothing was removed",
			o.PluginDataDir, o.DriverName, filepath.Clean(o.PluginDataDir))
	}
	rep := &Report{}
	if _, err := os.Stat(o.PluginDataDir); errors.Is(err, fs.ErrNotExist) {
		logger.Info("Nothing to clean up: no plugin data directory", "dir", o.PluginDataDir)
		return rep, removeSockets(ctx, o, rep)
	}
	if err := cleanCheckpoint(ctx, o, rep); err != nil {
		return rep, err
	}
	if err := unmountAll(o.PluginDataDir, rep); err != nil {
		return rep, err
	}
	if err := os.RemoveAll(o.PluginDataDir); err != nil {
		return rep, fmt.Errorf("removing %s: %w", o.PluginDataDir, err)
	}
	rep.Removed = append(rep.Removed, o.PluginDataDir)
	if err := removeSockets(ctx, o, rep); err != nil {
		return rep, err
	}
	logger.Info("Cleaned up", "records", rep.Records, "specs", rep.Specs, "unmounted", rep.Unmounted, "removed", rep.Removed)
	return rep, nil
}

// cleanCheckpoint waits for the plugin's processes to end, refuses prepared claims, and
// removes every record with its CDI spec.
func cleanCheckpoint(ctx context.Context, o NodeOptions, rep *Report) error {
	if _, err := os.Stat(o.CheckpointDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	boot, err := bootid.Read(o.BootIDFile)
	if err != nil {
		return err
	}
	store, err := checkpoint.Open(o.CheckpointDir, boot)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	locked, err := lockWithoutPlugin(ctx, store, o.WaitForPlugin)
	if err != nil {
		return err
	}
	defer locked.Unlock()
	res, err := locked.Load(ctx)
	if err != nil {
		return err
	}
	if len(res.Claims) > 0 && !o.Force {
		return &PreparedError{Driver: o.DriverName, Claims: res.Claims}
	}
	specs := cdi.New(o.CDIRoot, o.Kind)
	for _, c := range slices.Concat(res.Claims, res.Stale) {
		if specs.Exists(c.UID) {
			if err := specs.Remove(c.UID); err != nil {
				return err
			}
			rep.Specs = append(rep.Specs, c.UID)
		}
		if c.Foreign == nil {
			if err := locked.Delete(c.UID); err != nil {
				return err
			}
		}
		// A foreign record goes with the directory below.
		rep.Records = append(rep.Records, c.UID)
	}
	return nil
}

// lockWithoutPlugin takes the checkpoint's lock once no plugin process of the driver is alive
// on the node (each holds a lock on its file in instances/ for its lifetime).
func lockWithoutPlugin(ctx context.Context, store *checkpoint.Store, wait time.Duration) (*checkpoint.Locked, error) {
	deadline := time.Now().Add(wait)
	for {
		locked, err := store.LockContext(ctx)
		if err != nil {
			return nil, err
		}
		alive := liveInstances(locked, store.Dir())
		if len(alive) == 0 {
			return locked, nil
		}
		locked.Unlock()
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("the plugin still runs on this node (instances %v hold their locks in %s): delete its DaemonSet first", alive, filepath.Join(store.Dir(), checkpoint.InstancesDir))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func liveInstances(locked *checkpoint.Locked, dir string) []string {
	entries, _ := os.ReadDir(filepath.Join(dir, checkpoint.InstancesDir))
	var alive []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".lock"); ok && locked.Alive(id) {
			alive = append(alive, id)
		}
	}
	return alive
}

// unmountAll unmounts every mount under dir (the MPS daemons' /dev/shm tmpfs mounts of a
// plugin that did not stop them), deepest first, so that removing dir never reaches into a
// file system that is not the plugin's.
func unmountAll(dir string, rep *Report) error {
	var mounts []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == dir {
			return err
		}
		if mounted, err := sharing.IsMountPoint(p); err != nil {
			return err
		} else if mounted {
			mounts = append(mounts, p)
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("looking for mounts under %s: %w", dir, err)
	}
	slices.Reverse(mounts)
	for _, m := range mounts {
		if err := sharing.UnmountShm(m); err != nil {
			return err
		}
		rep.Unmounted = append(rep.Unmounted, m)
	}
	return nil
}

// removeSockets removes the driver's registration sockets that a plugin which did not stop
// cleanly left: <driver>-reg.sock, and <driver>-<pod UID>-reg.sock of a rolling update. A socket
// that a process answers on belongs to a plugin that runs (this release's are gone by now: its
// instances' locks are free), so it stays; with a shared name, <driver>-reg.sock is the other
// driver's, live or not.
func removeSockets(ctx context.Context, o NodeOptions, rep *Report) error {
	if o.RegistrarDir == "" {
		return nil
	}
	entries, err := os.ReadDir(o.RegistrarDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing registration sockets: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if !ownSocket(o.DriverName, n) || (o.SharedName && n == o.DriverName+"-reg.sock") {
			continue
		}
		p := filepath.Join(o.RegistrarDir, n)
		if answers(p) {
			klog.FromContext(ctx).Info("Keeping a registration socket that a process answers on", "socket", p)
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		rep.Removed = append(rep.Removed, p)
	}
	return nil
}

// answers tells whether a process accepts connections on the unix socket p.
func answers(p string) bool {
	c, err := net.DialTimeout("unix", p, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// ownSocket tells whether name is one of the driver's registration sockets: <driver>-reg.sock,
// or kubeletplugin's rolling-update name <driver>-<pod UID>-reg.sock or
// <driver>-<11 characters of a hash>-reg.sock. (Its third form, dra-<hash>-reg.sock, for a long
// registry path, cannot be told apart from another driver's without the pod UID.) A driver
// whose name extends this one's ("gpu.accel-dra.io-b") is not matched by a part of this length.
func ownSocket(driver, name string) bool {
	if name == driver+"-reg.sock" {
		return true
	}
	mid, ok := strings.CutPrefix(name, driver+"-")
	if !ok {
		return false
	}
	mid, ok = strings.CutSuffix(mid, "-reg.sock")
	return ok && !strings.Contains(mid, ".") && (len(mid) == 36 || len(mid) == 11)
}
