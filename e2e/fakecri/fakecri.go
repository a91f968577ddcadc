// Package fakecri is a CRI (k8s.io/cri-api v1) server for end-to-end tests: a real kubelet talks
// to it as to a container runtime, but nothing is run. It wraps the fake runtime of
// k8s.io/cri-client/pkg/fake and adds what a DRA test needs from a runtime: on CreateContainer it
// resolves the container's CDI device IDs with the CDI library, as containerd or CRI-O would,
// injects their edits into an OCI spec, and records the result. Unlike a runtime it runs none of
// the spec's hooks and starts nothing (e2e/kind does both). An ID that cannot be resolved
// fails CreateContainer with the CDI library's error, as a runtime would.
package fakecri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// Options configure a Server.
type Options struct {
	// CDIDirs are the CDI spec directories the runtime reads, highest priority last (as in
	// containerd's cdi_spec_dirs). Empty means cdi.DefaultSpecDirs (/etc/cdi, /var/run/cdi).
	CDIDirs []string
	// ImageSize is the size the fake image service reports for every image. The kubelet refuses
	// images of size 0, so it defaults to 1 MiB.
	ImageSize uint64
}

// ContainerRecord is what the runtime saw and did for one successful CreateContainer call.
type ContainerRecord struct {
	ID            string
	SandboxID     string
	PodNamespace  string
	PodName       string
	PodUID        string
	ContainerName string
	Attempt       uint32
	// CDIDevices are the requested CDI device IDs, in request order: those of
	// ContainerConfig.CDIDevices first, then any from cdi.k8s.io/ annotations.
	CDIDevices []string
	// Devices are the Linux device nodes of the resulting OCI spec.
	Devices []DeviceNode
	// Env is the resulting process environment (container env plus CDI edits), KEY=VALUE.
	Env []string
	// Mounts are the resulting OCI mounts (container mounts plus CDI edits).
	Mounts []oci.Mount
	// Hooks are the resulting OCI hooks by stage ("createContainer", "prestart", ...), in the
	// order a runtime would run them. The fake runtime runs none of them.
	Hooks map[string][]oci.Hook
	// Spec is the complete OCI spec after CDI injection.
	Spec *oci.Spec
	// Created is when the runtime handled the request.
	Created time.Time
}

// DeviceNode is one OCI Linux device of a container.
type DeviceNode struct {
	Path  string
	Type  string
	Major int64
	Minor int64
	// FileMode is the mode the runtime creates the node with: the spec's, else the host node's;
	// zero where neither says (runc then uses 0666).
	FileMode os.FileMode
	// GID is the group the runtime creates the node with: the spec's, else the process's
	// primary group (the CDI library's default); zero is root's, runc's default.
	GID uint32
}

// CreateFailure is a CreateContainer call the runtime refused (for example an unresolvable CDI
// device). The kubelet retries such containers with back-off, so one container may fail often.
type CreateFailure struct {
	PodNamespace  string
	PodName       string
	ContainerName string
	CDIDevices    []string
	Err           string
	Time          time.Time
}

// Server is a running fake CRI runtime and image service on a unix socket.
type Server struct {
	socket string
	fake   *fake.RemoteRuntime
	grpc   *grpc.Server
	cdi    *cdi.Cache

	mu       sync.Mutex
	records  []ContainerRecord
	failures []CreateFailure
	changed  chan struct{} // closed and replaced whenever records or failures change
}

// Start serves a fake runtime on the unix socket at socketPath (created; an old file is
// removed). The kubelet's --container-runtime-endpoint is then Endpoint().
func Start(socketPath string, opts Options) (*Server, error) {
	if opts.ImageSize == 0 {
		opts.ImageSize = 1 << 20
	}
	dirs := opts.CDIDirs
	if len(dirs) == 0 {
		dirs = cdi.DefaultSpecDirs
	}
	// A runtime re-reads the spec directories before every injection; auto-refresh (fsnotify)
	// would add a race between a plugin writing a spec and the kubelet creating the container.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("creating CDI cache: %w", err)
	}

	f := fake.NewFakeRemoteRuntime()
	f.ImageService.SetFakeImageSize(opts.ImageSize)
	f.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{
		Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: true},
		},
	}
	f.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{
		CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS,
	}
	// Report a plausible image filesystem so the kubelet's stats and eviction code are content.
	fsDir := filepath.Dir(socketPath)
	usage := []*runtimeapi.FilesystemUsage{{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: fsDir},
		UsedBytes:  &runtimeapi.UInt64Value{Value: opts.ImageSize},
		InodesUsed: &runtimeapi.UInt64Value{Value: 1},
	}}
	f.ImageService.SetFakeFilesystemUsage(usage)
	f.ImageService.SetFakeContainerFilesystemUsage(usage)

	if err := os.MkdirAll(fsDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale CRI socket: %w", err)
	}
	l, err := listenUnix(socketPath)
	if err != nil {
		return nil, err
	}

	s := &Server{
		socket:  socketPath,
		fake:    f,
		grpc:    grpc.NewServer(),
		cdi:     cache,
		changed: make(chan struct{}),
	}
	rt := &runtime{RemoteRuntime: f, s: s}
	runtimeapi.RegisterRuntimeServiceServer(s.grpc, rt)
	runtimeapi.RegisterImageServiceServer(s.grpc, rt)
	go func() { _ = s.grpc.Serve(l) }()
	return s, nil
}

// SocketPath is the unix socket the server listens on.
func (s *Server) SocketPath() string { return s.socket }

// Endpoint is the CRI endpoint URL, unix://<socket>.
func (s *Server) Endpoint() string { return "unix://" + s.socket }

// Fake gives access to the wrapped fake runtime, e.g. to inject errors with
// Fake().RuntimeService.InjectError("StartContainer", err). Lock its services before reading
// their maps.
func (s *Server) Fake() *fake.RemoteRuntime { return s.fake }

// Stop stops serving at once and removes the socket.
func (s *Server) Stop() {
	s.grpc.Stop()
	_ = os.Remove(s.socket)
}

// Containers returns every successful CreateContainer, oldest first. A restarted container
// appears once per attempt.
func (s *Server) Containers() []ContainerRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records)
}

// Failures returns every refused CreateContainer, oldest first.
func (s *Server) Failures() []CreateFailure {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.failures)
}

// WaitForContainer waits until the named container of the pod has been created and returns its
// latest record. On timeout the error names the container and repeats the runtime's last
// refusal for it, if any (e.g. an unresolvable CDI device).
func (s *Server) WaitForContainer(ctx context.Context, podNamespace, podName, container string) (ContainerRecord, error) {
	for {
		s.mu.Lock()
		changed := s.changed
		for i := len(s.records) - 1; i >= 0; i-- {
			r := s.records[i]
			if r.PodNamespace == podNamespace && r.PodName == podName && r.ContainerName == container {
				s.mu.Unlock()
				return r, nil
			}
		}
		var last *CreateFailure
		for i := len(s.failures) - 1; i >= 0; i-- {
			f := s.failures[i]
			if f.PodNamespace == podNamespace && f.PodName == podName && f.ContainerName == container {
				last = &f
				break
			}
		}
		s.mu.Unlock()

		select {
		case <-changed:
		case <-ctx.Done():
			msg := fmt.Sprintf("container %s/%s/%s was not created by the runtime: %v", podNamespace, podName, container, ctx.Err())
			if last != nil {
				msg += fmt.Sprintf("; last CreateContainer failure (%s): %s", last.Time.Format(time.RFC3339), last.Err)
			}
			return ContainerRecord{}, errors.New(msg)
		}
	}
}

func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// runtime is the gRPC service: the fake with a CDI-aware CreateContainer.
type runtime struct {
	*fake.RemoteRuntime
	s *Server
}

func (r *runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	cfg := req.GetConfig()
	meta := req.GetSandboxConfig().GetMetadata()
	ids := cdiDeviceIDs(cfg)

	spec, err := r.s.injectCDI(cfg, ids)
	if err != nil {
		r.s.mu.Lock()
		r.s.failures = append(r.s.failures, CreateFailure{
			PodNamespace:  meta.GetNamespace(),
			PodName:       meta.GetName(),
			ContainerName: cfg.GetMetadata().GetName(),
			CDIDevices:    ids,
			Err:           err.Error(),
			Time:          time.Now(),
		})
		r.s.notify()
		r.s.mu.Unlock()
		return nil, err
	}

	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}

	rec := ContainerRecord{
		ID:            resp.ContainerId,
		SandboxID:     req.GetPodSandboxId(),
		PodNamespace:  meta.GetNamespace(),
		PodName:       meta.GetName(),
		PodUID:        meta.GetUid(),
		ContainerName: cfg.GetMetadata().GetName(),
		Attempt:       cfg.GetMetadata().GetAttempt(),
		CDIDevices:    ids,
		Env:           spec.Process.Env,
		Mounts:        spec.Mounts,
		Spec:          spec,
		Created:       time.Now(),
	}
	rec.Hooks = hooksByStage(spec.Hooks)
	if spec.Linux != nil {
		for _, d := range spec.Linux.Devices {
			n := DeviceNode{Path: d.Path, Type: d.Type, Major: d.Major, Minor: d.Minor}
			if d.FileMode != nil {
				n.FileMode = *d.FileMode
			}
			if d.GID != nil {
				n.GID = *d.GID
			}
			rec.Devices = append(rec.Devices, n)
		}
	}
	r.s.mu.Lock()
	r.s.records = append(r.s.records, rec)
	r.s.notify()
	r.s.mu.Unlock()
	return resp, nil
}

// hooksByStage names the stages as CDI specs do (hookName).
func hooksByStage(h *oci.Hooks) map[string][]oci.Hook {
	if h == nil {
		return nil
	}
	out := map[string][]oci.Hook{}
	//nolint:staticcheck // Prestart is deprecated in the OCI spec but still applied by runtimes.
	for stage, hooks := range map[string][]oci.Hook{
		"prestart": h.Prestart, "createRuntime": h.CreateRuntime, "createContainer": h.CreateContainer,
		"startContainer": h.StartContainer, "poststart": h.Poststart, "poststop": h.Poststop,
	} {
		if len(hooks) > 0 {
			out[stage] = hooks
		}
	}
	return out
}

// cdiDeviceIDs collects the CDI devices a runtime would inject: the CRI field the kubelet fills
// from DRA, then the older cdi.k8s.io/ annotations (containerd honours both).
func cdiDeviceIDs(cfg *runtimeapi.ContainerConfig) []string {
	var ids []string
	for _, d := range cfg.GetCDIDevices() {
		if d.GetName() != "" && !slices.Contains(ids, d.GetName()) {
			ids = append(ids, d.GetName())
		}
	}
	if _, annotated, err := cdi.ParseAnnotations(cfg.GetAnnotations()); err == nil {
		for _, id := range annotated {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// injectCDI builds the OCI spec a runtime would start from and injects the CDI devices into it.
func (s *Server) injectCDI(cfg *runtimeapi.ContainerConfig, ids []string) (*oci.Spec, error) {
	spec := &oci.Spec{
		Version: oci.Version,
		Process: &oci.Process{
			Args: append(slices.Clone(cfg.GetCommand()), cfg.GetArgs()...),
			Cwd:  cfg.GetWorkingDir(),
		},
		Linux: &oci.Linux{},
	}
	if spec.Process.Cwd == "" {
		spec.Process.Cwd = "/"
	}
	for _, kv := range cfg.GetEnvs() {
		spec.Process.Env = append(spec.Process.Env, kv.GetKey()+"="+string(kv.GetValue()))
	}
	for _, m := range cfg.GetMounts() {
		opts := []string{"rbind"}
		if m.GetReadonly() {
			opts = append(opts, "ro")
		}
		spec.Mounts = append(spec.Mounts, oci.Mount{Destination: m.GetContainerPath(), Source: m.GetHostPath(), Type: "bind", Options: opts})
	}
	if len(ids) == 0 {
		return spec, nil
	}

	// Refresh reports broken spec files but still loads the good ones; a runtime logs these and
	// goes on, and so do we, adding them to an injection error to explain it.
	refreshErr := s.cdi.Refresh()
	if _, err := s.cdi.InjectDevices(spec, ids...); err != nil {
		if refreshErr != nil {
			return nil, fmt.Errorf("CDI device injection failed: %w (CDI spec errors: %s)", err, strings.ReplaceAll(refreshErr.Error(), "\n", "; "))
		}
		return nil, fmt.Errorf("CDI device injection failed: %w", err)
	}
	return spec, nil
}
