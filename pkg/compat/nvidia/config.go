// Package nvidia is accel-dra's compatibility with NVIDIA's DRA driver for GPUs
// (github.com/NVIDIA/k8s-dra-driver-gpu): the names that driver's users write in their
// manifests, and the translation of its opaque configuration (resource.nvidia.com/v1beta1
// GpuConfig and MigDeviceConfig) into accel-dra's own (accel-dra.io/v1alpha1 GpuConfig). The
// plugin uses it only when the compatibility mode is on (--nvidia-compat, chart
// drivers.gpu.compat.nvidia); docs/migrate-from-nvidia.md is the user-facing contract.
//
// The types below are written from NVIDIA's published API (release v25.12.0, unchanged in
// v0.4.0), not imported: accel-dra must not depend on another driver's module, and the types
// name exactly the fields this translation reads, so a field NVIDIA adds later is refused as
// unknown instead of being silently ignored.
package nvidia

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// Names NVIDIA's driver and its chart use, which the compatibility mode takes over.
const (
	// DriverName is NVIDIA's GPU driver name: the ResourceSlices' driver, the DeviceClasses'
	// selectors, the domain of the attributes and of the taint keys.
	DriverName = "gpu.nvidia.com"
	// GPUDeviceClass and MIGDeviceClass are the DeviceClasses NVIDIA's chart installs for whole
	// GPUs and for MIG devices.
	GPUDeviceClass = "gpu.nvidia.com"
	MIGDeviceClass = "mig.nvidia.com"
	// ExtendedResourceName is the extended resource NVIDIA's chart maps to its GPU class, the
	// name the device plugin used, so pods that ask for nvidia.com/gpu get a GPU through DRA.
	ExtendedResourceName = "nvidia.com/gpu"

	// APIVersion is the apiVersion of NVIDIA's opaque configuration.
	APIVersion = "resource.nvidia.com/v1beta1"
	// GpuConfigKind and MigDeviceConfigKind are the kinds translated.
	GpuConfigKind       = "GpuConfig"
	MigDeviceConfigKind = "MigDeviceConfig"
)

// supportedKinds are the kinds Translate maps; NVIDIA's other kinds (VfioDeviceConfig, the
// ComputeDomain ones) configure devices accel-dra does not have and are refused by name.
var supportedKinds = []string{GpuConfigKind, MigDeviceConfigKind}

// NVIDIA's sharing strategies and time-slice intervals. They are spelt as accel-dra's own, which
// is no accident: accel-dra's sharing API was modelled on NVIDIA's.
const (
	strategyTimeSlicing = "TimeSlicing"
	strategyMPS         = "MPS"
)

var supportedStrategies = []string{strategyMPS, strategyTimeSlicing}

// gpuConfig is NVIDIA's GpuConfig.
type gpuConfig struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Sharing    *gpuSharing `json:"sharing,omitempty"`
}

type gpuSharing struct {
	Strategy          string             `json:"strategy"`
	TimeSlicingConfig *timeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *mpsConfig         `json:"mpsConfig,omitempty"`
}

// migDeviceConfig is NVIDIA's MigDeviceConfig; its sharing has no time-slicing settings, because
// a time-slice belongs to the whole GPU.
type migDeviceConfig struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Sharing    *migDeviceSharing `json:"sharing,omitempty"`
}

type migDeviceSharing struct {
	Strategy  string     `json:"strategy"`
	MpsConfig *mpsConfig `json:"mpsConfig,omitempty"`
}

type timeSlicingConfig struct {
	Interval *string `json:"interval,omitempty"`
}

type mpsConfig struct {
	DefaultActiveThreadPercentage     *int                         `json:"defaultActiveThreadPercentage,omitempty"`
	DefaultPinnedDeviceMemoryLimit    *resource.Quantity           `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
}

// IsNVIDIAConfig reports whether raw is an object of NVIDIA's configuration API. Anything that
// is not (accel-dra's own objects, malformed input) is left to accel-dra's decoder, whose errors
// say what is wrong with it.
func IsNVIDIAConfig(raw []byte) bool {
	var tm struct {
		APIVersion string `json:"apiVersion"`
	}
	return stdjson.Unmarshal(raw, &tm) == nil && tm.APIVersion == APIVersion
}

// Translate returns the accel-dra configuration that does what NVIDIA's configuration raw asks
// for, encoded as accel-dra's decoder reads it; raw that is not NVIDIA's (IsNVIDIAConfig) is
// returned as it is. What accel-dra cannot honour is an error naming NVIDIA's field, never
// dropped: a workload that asked for a setting must not run without it.
//
// The mapping (docs/migrate-from-nvidia.md):
//   - GpuConfig sharing TimeSlicing, timeSlicingConfig.interval: sharing.strategy TimeSlicing,
//     sharing.timeSlicing.interval (default Default, as NVIDIA's).
//   - MigDeviceConfig sharing TimeSlicing: no sharing settings. NVIDIA's driver sets nothing for
//     it either (a MIG device has no time-slice of its own); CUDA time-slices as it always does.
//   - GpuConfig or MigDeviceConfig sharing MPS, mpsConfig: sharing.strategy MPS, sharing.mps
//     with defaultActiveThreadPercentage and defaultPinnedDeviceMemoryLimit as they are.
//   - No sharing: accel-dra's default GpuConfig. NVIDIA's driver then sets the GPUs' time-slice
//     to Default, which is what a GPU has unless someone changed it.
//   - driverCapabilities, which NVIDIA's API does not have: accel-dra's default, compute and
//     utility.
func Translate(raw []byte) ([]byte, error) {
	if !IsNVIDIAConfig(raw) {
		return raw, nil
	}
	var tm struct {
		Kind string `json:"kind"`
	}
	if err := stdjson.Unmarshal(raw, &tm); err != nil {
		return nil, fmt.Errorf("decoding %s configuration: %w", APIVersion, err)
	}
	var (
		sharing *configapi.Sharing
		errs    field.ErrorList
	)
	switch tm.Kind {
	case GpuConfigKind:
		var c gpuConfig
		if err := decodeStrict(raw, &c); err != nil {
			return nil, kindError(tm.Kind, err)
		}
		sharing, errs = c.Sharing.translate(field.NewPath("sharing"))
	case MigDeviceConfigKind:
		var c migDeviceConfig
		if err := decodeStrict(raw, &c); err != nil {
			return nil, kindError(tm.Kind, err)
		}
		sharing, errs = c.Sharing.translate(field.NewPath("sharing"))
	case "":
		return nil, field.Required(field.NewPath("kind"), "must be "+GpuConfigKind+" or "+MigDeviceConfigKind+" for "+APIVersion)
	default:
		return nil, field.NotSupported(field.NewPath("kind"), tm.Kind, supportedKinds)
	}
	if len(errs) > 0 {
		return nil, kindError(tm.Kind, errs.ToAggregate())
	}
	out := configapi.NewGpuConfig()
	out.Sharing = sharing
	// accel-dra's own rules apply to the result as to any config of its own; the checks above
	// should leave nothing for them to find, and this keeps a gap between the two from
	// reaching a GPU.
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("%s (%s) translates to an invalid %s: %w", tm.Kind, APIVersion, configapi.SchemeGroupVersion, err)
	}
	return configapi.Encode(out)
}

// AppliesTo is the driver's ConfigApplies: whether a configuration entry that names no
// requests applies to a request of MIG devices (mig) or of whole GPUs. As in NVIDIA's driver, a
// GpuConfig applies only to whole GPUs and a MigDeviceConfig only to MIG devices; an entry that
// names its requests applies to them whatever they are. Everything else (accel-dra's own
// objects, NVIDIA's kinds that Translate refuses, malformed input) applies, so that it is read
// and, where wrong, reported.
func AppliesTo(raw []byte, mig bool) bool {
	if !IsNVIDIAConfig(raw) {
		return true
	}
	var tm struct {
		Kind string `json:"kind"`
	}
	if err := stdjson.Unmarshal(raw, &tm); err != nil {
		return true
	}
	switch tm.Kind {
	case GpuConfigKind:
		return !mig
	case MigDeviceConfigKind:
		return mig
	}
	return true
}

func kindError(kind string, err error) error {
	return fmt.Errorf("%s (%s): %w", kind, APIVersion, err)
}

// decodeStrict refuses unknown and duplicated fields, as NVIDIA's own decoder and accel-dra's
// do: a misspelt setting must fail the claim rather than be ignored.
func decodeStrict(raw []byte, into any) error {
	strictErrs, err := sigsjson.UnmarshalStrict(bytes.TrimSpace(raw), into)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("strict decoding error: %w", errors.Join(strictErrs...))
	}
	return nil
}

func (s *gpuSharing) translate(path *field.Path) (*configapi.Sharing, field.ErrorList) {
	if s == nil {
		return nil, nil
	}
	errs := checkStrategy(path, s.Strategy)
	switch s.Strategy {
	case strategyTimeSlicing:
		if s.MpsConfig != nil {
			errs = append(errs, field.Forbidden(path.Child("mpsConfig"), "only with strategy "+strategyMPS))
		}
		interval := configapi.TimeSliceDefault
		if s.TimeSlicingConfig != nil && s.TimeSlicingConfig.Interval != nil {
			interval = configapi.TimeSliceInterval(*s.TimeSlicingConfig.Interval)
			if interval.SMINumber() < 0 {
				errs = append(errs, field.NotSupported(path.Child("timeSlicingConfig", "interval"), interval, configapi.SupportedTimeSliceIntervals))
			}
		}
		return &configapi.Sharing{Strategy: configapi.StrategyTimeSlicing, TimeSlicing: &configapi.TimeSlicing{Interval: interval}}, errs
	case strategyMPS:
		if s.TimeSlicingConfig != nil {
			errs = append(errs, field.Forbidden(path.Child("timeSlicingConfig"), "only with strategy "+strategyTimeSlicing))
		}
		mps, mpsErrs := s.MpsConfig.translate(path.Child("mpsConfig"))
		return &configapi.Sharing{Strategy: configapi.StrategyMPS, MPS: mps}, append(errs, mpsErrs...)
	}
	return nil, errs
}

func (s *migDeviceSharing) translate(path *field.Path) (*configapi.Sharing, field.ErrorList) {
	if s == nil {
		return nil, nil
	}
	errs := checkStrategy(path, s.Strategy)
	switch s.Strategy {
	case strategyTimeSlicing:
		if s.MpsConfig != nil {
			errs = append(errs, field.Forbidden(path.Child("mpsConfig"), "only with strategy "+strategyMPS))
		}
		return nil, errs
	case strategyMPS:
		mps, mpsErrs := s.MpsConfig.translate(path.Child("mpsConfig"))
		return &configapi.Sharing{Strategy: configapi.StrategyMPS, MPS: mps}, append(errs, mpsErrs...)
	}
	return nil, errs
}

func checkStrategy(path *field.Path, strategy string) field.ErrorList {
	switch strategy {
	case strategyTimeSlicing, strategyMPS:
		return nil
	case "":
		return field.ErrorList{field.Required(path.Child("strategy"), "must be one of "+strategyTimeSlicing+", "+strategyMPS)}
	default:
		return field.ErrorList{field.NotSupported(path.Child("strategy"), strategy, supportedStrategies)}
	}
}

func (c *mpsConfig) translate(path *field.Path) (*configapi.MPS, field.ErrorList) {
	if c == nil {
		return nil, nil
	}
	var errs field.ErrorList
	out := &configapi.MPS{DefaultPinnedDeviceMemoryLimit: c.DefaultPinnedDeviceMemoryLimit}
	if v := c.DefaultActiveThreadPercentage; v != nil {
		// NVIDIA's API takes 0; MPS's own range, and accel-dra's, starts at 1.
		if *v < 1 || *v > 100 {
			errs = append(errs, field.Invalid(path.Child("defaultActiveThreadPercentage"), *v, "must be between 1 and 100"))
		} else {
			p := int32(*v)
			out.DefaultActiveThreadPercentage = &p
		}
	}
	if q := c.DefaultPinnedDeviceMemoryLimit; q != nil && q.Sign() <= 0 {
		errs = append(errs, field.Invalid(path.Child("defaultPinnedDeviceMemoryLimit"), q.String(), "must be more than zero"))
	}
	if len(c.DefaultPerDevicePinnedMemoryLimit) > 0 {
		// NVIDIA keys this map by GPU UUID or by the device's position in the claim; accel-dra
		// keys it by device name and reads it before it knows the claim's devices' UUIDs or
		// order. Guessing would put a limit on the wrong GPU.
		errs = append(errs, field.Forbidden(path.Child("defaultPerDevicePinnedMemoryLimit"),
			"not supported in NVIDIA compatibility mode (its keys are UUIDs or positions in the claim): use defaultPinnedDeviceMemoryLimit, or an "+
				configapi.SchemeGroupVersion.String()+" GpuConfig whose sharing.mps.defaultPerDevicePinnedMemoryLimit names devices (gpu-3)"))
	}
	return out, errs
}

// TaintKeys are NVIDIA's names for the health causes whose taint keys differ from accel-dra's
// (driver.Options.TaintKeys): <driver>/gpu-lost for a GPU that fell off the bus and
// <driver>/unmonitored for one whose health cannot be watched. An XID is <driver>/xid, with the
// XID as the value, in both drivers; ECC has no key of its own in NVIDIA's driver (it reports
// ECC errors as XIDs) and keeps accel-dra's.
var TaintKeys = map[health.Cause]string{
	health.CauseLost:    "gpu-lost",
	health.CauseUnknown: "unmonitored",
}
