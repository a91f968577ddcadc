package nodeplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestNVIDIACompatFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		args          []string
		wantDriver    string
		wantDataDir   string
		wantErr       string
		wantTranslate bool
	}{
		"off": {
			args:       []string{"--backend=mock"},
			wantDriver: "gpu.accel-dra.io", wantDataDir: "/var/lib/kubelet/plugins/gpu.accel-dra.io",
		},
		"on": {
			args:       []string{"--backend=mock", "--nvidia-compat"},
			wantDriver: "gpu.nvidia.com", wantDataDir: "/var/lib/kubelet/plugins/gpu.nvidia.com-accel-dra", wantTranslate: true,
		},
		"on with NVIDIA's name spelt out and a data dir": {
			args:       []string{"--backend=nvml", "--nvidia-compat", "--driver-name=gpu.nvidia.com", "--plugin-data-dir=/x"},
			wantDriver: "gpu.nvidia.com", wantDataDir: "/x", wantTranslate: true,
		},
		"another driver name": {
			args:    []string{"--nvidia-compat", "--driver-name=gpu.accel-dra.io"},
			wantErr: "--nvidia-compat publishes the GPUs as gpu.nvidia.com; --driver-name=gpu.accel-dra.io contradicts it",
		},
		"NPU backend": {
			args:    []string{"--nvidia-compat", "--backend=npu-mock"},
			wantErr: "--nvidia-compat is for GPU backends, not --backend=npu-mock",
		},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			o.NodeName = "n"
			if err := o.NewFlagSet().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Complete()
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Complete: %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.DriverName != tc.wantDriver || o.PluginDataDir != tc.wantDataDir {
				t.Errorf("driver %s, data dir %s; want %s, %s", o.DriverName, o.PluginDataDir, tc.wantDriver, tc.wantDataDir)
			}
			if got := o.configTranslator() != nil; got != tc.wantTranslate {
				t.Errorf("config translator set: %v, want %v", got, tc.wantTranslate)
			}
			if got := o.configApplies() != nil; got != tc.wantTranslate {
				t.Errorf("config filter set: %v, want %v", got, tc.wantTranslate)
			}
			if got := o.attributes() != nil; got != tc.wantTranslate {
				t.Errorf("attributes set: %v, want %v", got, tc.wantTranslate)
			}
			if got := len(o.taintKeys()) > 0; got != tc.wantTranslate {
				t.Errorf("taint keys set: %v, want %v", got, tc.wantTranslate)
			}
		})
	}
}

// registrar is a registration service answering for driver name on socket.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	name string
}

func (r registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: "DRAPlugin", Name: r.name}, nil
}

// TestNVIDIAPluginGone: the compatibility mode refuses to start while NVIDIA's plugin answers
// on its registration socket, and starts where the socket is missing or left behind.
func TestNVIDIAPluginGone(t *testing.T) {
	dir := t.TempDir()
	o := NewOptions()
	o.NVIDIACompat, o.RegistrarDir = true, dir
	socket := filepath.Join(dir, "gpu.nvidia.com-reg.sock")
	if err := o.nvidiaPluginGone(context.Background()); err != nil {
		t.Fatalf("no socket: %v", err)
	}

	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, registrar{name: "gpu.nvidia.com"})
	go func() { _ = srv.Serve(l) }()
	want := fmt.Sprintf(`another kubelet plugin serves driver gpu.nvidia.com on this node (%s answers for "gpu.nvidia.com"): NVIDIA's DRA driver must leave the node before accel-dra serves under its name (docs/migrate-from-nvidia.md)`, socket)
	if err := o.nvidiaPluginGone(context.Background()); err == nil || err.Error() != want {
		t.Errorf("NVIDIA's plugin answers: %v\nwant %s", err, want)
	}
	// Without the mode, under accel-dra's own name: NVIDIA's driver serves the node's GPUs, and
	// publishing them again would hand each GPU out twice.
	o.NVIDIACompat, o.DriverName = false, GPUDriverName
	want = fmt.Sprintf(`NVIDIA's DRA driver serves this node's GPUs (%s answers for "gpu.nvidia.com"): accel-dra's gpu.accel-dra.io would publish each of them a second time, and a claim of either driver could get a GPU the other gave away; move the node over first (drain it and keep NVIDIA's kubelet plugin off it, docs/migrate-from-nvidia.md), or keep accel-dra's GPU plugin off the node (drivers.gpu.nodeSelector)`, socket)
	if err := o.nvidiaPluginGone(context.Background()); err == nil || err.Error() != want {
		t.Errorf("NVIDIA's plugin answers, accel-dra's own name: %v\nwant %s", err, want)
	}
	// An NPU plugin has no GPUs to hand out twice.
	o.Backend, o.DriverName = "npu", NPUDriverName
	if err := o.nvidiaPluginGone(context.Background()); err != nil {
		t.Errorf("an NPU plugin beside NVIDIA's: %v", err)
	}
	o.Backend, o.NVIDIACompat, o.DriverName = "nvml", true, ""

	// The plugin went; its socket file stays, as after a crash.
	srv.Stop()
	if _, err := os.Stat(socket); err != nil {
		if err := os.WriteFile(socket, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.nvidiaPluginGone(context.Background()); err != nil {
		t.Errorf("socket left behind: %v", err)
	}
}
