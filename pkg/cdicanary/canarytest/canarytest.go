// Package canarytest is a CRI runtime for tests of the CDI canary (cdicanary) and its callers.
package canarytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// Runtime is a CRI runtime as containerd behaves for the calls Check makes: CreateContainer
// generates an OCI spec and, where CDI is on, resolves the container's CDIDevices with the CDI
// library from cdiDirs and injects their edits, failing on a device it cannot resolve
// (containerd v1.7 pkg/cri/opts WithCDI: "failed to inject CDI devices"); with CDI off (1.7's
// default enable_cdi = false) it applies nothing and says nothing. ContainerStatus with verbose
// returns info["info"], the JSON of a ContainerInfo with the runtimeSpec.
type Runtime struct {
	CDI        bool     // CDI on, as containerd 2.x always
	CDIDirs    []string // where it reads specs
	NoInfo     bool     // a runtime whose verbose status carries no spec
	SandboxErr error    // RunPodSandbox fails
	CreateErr  error    // CreateContainer fails (before any CDI)
	// SystemdCgroup is containerd's runc option: runc then refuses a sandbox whose cgroup
	// parent is not a systemd slice (containerd makes cgroupsPath "<parent's base>:cri-containerd:<id>").
	SystemdCgroup bool

	// Sandboxes (id: running) and Containers (id: the spec generated) it holds.
	Sandboxes  map[string]bool
	Containers map[string]*oci.Spec
	// Calls counts the calls that reached it.
	Calls int
}

// New returns a runtime that applies CDI from dirs where cdi, and ignores it otherwise, with the
// systemd cgroup driver (kind's, and most nodes').
func New(cdi bool, dirs ...string) *Runtime {
	return &Runtime{CDI: cdi, CDIDirs: dirs, SystemdCgroup: true, Sandboxes: map[string]bool{}, Containers: map[string]*oci.Spec{}}
}

func (f *Runtime) newID(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, f.Calls)
}

func (f *Runtime) RunPodSandbox(_ context.Context, c *runtimeapi.PodSandboxConfig, _ string) (string, error) {
	f.Calls++
	if f.SandboxErr != nil {
		return "", f.SandboxErr
	}
	if c.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() != runtimeapi.NamespaceMode_NODE {
		return "", errors.New("fake: the canary's sandbox must share the node's network (no CNI)")
	}
	if parent := c.GetLinux().GetCgroupParent(); f.SystemdCgroup && !strings.HasSuffix(path.Base(parent), ".slice") {
		// runc's message (libcontainer/cgroups/systemd), as containerd passes it on.
		return "", fmt.Errorf("failed to create containerd task: OCI runtime create failed: runc create failed: expected cgroupsPath to be of format \"slice:prefix:name\" for systemd cgroups, got %q instead", path.Join(parent, "k8s.io", "x"))
	}
	id := f.newID("sandbox")
	f.Sandboxes[id] = true
	return id, nil
}

func (f *Runtime) StopPodSandbox(_ context.Context, id string) error {
	f.Calls++
	if _, ok := f.Sandboxes[id]; ok {
		f.Sandboxes[id] = false
	}
	return nil
}

func (f *Runtime) RemovePodSandbox(_ context.Context, id string) error {
	f.Calls++
	if f.Sandboxes[id] {
		return fmt.Errorf("fake: sandbox %s is running", id)
	}
	delete(f.Sandboxes, id)
	return nil
}

func (f *Runtime) CreateContainer(_ context.Context, sandbox string, c *runtimeapi.ContainerConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	f.Calls++
	if !f.Sandboxes[sandbox] {
		return "", fmt.Errorf("fake: sandbox %s is not ready", sandbox)
	}
	if f.CreateErr != nil {
		return "", f.CreateErr
	}
	spec := &oci.Spec{Process: &oci.Process{Args: c.Command, Env: []string{"PATH=/usr/bin"}}, Linux: &oci.Linux{}}
	if f.CDI && len(c.CDIDevices) > 0 {
		cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(f.CDIDirs...), cdiapi.WithAutoRefresh(false))
		if err != nil {
			return "", err
		}
		var ids []string
		for _, d := range c.CDIDevices {
			ids = append(ids, d.Name)
		}
		if _, err := cache.InjectDevices(spec, ids...); err != nil {
			return "", fmt.Errorf("failed to inject CDI devices: %w", err)
		}
	}
	id := f.newID("ctr")
	f.Containers[id] = spec
	return id, nil
}

func (f *Runtime) RemoveContainer(_ context.Context, id string) error {
	f.Calls++
	delete(f.Containers, id)
	return nil
}

func (f *Runtime) ContainerStatus(_ context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	f.Calls++
	spec, ok := f.Containers[id]
	if !ok {
		return nil, fmt.Errorf("fake: no container %s", id)
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: id}}
	if verbose && !f.NoInfo {
		b, _ := json.Marshal(map[string]any{"sandboxID": "x", "pid": 0, "runtimeSpec": spec})
		resp.Info = map[string]string{"info": string(b)}
	}
	return resp, nil
}
