// Package cdicanary asks the node's container runtime whether it applies CDI devices, by the
// path a claim's devices take: it writes a CDI spec of one canary device whose only edit is an
// environment variable, creates (never starts) a container that asks for that device in the
// CRI's CDIDevices field, where the kubelet puts a claim's CDI device IDs, and reads the OCI spec
// the runtime generated for it back from the runtime's verbose container status. containerd 1.7
// without enable_cdi = true creates that container without the edit, and without an error, as
// it starts every claim's container without its devices; the canary sees the missing variable.
//
// It talks to the runtime's CRI socket itself rather than running a pod: a pod would need a
// claim for a device the scheduler allocates, a node the plugin has not published yet, and
// minutes; the CRI call takes a second, before the plugin publishes anything. What it does
// not exercise is the kubelet's part, putting the claim's IDs into CDIDevices, which is the
// kubelet's contract (k8s.io/kubernetes pkg/kubelet/cm/dra: CDIDevices of the container's
// ContainerConfig).
//
// Nothing of it outlives Check: the container, its sandbox and the spec file go whatever the
// result. The sandbox shares the node's network (no CNI address is taken).
package cdicanary

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

const (
	// Vendor and Class make the canary's CDI kind, accel-dra.io/canary: none of the plugin's
	// device kinds, so that no spec collection of the plugin takes its file for a claim's.
	Vendor = "accel-dra.io"
	Class  = "canary"
	// EnvName is the variable the canary device's spec sets; its value is the check's nonce.
	EnvName = "ACCEL_DRA_CDI_CANARY"
	// SandboxName is the canary sandbox's metadata name, as crictl pods shows it.
	SandboxName = "accel-dra-cdi-canary"
	// CgroupParent is the canary sandbox's cgroup parent.
	CgroupParent = "kubepods.slice"
)

// Runtime is what the canary needs of a CRI runtime service (k8s.io/cri-api's RuntimeService,
// as k8s.io/cri-client's remote runtime service implements it).
type Runtime interface {
	RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error)
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
	CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
	RemoveContainer(ctx context.Context, containerID string) error
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
}

// Options configure Check.
type Options struct {
	// CDIDir is a directory the runtime reads CDI specs from, as this process sees it (the
	// plugin's --cdi-root).
	CDIDir string
	// Image is an image the runtime has (the plugin's own): the container is created from it,
	// never started.
	Image string
	// Namespace is the sandbox's metadata namespace (the plugin's).
	Namespace string
}

// ErrNoSpec is returned where the runtime's verbose container status carries no OCI spec, so
// that the canary cannot tell what the runtime did with the device.
var ErrNoSpec = errors.New("the runtime's verbose container status has no runtimeSpec")

// Check reports whether the runtime applied the canary device's edit to the container it
// created: true where it did, false where it created the container without it (the runtime
// ignores CDI). An error says the canary could not tell: the runtime refused a step (a runtime
// that applies CDI but cannot resolve the device fails CreateContainer, as it fails a claim's
// container: visibly), or gave no spec to read.
func Check(ctx context.Context, rt Runtime, o Options) (applied bool, err error) {
	if o.CDIDir == "" || o.Image == "" {
		return false, errors.New("the CDI canary needs a CDI directory and an image")
	}
	logger := klog.FromContext(ctx)
	nonce, err := newNonce()
	if err != nil {
		return false, err
	}
	device := parser.QualifiedName(Vendor, Class, nonce)
	specFile, err := writeSpec(o.CDIDir, nonce)
	if err != nil {
		return false, err
	}
	// Clean-up runs with a context of its own: the caller's may be the one that ran out.
	cleanupCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(klog.NewContext(context.WithoutCancel(ctx), logger), 10*time.Second)
	}
	defer func() {
		if rerr := os.Remove(specFile); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			logger.Error(rerr, "Removing the CDI canary's spec", "path", specFile)
		}
	}()

	sandboxConfig := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: SandboxName, Namespace: o.Namespace, Uid: nonce},
		Labels:   map[string]string{"app.kubernetes.io/name": SandboxName},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			// A runtime with the systemd cgroup driver (kind's, most nodes') refuses a sandbox
			// without a slice: runc wants cgroupsPath "slice:prefix:name", which containerd
			// makes from the parent's base name. The kubelet's pods live under kubepods.slice.
			// With the cgroupfs driver containerd joins it as a path, relative to its own
			// cgroup, where runc creates it for the second the sandbox lives.
			CgroupParent: CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
	sandbox, err := rt.RunPodSandbox(ctx, sandboxConfig, "")
	if err != nil {
		return false, fmt.Errorf("CDI canary: running its pod sandbox: %w", err)
	}
	defer func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if serr := rt.StopPodSandbox(ctx, sandbox); serr != nil {
			logger.Error(serr, "Stopping the CDI canary's pod sandbox", "sandbox", sandbox)
		}
		if rerr := rt.RemovePodSandbox(ctx, sandbox); rerr != nil {
			logger.Error(rerr, "Removing the CDI canary's pod sandbox", "sandbox", sandbox)
		}
	}()
	ctr, err := rt.CreateContainer(ctx, sandbox, &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: "canary"},
		Image:      &runtimeapi.ImageSpec{Image: o.Image},
		Command:    []string{"/canary-never-started"},
		CDIDevices: []*runtimeapi.CDIDevice{{Name: device}},
	}, sandboxConfig)
	if err != nil {
		return false, fmt.Errorf("CDI canary: creating a container with CDI device %s: %w", device, err)
	}
	defer func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if rerr := rt.RemoveContainer(ctx, ctr); rerr != nil {
			logger.Error(rerr, "Removing the CDI canary's container", "container", ctr)
		}
	}()
	st, err := rt.ContainerStatus(ctx, ctr, true)
	if err != nil {
		return false, fmt.Errorf("CDI canary: reading its container's status: %w", err)
	}
	spec, err := runtimeSpec(st.GetInfo())
	if err != nil {
		return false, fmt.Errorf("CDI canary: %w", err)
	}
	var env []string
	if spec.Process != nil {
		env = spec.Process.Env
	}
	return slices.Contains(env, EnvName+"="+nonce), nil
}

// runtimeSpec is the OCI spec in a verbose container status: containerd's info["info"] is the
// JSON of its ContainerInfo, whose runtimeSpec is the spec it generated (containerd v1.7
// pkg/cri/server/container_status.go, v2 internal/cri/server/container_status.go); CRI-O's
// carries runtimeSpec too.
func runtimeSpec(info map[string]string) (*oci.Spec, error) {
	raw, ok := info["info"]
	if !ok {
		return nil, ErrNoSpec
	}
	var ci struct {
		RuntimeSpec *oci.Spec `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(raw), &ci); err != nil {
		return nil, fmt.Errorf("reading the runtime's verbose container status: %w", err)
	}
	if ci.RuntimeSpec == nil {
		return nil, ErrNoSpec
	}
	return ci.RuntimeSpec, nil
}

// writeSpec writes the canary device's spec into dir through the CDI library, which validates
// it as a runtime's loader does and renames it into place, and returns its path.
func writeSpec(dir, nonce string) (string, error) {
	spec := &specs.Spec{
		Kind: Vendor + "/" + Class,
		Devices: []specs.Device{{
			Name:           nonce,
			ContainerEdits: specs.ContainerEdits{Env: []string{EnvName + "=" + nonce}},
		}},
	}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return "", fmt.Errorf("CDI canary's spec: %w", err)
	}
	spec.Version = v
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("CDI canary's spec: %w", err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return "", fmt.Errorf("CDI canary's spec: %w", err)
	}
	name := cdiapi.GenerateTransientSpecName(Vendor, Class, nonce) + ".json"
	if err := cache.WriteSpec(spec, name); err != nil {
		return "", fmt.Errorf("CDI canary's spec: %w", err)
	}
	return filepath.Join(dir, name), nil
}

// newNonce names one check: the device, the variable's value, the sandbox's UID. Two plugins of
// a node (GPU and NPU) check at once without meeting.
func newNonce() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("CDI canary: %w", err)
	}
	return "c" + hex.EncodeToString(b), nil
}
