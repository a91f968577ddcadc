package cdicanary

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Dial connects to the CRI runtime service at endpoint (unix:///run/containerd/containerd.sock
// or a plain socket path); close releases the connection. The connection is made by the first
// call, whose context bounds it.
func Dial(endpoint string) (rt Runtime, close func() error, err error) {
	if !strings.HasPrefix(endpoint, "unix://") {
		if !strings.HasPrefix(endpoint, "/") {
			return nil, nil, fmt.Errorf("CRI endpoint %q: want unix:///path or /path", endpoint)
		}
		endpoint = "unix://" + endpoint
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("CRI endpoint %s: %w", endpoint, err)
	}
	return criClient{runtimeapi.NewRuntimeServiceClient(conn)}, conn.Close, nil
}

// criClient is Runtime over the CRI's gRPC client, as the kubelet calls it.
type criClient struct {
	c runtimeapi.RuntimeServiceClient
}

func (r criClient) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	resp, err := r.c.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: config, RuntimeHandler: handler})
	return resp.GetPodSandboxId(), err
}

func (r criClient) StopPodSandbox(ctx context.Context, id string) error {
	_, err := r.c.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

func (r criClient) RemovePodSandbox(ctx context.Context, id string) error {
	_, err := r.c.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}

func (r criClient) CreateContainer(ctx context.Context, sandbox string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	resp, err := r.c.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandbox, Config: config, SandboxConfig: sandboxConfig})
	return resp.GetContainerId(), err
}

func (r criClient) RemoveContainer(ctx context.Context, id string) error {
	_, err := r.c.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
	return err
}

func (r criClient) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	return r.c.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: verbose})
}
