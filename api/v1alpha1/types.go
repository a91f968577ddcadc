// Package v1alpha1 is the opaque device configuration of the accel-dra drivers: the objects a
// user puts in `opaque.parameters` of a ResourceClaim or DeviceClass config entry for the
// driver. It is an API, versioned like a Kubernetes one, because users program against it and a
// later version must be able to tell an old object from a new one.
//
// See docs/claim-config.md for the user-facing contract.
package v1alpha1

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/accel-dra/accel-dra/pkg/device"
)

const (
	// GroupName and Version make up the apiVersion of every object here.
	GroupName = "accel-dra.io"
	Version   = "v1alpha1"

	GpuConfigKind = "GpuConfig"
	NpuConfigKind = "NpuConfig"
)

// Config is the configuration of one request's devices, whatever their kind.
type Config interface {
	runtime.Object
	// DeviceKind is the kind of device the config applies to; a driver refuses the others.
	DeviceKind() device.Kind
	// Default fills in what the user left out.
	Default()
	// Validate returns nil or an error whose message names each bad field by its path.
	Validate() error
	// Env is what the config adds to the environment of containers using the devices, sorted
	// by variable name.
	Env() []string
}

// Driver capabilities, as the NVIDIA container toolkit understands them in
// NVIDIA_DRIVER_CAPABILITIES.
const (
	CapabilityCompute  = "compute"
	CapabilityUtility  = "utility"
	CapabilityGraphics = "graphics"
	CapabilityVideo    = "video"
	CapabilityDisplay  = "display"
	CapabilityCompat32 = "compat32"
	CapabilityAll      = "all"
)

// SupportedDriverCapabilities lists the values DriverCapabilities accepts.
var SupportedDriverCapabilities = []string{
	CapabilityAll, CapabilityCompat32, CapabilityCompute, CapabilityDisplay,
	CapabilityGraphics, CapabilityUtility, CapabilityVideo,
}

// DefaultDriverCapabilities is what a GPU gets when nothing is configured: enough to run CUDA
// and nvidia-smi, the same default as the NVIDIA container toolkit's.
var DefaultDriverCapabilities = []string{CapabilityCompute, CapabilityUtility}

// GpuConfig configures the GPUs of a request.
type GpuConfig struct {
	metav1.TypeMeta `json:",inline"`

	// DriverCapabilities become NVIDIA_DRIVER_CAPABILITIES: which driver libraries and tools the
	// NVIDIA container toolkit mounts. Default: compute, utility. Each value at most once.
	DriverCapabilities []string `json:"driverCapabilities,omitempty"`
	// Sharing sets how the claim's GPUs are shared between the processes of the containers
	// using it (docs/sharing.md). Default: none, CUDA's own behaviour with the GPU's settings
	// as they are.
	Sharing *Sharing `json:"sharing,omitempty"`
}

// Ascend runtime options, as the Ascend container runtime understands them in
// ASCEND_RUNTIME_OPTIONS.
const (
	// RuntimeOptionNoDrv: do not mount the driver from the host (the image brings its own).
	RuntimeOptionNoDrv = "NODRV"
	// RuntimeOptionVirtual: the devices are virtual NPUs (vNPU).
	RuntimeOptionVirtual = "VIRTUAL"
)

// SupportedRuntimeOptions lists the values RuntimeOptions accepts.
var SupportedRuntimeOptions = []string{RuntimeOptionNoDrv, RuntimeOptionVirtual}

// NpuConfig configures the NPUs of a request.
type NpuConfig struct {
	metav1.TypeMeta `json:",inline"`

	// RuntimeOptions become ASCEND_RUNTIME_OPTIONS. Default: none. Each value at most once.
	RuntimeOptions []string `json:"runtimeOptions,omitempty"`
}

// NewGpuConfig returns a defaulted GpuConfig with its apiVersion and kind set.
func NewGpuConfig() *GpuConfig {
	c := &GpuConfig{TypeMeta: metav1.TypeMeta{APIVersion: SchemeGroupVersion.String(), Kind: GpuConfigKind}}
	c.Default()
	return c
}

// NewNpuConfig returns a defaulted NpuConfig with its apiVersion and kind set.
func NewNpuConfig() *NpuConfig {
	c := &NpuConfig{TypeMeta: metav1.TypeMeta{APIVersion: SchemeGroupVersion.String(), Kind: NpuConfigKind}}
	c.Default()
	return c
}

// DeviceKind implements Config.
func (*GpuConfig) DeviceKind() device.Kind { return device.KindGPU }

// Default implements Config.
func (c *GpuConfig) Default() {
	if len(c.DriverCapabilities) == 0 {
		c.DriverCapabilities = slices.Clone(DefaultDriverCapabilities)
	}
	if c.Sharing != nil {
		c.Sharing.Default()
	}
}

// Validate implements Config.
func (c *GpuConfig) Validate() error {
	errs := validateSet(field.NewPath("driverCapabilities"), c.DriverCapabilities, SupportedDriverCapabilities)
	if c.Sharing != nil {
		errs = append(errs, c.Sharing.Validate(field.NewPath("sharing"))...)
	}
	return errs.ToAggregate()
}

// Env implements Config. The values keep the user's order: it is theirs, and the toolkit does not
// care.
func (c *GpuConfig) Env() []string {
	caps := c.DriverCapabilities
	if len(caps) == 0 {
		caps = DefaultDriverCapabilities
	}
	return []string{"NVIDIA_DRIVER_CAPABILITIES=" + strings.Join(caps, ",")}
}

// DeepCopyObject implements runtime.Object.
func (c *GpuConfig) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	out := *c
	out.DriverCapabilities = slices.Clone(c.DriverCapabilities)
	out.Sharing = c.Sharing.DeepCopy()
	return &out
}

// DeviceKind implements Config.
func (*NpuConfig) DeviceKind() device.Kind { return device.KindNPU }

// Default implements Config. No option is the right default; an empty list is made nil so that
// `runtimeOptions: []` and an absent field are the same config (and encode the same).
func (c *NpuConfig) Default() {
	if len(c.RuntimeOptions) == 0 {
		c.RuntimeOptions = nil
	}
}

// Validate implements Config.
func (c *NpuConfig) Validate() error {
	return validateSet(field.NewPath("runtimeOptions"), c.RuntimeOptions, SupportedRuntimeOptions).ToAggregate()
}

// Env implements Config. Without options the variable is left out rather than set empty, so the
// runtime's own default applies.
func (c *NpuConfig) Env() []string {
	if len(c.RuntimeOptions) == 0 {
		return nil
	}
	return []string{"ASCEND_RUNTIME_OPTIONS=" + strings.Join(c.RuntimeOptions, ",")}
}

// DeepCopyObject implements runtime.Object.
func (c *NpuConfig) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	out := *c
	out.RuntimeOptions = slices.Clone(c.RuntimeOptions)
	return &out
}

// validateSet checks a list that is a set of enum values: each supported, none twice.
func validateSet(path *field.Path, values, supported []string) field.ErrorList {
	var errs field.ErrorList
	seen := make(map[string]bool, len(values))
	for i, v := range values {
		switch {
		case !slices.Contains(supported, v):
			errs = append(errs, field.NotSupported(path.Index(i), v, supported))
		case seen[v]:
			errs = append(errs, field.Duplicate(path.Index(i), v))
		}
		seen[v] = true
	}
	return errs
}
