package fakecri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const spec = `cdiVersion: "0.6.0"
kind: example.com/gpu
devices:
- name: gpu0
  containerEdits:
    env: ["GPU=0"]
    deviceNodes:
    - path: /dev/gpu0
      hostPath: /dev/null
- name: gpu1
  containerEdits:
    deviceNodes:
    - path: /dev/gpu1
      type: c
      major: 195
      minor: 1
    - path: /dev/gpu-caps/cap12
      type: c
      major: 509
      minor: 12
      fileMode: 292
containerEdits:
  env: ["VENDOR=example"]
  mounts:
  - hostPath: /opt/driver/lib/libexample.so.1
    containerPath: /usr/lib/libexample.so.1
    options: [ro, rbind]
  hooks:
  - hookName: createContainer
    path: /usr/bin/example-hook
    args: [example-hook, update-ldcache, --folder, /usr/lib]
`

func TestCreateContainerResolvesCDI(t *testing.T) {
	dir, err := os.MkdirTemp("", "fakecri-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cdiDir := filepath.Join(dir, "cdi")
	if err := os.MkdirAll(cdiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Start(filepath.Join(dir, "cri.sock"), Options{CDIDirs: []string{cdiDir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)

	conn, err := grpc.NewClient(s.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sandboxCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod", Namespace: "ns", Uid: "uid-1"}}
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxCfg})
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string, ids ...string) (*runtimeapi.CreateContainerResponse, error) {
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image:    &runtimeapi.ImageSpec{Image: "pause"},
			Envs:     []*runtimeapi.KeyValue{{Key: "A", Value: []byte("b")}},
		}
		for _, id := range ids {
			cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: id})
		}
		return rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: cfg, SandboxConfig: sandboxCfg})
	}

	// The spec does not exist yet: a runtime refuses the container.
	if _, err := create("early", "example.com/gpu=gpu0"); err == nil || !strings.Contains(err.Error(), "unresolvable CDI devices example.com/gpu=gpu0") {
		t.Fatalf("CreateContainer before the spec exists: err = %v, want unresolvable CDI device", err)
	}
	if f := s.Failures(); len(f) != 1 || f[0].ContainerName != "early" {
		t.Fatalf("failures = %+v", f)
	}

	// Written later, it is picked up on the next request.
	if err := os.WriteFile(filepath.Join(cdiDir, "example.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := create("ctr", "example.com/gpu=gpu0", "example.com/gpu=gpu1"); err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	rec, err := s.WaitForContainer(ctx, "ns", "pod", "ctr")
	if err != nil {
		t.Fatal(err)
	}
	// A node given by host path gets the host node's numbers and mode; a fully specified one
	// is created from the spec, although no such node exists on the host.
	want := []DeviceNode{
		{Path: "/dev/gpu0", Type: "c", Major: 1, Minor: 3, FileMode: 0o666},
		{Path: "/dev/gpu1", Type: "c", Major: 195, Minor: 1},
		{Path: "/dev/gpu-caps/cap12", Type: "c", Major: 509, Minor: 12, FileMode: 0o444},
	}
	if len(rec.Devices) != len(want) {
		t.Fatalf("devices = %+v, want %+v", rec.Devices, want)
	}
	for i := range want {
		if rec.Devices[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, rec.Devices[i], want[i])
		}
	}
	for _, env := range []string{"A=b", "GPU=0", "VENDOR=example"} {
		if !strings.Contains(strings.Join(rec.Env, " "), env) {
			t.Errorf("env %v lacks %s", rec.Env, env)
		}
	}
	if len(rec.Mounts) != 1 || rec.Mounts[0].Destination != "/usr/lib/libexample.so.1" || rec.Mounts[0].Source != "/opt/driver/lib/libexample.so.1" {
		t.Errorf("mounts = %+v, want the spec's library", rec.Mounts)
	}
	if h := rec.Hooks["createContainer"]; len(h) != 1 || h[0].Path != "/usr/bin/example-hook" || strings.Join(h[0].Args, " ") != "example-hook update-ldcache --folder /usr/lib" || len(rec.Hooks) != 1 {
		t.Errorf("hooks = %+v, want the spec's createContainer hook", rec.Hooks)
	}
	if rec.PodUID != "uid-1" || len(rec.CDIDevices) != 2 {
		t.Errorf("record = %+v", rec)
	}

	// Waiting for a container that never comes reports the runtime's refusal.
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if _, err := s.WaitForContainer(short, "ns", "pod", "early"); err == nil || !strings.Contains(err.Error(), "unresolvable") {
		t.Errorf("WaitForContainer(early) = %v, want an error quoting the CDI failure", err)
	}
}
