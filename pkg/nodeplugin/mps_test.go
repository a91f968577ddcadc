package nodeplugin

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/sharing"
	"github.com/accel-dra/accel-dra/pkg/sharing/mpspod"
)

// TestMPSControl: the control binary runs chrooted into the driver root unless a path is given;
// daemons run as pods (mounting the host's view of the driver root) or as processes (this
// process's view), as --mps-daemons says; pods need their namespace and image; NPUs and nodes
// without a driver have no MPS.
func TestMPSControl(t *testing.T) {
	src := &driverSource{root: "/driver-root", hostRoot: "/"}
	for name, tc := range map[string]struct {
		opts func(*Options)
		src  *driverSource
		kind device.Kind
		want sharing.Daemons
		err  string
	}{
		"process": {opts: func(*Options) {}, src: src, kind: device.KindGPU,
			want: sharing.Processes{Control: sharing.MPSControl{Root: "/driver-root", Path: sharing.DefaultControlPath}}},
		"process, stand-in": {opts: func(o *Options) { o.NVIDIAMPSControlPath = "/opt/ctl" }, src: src, kind: device.KindGPU,
			want: sharing.Processes{Control: sharing.MPSControl{Path: "/opt/ctl"}}},
		"pod": {opts: func(o *Options) {
			o.MPSDaemons, o.MPSDaemonNamespace, o.MPSDaemonImage = MPSDaemonsPod, "accel-dra", "plugin:v1"
		}, src: src, kind: device.KindGPU,
			want: mpspod.Pods{Namespace: "accel-dra", NodeName: "node-a", DriverName: GPUDriverName, Image: "plugin:v1", ImagePullPolicy: "IfNotPresent",
				HostDriverRoot: "/", ControlPath: sharing.DefaultControlPath}},
		"pod, stand-in": {opts: func(o *Options) {
			o.MPSDaemons, o.MPSDaemonNamespace, o.MPSDaemonImage, o.NVIDIAMPSControlPath = MPSDaemonsPod, "accel-dra", "plugin:v1", "/opt/ctl"
		}, src: &driverSource{root: "/mock/root"}, kind: device.KindGPU,
			want: mpspod.Pods{Namespace: "accel-dra", NodeName: "node-a", DriverName: GPUDriverName, Image: "plugin:v1", ImagePullPolicy: "IfNotPresent", ControlPath: "/opt/ctl"}},
		"pod without image": {opts: func(o *Options) { o.MPSDaemons, o.MPSDaemonNamespace = MPSDaemonsPod, "accel-dra" }, src: src, kind: device.KindGPU,
			err: "--mps-daemons=pod needs --mps-daemon-namespace (or $POD_NAMESPACE) and --mps-daemon-image"},
		"no driver": {opts: func(*Options) {}, src: &driverSource{}, kind: device.KindGPU},
		"NPU":       {opts: func(*Options) {}, src: src, kind: device.KindNPU},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			o.NodeName, o.DriverName, o.PluginDataDir, o.MPSDaemonNamespace = "node-a", GPUDriverName, "/var/lib/kubelet/plugins/gpu.accel-dra.io", ""
			tc.opts(o)
			m, err := mpsControl(o, tc.src, tc.kind, fake.NewClientset())
			if tc.err != "" || err != nil {
				if err == nil || !strings.Contains(err.Error(), tc.err) || tc.err == "" {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if tc.want == nil {
				if m != nil {
					t.Fatalf("MPS %+v, want none", m)
				}
				return
			}
			if m.Root != "/var/lib/kubelet/plugins/gpu.accel-dra.io/mps" {
				t.Errorf("root %s", m.Root)
			}
			if p, ok := m.Daemons.(mpspod.Pods); ok {
				p.Client = nil
				m.Daemons = p
			}
			// DeepEqual: mpspod.Pods has a slice (its pull secrets) and no == of its own.
			if !reflect.DeepEqual(m.Daemons, tc.want) {
				t.Errorf("daemons %+v, want %+v", m.Daemons, tc.want)
			}
		})
	}
	o := NewOptions()
	o.NodeName, o.MPSDaemons = "node-a", "thread"
	if err := o.Complete(); err == nil || !strings.Contains(err.Error(), `--mps-daemons="thread"`) {
		t.Errorf("Complete with --mps-daemons=thread: %v", err)
	}
}
