// Package cdi writes one CDI spec per prepared claim, which is how the devices of a claim reach
// its containers: the kubelet hands the CDI device IDs to the runtime, and the runtime (through
// the same CDI library used here) applies the spec to the container's OCI spec.
//
// One spec per claim, with the claim UID in every device name, rather than one spec per node
// listing every device: a spec's lifetime is then exactly the claim's (write on prepare, remove
// on unprepare), a runtime never resolves an ID against a spec that belongs to another claim,
// and the claim's configuration (environment) can live in the spec.
package cdi

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

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
// "accel-dra.io/gpu=<claimUID>-gpu-0". The claim UID makes it unique across claims, so a
// runtime that caches specs can never resolve it to another claim's device.
func DeviceID(kind device.Kind, claimUID, deviceName string) string {
	return parser.QualifiedName(Vendor, string(kind), cdiDeviceName(claimUID, deviceName))
}

func cdiDeviceName(claimUID, deviceName string) string { return claimUID + "-" + deviceName }

// Build returns the spec of a claim that got devs. Each device becomes one CDI device with its
// nodes. The spec-wide edits, which a runtime applies once when any of the claim's devices is
// injected, carry the control nodes every user of the driver needs and the environment: the
// visible-devices variable of the kind plus env (from the claim's configuration), sorted.
//
// Build checks what it can know is wrong (kind, names, env); the node details are checked by the
// CDI library in Write.
func (w *Writer) Build(claimUID string, devs []device.Device, control []device.Node, env []string) (*specs.Spec, error) {
	if err := validateUID(claimUID); err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("building CDI spec of claim %s: no devices", claimUID)
	}
	devs = slices.Clone(devs)
	device.Sort(devs)

	spec := &specs.Spec{Kind: Kind(w.kind)}
	visible := make([]string, 0, len(devs))
	for _, d := range devs {
		if d.Kind != w.kind {
			return nil, fmt.Errorf("building CDI spec of claim %s: device %s is a %s, this writer is for %s", claimUID, d.Name, d.Kind, w.kind)
		}
		name := cdiDeviceName(claimUID, d.Name)
		if err := parser.ValidateDeviceName(name); err != nil {
			return nil, fmt.Errorf("building CDI spec of claim %s: device %s: %w", claimUID, d.Name, err)
		}
		if len(d.Nodes) == 0 {
			return nil, fmt.Errorf("building CDI spec of claim %s: device %s has no device nodes", claimUID, d.Name)
		}
		spec.Devices = append(spec.Devices, specs.Device{
			Name:           name,
			ContainerEdits: specs.ContainerEdits{DeviceNodes: deviceNodes(d.Nodes)},
		})
		switch w.kind {
		case device.KindGPU:
			if d.UUID == "" {
				return nil, fmt.Errorf("building CDI spec of claim %s: device %s has no UUID", claimUID, d.Name)
			}
			visible = append(visible, d.UUID)
		default:
			visible = append(visible, strconv.Itoa(d.Index))
		}
	}

	var visibleVar string
	switch w.kind {
	case device.KindGPU:
		visibleVar = "NVIDIA_VISIBLE_DEVICES"
	case device.KindNPU:
		visibleVar = "ASCEND_VISIBLE_DEVICES"
	default:
		return nil, fmt.Errorf("building CDI spec of claim %s: unknown device kind %q", claimUID, w.kind)
	}
	allEnv, err := mergeEnv(visibleVar+"="+strings.Join(visible, ","), env)
	if err != nil {
		return nil, fmt.Errorf("building CDI spec of claim %s: %w", claimUID, err)
	}
	spec.ContainerEdits.Env = allEnv
	spec.ContainerEdits.DeviceNodes = deviceNodes(control)

	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("building CDI spec of claim %s: %w", claimUID, err)
	}
	spec.Version = v
	return spec, nil
}

func deviceNodes(nodes []device.Node) []*specs.DeviceNode {
	if len(nodes) == 0 {
		return nil
	}
	out := make([]*specs.DeviceNode, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, &specs.DeviceNode{
			Path:        n.Path,
			HostPath:    n.HostPath,
			Type:        n.Type,
			Major:       n.Major,
			Minor:       n.Minor,
			Permissions: devicePermissions,
		})
	}
	return out
}

// mergeEnv sorts the environment and refuses a variable set twice: which value a runtime keeps
// is an accident of ordering, and the config must not silently override the visible devices.
func mergeEnv(visible string, extra []string) ([]string, error) {
	env := append([]string{visible}, extra...)
	if err := cdiapi.ValidateEnv(env); err != nil {
		return nil, err
	}
	slices.SortFunc(env, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return cmp.Or(strings.Compare(ka, kb), strings.Compare(a, b))
	})
	for i := 1; i < len(env); i++ {
		prev, _, _ := strings.Cut(env[i-1], "=")
		key, _, _ := strings.Cut(env[i], "=")
		if prev == key {
			return nil, fmt.Errorf("environment variable %s set twice (%q, %q)", key, env[i-1], env[i])
		}
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
