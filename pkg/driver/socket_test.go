package driver

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// TestKubeletSocket drives the plugin the way the kubelet does: registration over the registrar
// socket, then NodePrepareResources/NodeUnprepareResources over the plugin's gRPC socket, with
// the kubelet's own API types. The claims come from a fake clientset here; the e2e suite runs
// the same path against a real apiserver and kubelet.
func TestKubeletSocket(t *testing.T) {
	e := newEnv(t, inventory(4))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()

	good := claim("uid-good", []result{{Device: "gpu-0"}, {Device: "gpu-1"}})
	bad := claim("uid-bad", []result{{Device: "gpu-7"}})
	for _, c := range []*resourceapi.ResourceClaim{good, bad} {
		if _, err := e.kube.ResourceV1().ResourceClaims("ns").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	regDir, dataDir := filepath.Join(e.dir, "registry"), filepath.Join(e.dir, "plugin")
	for _, d := range []string{regDir, dataDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	helper, err := kubeletplugin.Start(ctx, e.drv,
		kubeletplugin.DriverName(driverName), kubeletplugin.NodeName(nodeName), kubeletplugin.KubeClient(e.kube),
		kubeletplugin.RegistrarDirectoryPath(regDir), kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.Serialize(false))
	if err != nil {
		t.Fatal(err)
	}
	defer helper.Stop()

	reg := registerapi.NewRegistrationClient(dial(t, filepath.Join(regDir, driverName+"-reg.sock")))
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != driverName || info.Endpoint != filepath.Join(dataDir, "dra.sock") {
		t.Fatalf("registration info %+v", info)
	}
	if !slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
		t.Fatalf("plugin does not offer %s: %v", drapb.DRAPluginService, info.SupportedVersions)
	}

	dra := drapb.NewDRAPluginClient(dial(t, info.Endpoint))
	req := &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: "ns", Name: good.Name, Uid: string(good.UID)},
		{Namespace: "ns", Name: bad.Name, Uid: string(bad.UID)},
	}}
	resp, err := dra.NodePrepareResources(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	g := resp.Claims[string(good.UID)]
	if g == nil || g.Error != "" || len(g.Devices) != 2 {
		t.Fatalf("good claim: %+v", g)
	}
	if d := g.Devices[1]; d.DeviceName != "gpu-1" || d.PoolName != nodeName || d.RequestNames[0] != "gpu" || d.CdiDeviceIds[0] != "accel-dra.io/gpu=uid-good-gpu-1" {
		t.Fatalf("device %+v", d)
	}
	if b := resp.Claims[string(bad.UID)]; b == nil || !strings.Contains(b.Error, "gpu-7") || !strings.Contains(b.Error, "ns/claim-uid-bad") {
		t.Fatalf("bad claim: %+v", b)
	}

	// A claim the apiserver does not have fails the whole call, naming it.
	if _, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "ns", Name: "missing", Uid: "x"}}}); err == nil || !strings.Contains(err.Error(), "ns/missing") {
		t.Fatalf("prepare of a missing claim: %v", err)
	}

	un, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: "ns", Name: good.Name, Uid: string(good.UID)},
		{Namespace: "ns", Name: "never", Uid: "never-prepared"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(un.Claims) != 2 || un.Claims[string(good.UID)].Error != "" || un.Claims["never-prepared"].Error != "" {
		t.Fatalf("unprepare: %+v", un.Claims)
	}
	if exists(e.specPath(good.UID)) || len(e.drv.PreparedClaims()) != 0 {
		t.Fatal("unprepare over the socket left state behind")
	}
}

func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			t.Cleanup(func() { _ = conn.Close() })
			return conn
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial %s: %v", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
