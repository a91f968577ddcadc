package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestDriverRootFollowsTheHost: the plugin sees at its --nvidia-driver-root the driver that the
// host has at drivers.gpu.nvidiaDriverRoot now. The GPU operator's driver container bind-mounts
// its root file system there once it has installed the driver, which may be after the plugin's
// pod started, and an upgrade replaces that mount with the new container's: the pod must start
// without it, and see both the first mount and its replacement, not the tree its container was
// started with. The kubelet's and the runtime's part is done here with real mounts, in a mount
// namespace of the test's own: the chart's hostPath volume is checked by its type and
// bind-mounted, recursively, with the propagation its volumeMount asks for. The GPU mock given
// a driver root uses it as the nvml backend does (--mock-driver-root=use), mounted the same way.
func TestDriverRootFollowsTheHost(t *testing.T) {
	standin.NeedMount(t)
	const driverRoot = "/run/nvidia/driver" // the GPU operator's
	for _, tc := range []struct {
		name           string
		values         map[string]any
		mockDriverRoot string
	}{
		{name: "nvml", mockDriverRoot: nodeplugin.MockDriverRootGenerate},
		{name: "mock", values: map[string]any{"mock": map[string]any{"enabled": true}}, mockDriverRoot: nodeplugin.MockDriverRootUse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{"drivers": map[string]any{"gpu": map[string]any{"nvidiaDriverRoot": driverRoot}}}
			for k, v := range tc.values {
				vals[k] = v
			}
			driverRootFollowsTheHost(t, vals, driverRoot, tc.mockDriverRoot)
		})
	}
}

func driverRootFollowsTheHost(t *testing.T, vals map[string]any, driverRoot, mockDriverRoot string) {
	r, err := render(Options{Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	u, err := r.PluginDaemonSet("gpu.accel-dra.io")
	if err != nil {
		t.Fatal(err)
	}
	spec := toTyped[appsv1.DaemonSet](t, u).Spec.Template.Spec
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == PluginContainer })
	if i < 0 {
		t.Fatalf("no container %q", PluginContainer)
	}
	c := spec.Containers[i]
	o := nodeplugin.NewOptions()
	if err := o.NewFlagSet().Parse(c.Args); err != nil {
		t.Fatal(err)
	}
	if o.MockDriverRoot != mockDriverRoot {
		t.Errorf("--mock-driver-root=%s, want %s", o.MockDriverRoot, mockDriverRoot)
	}
	// The mount that holds the plugin's driver root, and its volume.
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if (o.NVIDIADriverRoot == m.MountPath || strings.HasPrefix(o.NVIDIADriverRoot, strings.TrimSuffix(m.MountPath, "/")+"/")) &&
			(mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("--nvidia-driver-root=%s is on no volume mount", o.NVIDIADriverRoot)
	}
	vi := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	if vi < 0 || spec.Volumes[vi].HostPath == nil {
		t.Fatalf("volume %s of the driver root is not a hostPath volume", mount.Name)
	}
	vol := spec.Volumes[vi].HostPath

	for _, driverFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("driverBeforePlugin=%v", driverFirst), func(t *testing.T) {
			dir := t.TempDir()
			host, ctr := filepath.Join(dir, "host"), filepath.Join(dir, "container")
			// The host's root: a shared mount, as / is on a systemd host.
			if err := os.Mkdir(host, 0o755); err != nil {
				t.Fatal(err)
			}
			standin.Mount(t, "tmpfs", host, "tmpfs", 0)
			standin.Mount(t, "", host, "", syscall.MS_SHARED)
			for _, v := range []string{"v1", "v2"} {
				if err := os.MkdirAll(filepath.Join(dir, v), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, v, "version"), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			install := func(v string) {
				t.Helper()
				target := filepath.Join(host, driverRoot)
				if err := os.MkdirAll(target, 0o755); err != nil {
					t.Fatal(err)
				}
				standin.Mount(t, filepath.Join(dir, v), target, "", syscall.MS_BIND|syscall.MS_REC)
			}
			startPod := func() error {
				src := filepath.Join(host, vol.Path)
				switch typ := ptr.Deref(vol.Type, corev1.HostPathUnset); typ {
				case corev1.HostPathDirectoryOrCreate:
					if err := os.MkdirAll(src, 0o755); err != nil {
						return err
					}
				case corev1.HostPathDirectory:
					if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
						return fmt.Errorf("hostPath type check failed: %s is not a directory", vol.Path)
					}
				default:
					return fmt.Errorf("hostPath type %q not simulated here", typ)
				}
				dst := filepath.Join(ctr, mount.MountPath)
				if err := os.MkdirAll(dst, 0o755); err != nil {
					return err
				}
				standin.Mount(t, src, dst, "", syscall.MS_BIND|syscall.MS_REC)
				// As runc sets a volume's propagation.
				switch p := ptr.Deref(mount.MountPropagation, corev1.MountPropagationNone); p {
				case corev1.MountPropagationNone:
					standin.Mount(t, "", dst, "", syscall.MS_PRIVATE|syscall.MS_REC)
				case corev1.MountPropagationHostToContainer:
					standin.Mount(t, "", dst, "", syscall.MS_SLAVE|syscall.MS_REC)
				default:
					return fmt.Errorf("mount propagation %s not simulated here", p)
				}
				return nil
			}
			seen := func() string {
				b, err := os.ReadFile(filepath.Join(ctr, o.NVIDIADriverRoot, "version"))
				if err != nil {
					return err.Error()
				}
				return string(b)
			}

			if driverFirst {
				install("v1")
			}
			if err := startPod(); err != nil {
				t.Fatalf("the plugin's pod cannot start: %v", err)
			}
			if !driverFirst {
				install("v1")
			}
			if got := seen(); got != "v1" {
				t.Errorf("with the driver installed, the plugin sees at %s: %s; want v1", o.NVIDIADriverRoot, got)
			}
			if err := syscall.Unmount(filepath.Join(host, driverRoot), syscall.MNT_DETACH); err != nil {
				t.Fatal(err)
			}
			install("v2")
			if got := seen(); got != "v2" {
				t.Errorf("after an upgrade replaced the driver's mount, the plugin sees at %s: %s; want v2", o.NVIDIADriverRoot, got)
			}
		})
	}
}
