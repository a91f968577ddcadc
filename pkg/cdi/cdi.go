// Package cdi writes one CDI spec per prepared claim, which is how the devices of a claim reach
// its containers: the kubelet hands the CDI device IDs to the runtime, and the runtime (through
// the same CDI library used here) applies the spec to the container's OCI spec.
//
// One spec per claim, with the claim UID in every device name, rather than one spec per node
// listing every device: a spec's lifetime is then exactly the claim's (write on prepare, remove
// on unprepare), a runtime never resolves an ID against a spec that belongs to another claim,
// and the claim's configuration (environment) can live in the spec.
//
// Inside a spec, isolation between the requests of one claim comes from the CDI devices: one per
// allocated device with its nodes, and (for NPUs) one per request with that request's
// environment. The kubelet passes a container only the IDs of the devices of the requests it
// uses (ResultIDs), so it sees only those nodes and that environment. The spec-wide edits carry
// what is the same for every request: control nodes, the driver's node-common edits (libraries,
// binaries, hooks; see pkg/cdi/nvidia and pkg/cdi/ascend) and the claim's configuration.
package cdi

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/accel-dra/accel-dra/pkg/devchar"
	"github.com/accel-dra/accel-dra/pkg/device"
)

const (
	// Vendor is the CDI vendor of every spec this plugin writes.
	Vendor = "accel-dra.io"

	// DefaultRoot is where runtimes look for generated (transient) specs.
	DefaultRoot = cdiapi.DefaultDynamicDir

	specExt = ".json"
	// Temporary files end in .tmp, which runtimes ignore (they load only .json and .yaml).
	tempSuffix = ".tmp"

	// devicePermissions: read and write; a container has no business creating device nodes.
	devicePermissions = "rw"
)

// Writer writes the specs of one device kind into one directory.
type Writer struct {
	root   string
	kind   device.Kind
	prefix string // file name prefix of this writer's specs: "accel-dra.io-gpu_"

	cacheOnce sync.Once
	cache     *cdiapi.Cache
	cacheErr  error

	links    *devchar.Linker
	linkWarn func(error)
}

// WithDevChar has every spec's character device nodes linked under the host's /dev/char before
// the spec is written (package devchar says why); warn gets what could not be linked, and the
// spec is written anyway.
func (w *Writer) WithDevChar(l *devchar.Linker, warn func(error)) *Writer {
	w.links, w.linkWarn = l, warn
	return w
}

// New returns a writer of specs for devices of kind into root (DefaultRoot on a node).
func New(root string, kind device.Kind) *Writer {
	return &Writer{
		root:   root,
		kind:   kind,
		prefix: cdiapi.GenerateTransientSpecName(Vendor, string(kind), ""),
	}
}

// Kind is the CDI kind of the specs, "accel-dra.io/gpu".
func Kind(kind device.Kind) string { return Vendor + "/" + string(kind) }

// DeviceID is the fully qualified CDI device ID of a device allocated to a claim,
// "accel-dra.io/gpu=<claimUID>-gpu-0". It carries the device's own nodes. The claim UID makes it
// unique across claims, so a runtime that caches specs can never resolve it to another claim's
// device.
func DeviceID(kind device.Kind, claimUID, deviceName string) string {
	return parser.QualifiedName(Vendor, string(kind), cdiDeviceName(claimUID, deviceName))
}

// RequestID is the CDI device ID of a request of a claim, "accel-dra.io/npu=<claimUID>.<request>".
// It carries what is specific to the request as a whole, such as the list of its devices in
// ASCEND_VISIBLE_DEVICES, so that a container that uses one request of a claim gets that
// request's list and not the claim's. A subrequest ("req/sub") maps to its request, which is
// what a container references. The dot cannot occur in a device name or a request name (both
// DNS labels), so request and device IDs never collide.
func RequestID(kind device.Kind, claimUID, request string) string {
	return parser.QualifiedName(Vendor, string(kind), requestDeviceName(claimUID, request))
}

func cdiDeviceName(claimUID, deviceName string) string { return claimUID + "-" + deviceName }

func requestDeviceName(claimUID, request string) string {
	return claimUID + "." + baseRequest(request)
}

// baseRequest is what a container names for a prioritized-list subrequest "req/sub": "req".
func baseRequest(request string) string {
	base, _, _ := strings.Cut(request, "/")
	return base
}

// HasRequestDevice tells whether specs of kind have a CDI device per request (RequestID). GPUs
// have none: NVIDIA's toolkit sets NVIDIA_VISIBLE_DEVICES=void on the CDI path and CUDA finds
// its devices through the device nodes alone, so a GPU request has nothing of its own beyond
// its devices' nodes.
func HasRequestDevice(kind device.Kind) bool { return kind == device.KindNPU }

// ResultIDs are the CDI device IDs the kubelet gets for one allocated device of a request: the
// device's own ID and, for the first device of each request (first is true), the request's ID.
// The kubelet gives a container the IDs of every device whose request the container uses, so
// the request's ID is listed once, not once per device.
func ResultIDs(kind device.Kind, claimUID, request, deviceName string, first bool) []string {
	ids := []string{DeviceID(kind, claimUID, deviceName)}
	if first && HasRequestDevice(kind) {
		ids = append(ids, RequestID(kind, claimUID, request))
	}
	return ids
}

// Request is one request of a claim as prepared on this node.
type Request struct {
	// Name is the request from the allocation result, "req" or the subrequest "req/sub".
	Name    string
	Devices []device.Device
}

// Claim is what goes into one claim's spec.
type Claim struct {
	UID      string
	Requests []Request
	// Common are the node-common edits of the kind (driver libraries, binaries, hooks, the
	// toolkit's environment), computed once per node and applied once per container however
	// many devices it gets. Their device nodes are ignored: Control is the authority on those.
	Common *specs.ContainerEdits
	// Control are the nodes every container with at least one device of the kind needs.
	Control []device.Node
	// Env is the claim's configuration; the driver makes sure it is the same for every
	// request, so it belongs to the spec-wide edits.
	Env []string
	// Mounts are the claim's own mounts (an MPS daemon's directories), after the common ones.
	Mounts []*specs.Mount
}

// Build returns the spec of a claim. Each allocated device becomes one CDI device with its
// nodes; for NPUs each request also becomes one CDI device with the request's
// ASCEND_VISIBLE_DEVICES. The spec-wide edits, which a runtime applies once when any of the
// claim's devices is injected, carry only what is the same for every request: the control
// nodes, the node-common edits and the claim's configuration, in a fixed order.
//
// Build checks what it can know is wrong (kind, names, env); the node details are checked by the
// CDI library in Write.
func (w *Writer) Build(c Claim) (*specs.Spec, error) {
	claimUID := c.UID
	if err := validateUID(claimUID); err != nil {
		return nil, err
	}
	if w.kind != device.KindGPU && w.kind != device.KindNPU {
		return nil, fmt.Errorf("building CDI spec of claim %s: unknown device kind %q", claimUID, w.kind)
	}
	spec := &specs.Spec{Kind: Kind(w.kind)}

	// Requests sorted by name, their devices by index; a device listed by two requests (a
	// shared device) gets one CDI device.
	requests := map[string][]device.Device{}
	for _, r := range c.Requests {
		if r.Name == "" {
			return nil, fmt.Errorf("building CDI spec of claim %s: request without a name", claimUID)
		}
		base := baseRequest(r.Name)
		requests[base] = append(requests[base], r.Devices...)
	}
	byName := map[string]device.Device{}
	for _, base := range slices.Sorted(maps.Keys(requests)) {
		devs := requests[base]
		device.Sort(devs)
		devs = slices.CompactFunc(devs, func(a, b device.Device) bool { return a.Name == b.Name })
		visible := make([]string, 0, len(devs))
		for _, d := range devs {
			if err := w.checkDevice(claimUID, d); err != nil {
				return nil, err
			}
			byName[d.Name] = d
			visible = append(visible, strconv.Itoa(d.Index))
		}
		if HasRequestDevice(w.kind) && len(devs) > 0 {
			name := requestDeviceName(claimUID, base)
			if err := parser.ValidateDeviceName(name); err != nil {
				return nil, fmt.Errorf("building CDI spec of claim %s: request %s: %w", claimUID, base, err)
			}
			spec.Devices = append(spec.Devices, specs.Device{
				Name:           name,
				ContainerEdits: specs.ContainerEdits{Env: []string{"ASCEND_VISIBLE_DEVICES=" + strings.Join(visible, ",")}},
			})
		}
	}
	if len(byName) == 0 {
		return nil, fmt.Errorf("building CDI spec of claim %s: no devices", claimUID)
	}
	devs := slices.Collect(maps.Values(byName))
	device.Sort(devs)
	for _, d := range devs {
		spec.Devices = append(spec.Devices, specs.Device{
			Name:           cdiDeviceName(claimUID, d.Name),
			ContainerEdits: specs.ContainerEdits{DeviceNodes: deviceNodes(d.Nodes)},
		})
	}
	slices.SortFunc(spec.Devices, func(a, b specs.Device) int { return strings.Compare(a.Name, b.Name) })

	edits, err := w.claimEdits(c)
	if err != nil {
		return nil, fmt.Errorf("building CDI spec of claim %s: %w", claimUID, err)
	}
	spec.ContainerEdits = edits

	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("building CDI spec of claim %s: %w", claimUID, err)
	}
	spec.Version = v
	return spec, nil
}

func (w *Writer) checkDevice(claimUID string, d device.Device) error {
	if d.Kind != w.kind {
		return fmt.Errorf("building CDI spec of claim %s: device %s is a %s, this writer is for %s", claimUID, d.Name, d.Kind, w.kind)
	}
	if err := parser.ValidateDeviceName(cdiDeviceName(claimUID, d.Name)); err != nil {
		return fmt.Errorf("building CDI spec of claim %s: device %s: %w", claimUID, d.Name, err)
	}
	if len(d.Nodes) == 0 {
		return fmt.Errorf("building CDI spec of claim %s: device %s has no device nodes", claimUID, d.Name)
	}
	if w.kind == device.KindGPU && d.UUID == "" {
		return fmt.Errorf("building CDI spec of claim %s: device %s has no UUID", claimUID, d.Name)
	}
	return nil
}

// claimEdits are the spec-wide edits: control nodes, the node-common edits without their device
// nodes, and the environment of both plus the claim's configuration. For GPUs the environment
// always holds NVIDIA_VISIBLE_DEVICES=void, as NVIDIA's own CDI specs do, so that an NVIDIA
// runtime hook left in legacy mode on the node injects nothing behind CDI's back.
func (w *Writer) claimEdits(c Claim) (specs.ContainerEdits, error) {
	var edits specs.ContainerEdits
	var env []string
	if c.Common != nil {
		edits.Hooks = c.Common.Hooks
		edits.Mounts = c.Common.Mounts
		edits.AdditionalGIDs = c.Common.AdditionalGIDs
		edits.IntelRdt = c.Common.IntelRdt
		env = append(env, c.Common.Env...)
	}
	if w.kind == device.KindGPU && !slices.Contains(env, nvidiaVisibleVoid) {
		env = append(env, nvidiaVisibleVoid)
	}
	merged, err := mergeEnv(env, c.Env)
	if err != nil {
		return edits, err
	}
	edits.Env = merged
	edits.Mounts = append(slices.Clone(edits.Mounts), c.Mounts...)
	edits.DeviceNodes = deviceNodes(c.Control)
	return edits, nil
}

const nvidiaVisibleVoid = "NVIDIA_VISIBLE_DEVICES=void"

func deviceNodes(nodes []device.Node) []*specs.DeviceNode {
	if len(nodes) == 0 {
		return nil
	}
	out := make([]*specs.DeviceNode, 0, len(nodes))
	for _, n := range nodes {
		dn := &specs.DeviceNode{
			Path:        n.Path,
			HostPath:    n.HostPath,
			Type:        n.Type,
			Major:       n.Major,
			Minor:       n.Minor,
			Permissions: devicePermissions,
		}
		if n.FileMode != 0 {
			// A node the host may lack (a MIG caps node) gets the driver's mode; without it the
			// runtime copies the host node's mode, or uses its default where there is none.
			mode := n.FileMode
			dn.FileMode = &mode
		}
		if n.GID != 0 {
			// The host node's group (HwHiAiUser, render, NVreg_DeviceFileGID): a runtime does not
			// copy it, and gives the node the process's primary group or root's instead, which
			// locks out a process that has the host's group only as a supplementary one.
			gid := n.GID
			dn.GID = &gid
		}
		out = append(out, dn)
	}
	return out
}

// mergeEnv sorts the environment and refuses a variable set twice to different values: which
// value a runtime keeps is an accident of ordering, and a claim's configuration must not
// silently override what the driver's edits need (NVIDIA_VISIBLE_DEVICES=void, for one).
func mergeEnv(base, extra []string) ([]string, error) {
	env := slices.Concat(base, extra)
	if err := cdiapi.ValidateEnv(env); err != nil {
		return nil, err
	}
	slices.SortFunc(env, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return cmp.Or(strings.Compare(ka, kb), strings.Compare(a, b))
	})
	env = slices.Compact(env)
	for i := 1; i < len(env); i++ {
		prev, _, _ := strings.Cut(env[i-1], "=")
		key, _, _ := strings.Cut(env[i], "=")
		if prev == key {
			return nil, fmt.Errorf("environment variable %s set twice (%q, %q)", key, env[i-1], env[i])
		}
	}
	if len(env) == 0 {
		return nil, nil
	}
	return env, nil
}

// Path is the file the spec of claimUID is written to.
func (w *Writer) Path(claimUID string) string {
	return filepath.Join(w.root, w.prefix+claimUID+specExt)
}

// Write validates spec and writes it as the claim's spec file, replacing any previous one.
//
// It goes through the CDI library's own Cache.WriteSpec, which validates the spec in memory with
// the same checks a runtime's loader applies and then writes it to a temporary file (ignored by
// runtimes) renamed into place, so an invalid spec never becomes visible and nothing is left
// behind when validation fails. The CDI directory is normally tmpfs (/var/run), whose contents do
// not survive a reboot anyway, so there is no fsync: the rename alone gives readers all or
// nothing, and a spec lost in a crash is re-created from the checkpoint.
func (w *Writer) Write(claimUID string, spec *specs.Spec) (err error) {
	if err := validateUID(claimUID); err != nil {
		return err
	}
	if spec == nil {
		return fmt.Errorf("writing CDI spec of claim %s: nil spec", claimUID)
	}
	if spec.Kind != Kind(w.kind) {
		return fmt.Errorf("writing CDI spec of claim %s: kind %q, this writer writes %q", claimUID, spec.Kind, Kind(w.kind))
	}
	if err := os.MkdirAll(w.root, 0o755); err != nil {
		return fmt.Errorf("writing CDI spec of claim %s: %w", claimUID, err)
	}
	w.cacheOnce.Do(func() {
		// Auto-refresh off: the cache is used only to write, and a directory watcher per
		// plugin would cost an inotify instance and a goroutine for nothing.
		w.cache, w.cacheErr = cdiapi.NewCache(cdiapi.WithSpecDirs(w.root), cdiapi.WithAutoRefresh(false))
	})
	if w.cacheErr != nil {
		return fmt.Errorf("writing CDI spec of claim %s: %w", claimUID, w.cacheErr)
	}
	if err := w.links.Ensure(spec); err != nil && w.linkWarn != nil {
		w.linkWarn(fmt.Errorf("claim %s: %w", claimUID, err))
	}
	// The name carries the extension, so the library writes JSON rather than its YAML default.
	if err := w.cache.WriteSpec(spec, filepath.Base(w.Path(claimUID))); err != nil {
		return fmt.Errorf("writing CDI spec of claim %s: invalid spec: %w", claimUID, err)
	}
	return nil
}

// Remove deletes the claim's spec; a spec that does not exist is not an error, because
// unprepare is retried.
func (w *Writer) Remove(claimUID string) error {
	if err := validateUID(claimUID); err != nil {
		return err
	}
	if err := os.Remove(w.Path(claimUID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// Exists tells whether the claim's spec file is present.
func (w *Writer) Exists(claimUID string) bool {
	if validateUID(claimUID) != nil {
		return false
	}
	_, err := os.Stat(w.Path(claimUID))
	return err == nil
}

// List returns, sorted, the UIDs of the claims that have a spec of this writer's kind in the
// directory, so that the caller can remove specs no checkpointed claim owns. Specs of other
// vendors and kinds, and temporary files, are ignored. A missing directory has no specs.
func (w *Writer) List() ([]string, error) {
	entries, err := os.ReadDir(w.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing CDI specs: %w", err)
	}
	var uids []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, w.prefix) || !strings.HasSuffix(name, specExt) {
			continue
		}
		uid := strings.TrimSuffix(strings.TrimPrefix(name, w.prefix), specExt)
		if validateUID(uid) == nil {
			uids = append(uids, uid)
		}
	}
	slices.Sort(uids)
	return uids, nil
}

// validateUID keeps claim UIDs to what can be part of both a file name and a CDI device name.
// Kubernetes UIDs are UUIDs, well inside this.
func validateUID(uid string) error {
	if uid == "" {
		return errors.New("empty claim UID")
	}
	if err := parser.ValidateDeviceName(uid); err != nil {
		return fmt.Errorf("claim UID %q: %w", uid, err)
	}
	return nil
}
