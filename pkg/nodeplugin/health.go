package nodeplugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// healthTimeout bounds one probe of both sockets; the kubelet's own calls time out after
// seconds, so a plugin that cannot answer in this time is not serving it either.
const healthTimeout = 5 * time.Second

// healthChecker answers /healthz by connecting to the plugin's own sockets as the kubelet does:
// GetInfo on the registration socket (the plugin watcher's first call), and a gRPC connection
// on the DRA socket that must reach READY (the server completed the HTTP/2 handshake). The DRA
// socket gets no RPC because both of its RPCs take the helper's serialisation lock, shared with
// other instances during a rolling update, and a liveness probe must not queue behind a prepare.
// A helper whose gRPC servers stopped, or whose socket was removed (a wiped plugin directory),
// fails; so does a registration the kubelet rejected, so that the liveness probe restarts a
// plugin the kubelet no longer talks to.
type healthChecker struct {
	driverName      string
	registrarSocket string
	pluginSocket    string
	// status is the helper's RegistrationStatus: nil until the kubelet has answered.
	status func() *registerapi.RegistrationStatus
}

// newHealthChecker finds the helper's sockets where kubeletplugin puts them for these options:
// <registrar dir>/<driver>-reg.sock, or RollingUpdateRegistrarSocketFile with a pod UID, and
// <plugin data dir>/dra[-<pod UID>].sock.
func newHealthChecker(o *Options, helper *kubeletplugin.Helper) *healthChecker {
	reg := o.DriverName + "-reg.sock"
	plugin := "dra.sock"
	if o.PodUID != "" {
		reg = kubeletplugin.RollingUpdateRegistrarSocketFile(o.RegistrarDir, o.DriverName, types.UID(o.PodUID))
		plugin = "dra-" + o.PodUID + ".sock"
	}
	return &healthChecker{
		driverName:      o.DriverName,
		registrarSocket: filepath.Join(o.RegistrarDir, reg),
		pluginSocket:    filepath.Join(o.PluginDataDir, plugin),
		status:          helper.RegistrationStatus,
	}
}

// check returns nil when the plugin serves both gRPC services and its registration stands.
func (h *healthChecker) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	if st := h.status(); st != nil && !st.PluginRegistered {
		return fmt.Errorf("kubelet registration failed or was withdrawn: %s", st.Error)
	}
	var info *registerapi.PluginInfo
	if err := call(h.registrarSocket, func(c *grpc.ClientConn) (err error) {
		info, err = registerapi.NewRegistrationClient(c).GetInfo(ctx, &registerapi.InfoRequest{})
		return err
	}); err != nil {
		return fmt.Errorf("registration service on %s: %w", h.registrarSocket, err)
	}
	if info.Name != h.driverName {
		return fmt.Errorf("registration service on %s answers for driver %q, not %q", h.registrarSocket, info.Name, h.driverName)
	}
	if err := call(h.pluginSocket, func(c *grpc.ClientConn) error { return waitReady(ctx, c) }); err != nil {
		return fmt.Errorf("DRA service on %s: %w", h.pluginSocket, err)
	}
	return nil
}

func call(socket string, f func(*grpc.ClientConn) error) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	return errors.Join(f(conn), conn.Close())
}

// waitReady connects c and waits until it is READY. A unix socket nobody listens on makes the
// connection fail at once (TRANSIENT_FAILURE), so this does not wait out the timeout then.
func waitReady(ctx context.Context, c *grpc.ClientConn) error {
	c.Connect()
	for {
		st := c.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("connection %s", st)
		}
		if !c.WaitForStateChange(ctx, st) {
			return fmt.Errorf("connection still %s: %w", st, ctx.Err())
		}
	}
}

// ServeHTTP implements /healthz.
func (h *healthChecker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.check(r.Context()); err != nil {
		klog.FromContext(r.Context()).Error(err, "Health check failed")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok"))
}
