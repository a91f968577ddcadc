package nodeplugin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type nopPlugin struct{}

func (nopPlugin) PrepareResourceClaims(context.Context, []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	return nil, nil
}

func (nopPlugin) UnprepareResourceClaims(context.Context, []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	return nil, nil
}

func (nopPlugin) HandleError(context.Context, error, string) {}

func (nopPlugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// TestHealthz runs the real kubelet plugin helper and checks /healthz through its life: healthy
// while it serves, unhealthy when the kubelet reports a failed registration, healthy again when
// it registers, unhealthy once the helper stops serving.
func TestHealthz(t *testing.T) {
	for _, podUID := range []string{"", "4f1c2a9e-0000-4000-8000-000000000001"} {
		t.Run("podUID="+podUID, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			// Unix socket paths are limited to 108 bytes; t.TempDir() can be longer.
			dir, err := os.MkdirTemp("", "hz")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			o := &Options{DriverName: "gpu.accel-dra.io", NodeName: "node-a", PodUID: podUID,
				RegistrarDir: filepath.Join(dir, "reg"), PluginDataDir: filepath.Join(dir, "plugin")}
			for _, d := range []string{o.RegistrarDir, o.PluginDataDir} {
				if err := os.MkdirAll(d, 0o750); err != nil {
					t.Fatal(err)
				}
			}
			opts := []kubeletplugin.Option{
				kubeletplugin.DriverName(o.DriverName), kubeletplugin.NodeName(o.NodeName),
				kubeletplugin.KubeClient(fake.NewClientset()),
				kubeletplugin.RegistrarDirectoryPath(o.RegistrarDir), kubeletplugin.PluginDataDirectoryPath(o.PluginDataDir),
				kubeletplugin.Serialize(false), kubeletplugin.HealthService(false),
			}
			if podUID != "" {
				opts = append(opts, kubeletplugin.RollingUpdate(types.UID(podUID)))
			}
			helper, err := kubeletplugin.Start(ctx, nopPlugin{}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					helper.Stop()
				}
			})
			hc := newHealthChecker(o, helper)

			get := func() (int, string) {
				t.Helper()
				rec := httptest.NewRecorder()
				hc.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil).WithContext(ctx))
				return rec.Code, rec.Body.String()
			}
			expect := func(when string, code int, body string) {
				t.Helper()
				got, msg := get()
				if got != code || !strings.Contains(msg, body) {
					t.Errorf("%s: /healthz = %d %q, want %d containing %q", when, got, msg, code, body)
				}
			}
			expect("serving, not yet registered", http.StatusOK, "ok")

			notify := func(registered bool, msg string) {
				t.Helper()
				conn, err := grpc.NewClient("unix://"+hc.registrarSocket, grpc.WithTransportCredentials(insecureCreds()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				// The helper records the status and answers a failed registration with an error.
				_, err = registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(ctx,
					&registerapi.RegistrationStatus{PluginRegistered: registered, Error: msg})
				if (err == nil) != registered {
					t.Fatalf("NotifyRegistrationStatus(%v): %v", registered, err)
				}
			}
			notify(false, "plugin name conflict")
			expect("registration rejected", http.StatusServiceUnavailable, "plugin name conflict")
			notify(true, "")
			expect("registered", http.StatusOK, "ok")

			// A wiped plugin directory: the kubelet can no longer reach the DRA service.
			sock := hc.pluginSocket
			if err := os.Rename(sock, sock+".moved"); err != nil {
				t.Fatal(err)
			}
			expect("DRA socket gone", http.StatusServiceUnavailable, "DRA service")
			if err := os.Rename(sock+".moved", sock); err != nil {
				t.Fatal(err)
			}
			expect("DRA socket back", http.StatusOK, "ok")

			helper.Stop()
			stopped = true
			expect("helper stopped", http.StatusServiceUnavailable, "registration service")
		})
	}
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }
