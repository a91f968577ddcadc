package v1alpha1

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/accel-dra/accel-dra/pkg/device"
)

// SchemeGroupVersion is the group and version of the objects in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

var (
	scheme = newScheme()
	// codec decodes strictly: an unknown or duplicated field is an error, not silently dropped,
	// because a misspelt option that is ignored is worse than one that is refused. JSON only:
	// opaque parameters reach the driver as JSON (runtime.RawExtension), whatever the user wrote.
	codec = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Strict: true})
)

// newScheme registers only the config kinds (not metav1's WatchEvent & co.), so that no other
// kind can decode successfully under this apiVersion.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(SchemeGroupVersion, &GpuConfig{}, &NpuConfig{})
	return s
}

// Decode parses one opaque configuration object, strictly, then defaults and validates it. The
// result is ready to use. Errors name the offending field or kind.
func Decode(raw []byte) (Config, error) {
	if err := checkObject(raw); err != nil {
		return nil, err
	}
	obj, gvk, err := codec.Decode(raw, nil, nil)
	if err != nil {
		return nil, decodeError(gvk, err)
	}
	cfg, ok := obj.(Config)
	if !ok { // unreachable: the scheme knows only Configs
		return nil, fmt.Errorf("kind %s is not a device configuration", gvk.Kind)
	}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
	}
	return cfg, nil
}

// checkObject gives malformed input a plain error; the serializer's would talk about Go structs.
func checkObject(raw []byte) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return fmt.Errorf("empty configuration: want an object with apiVersion %s and kind %s or %s", SchemeGroupVersion, GpuConfigKind, NpuConfigKind)
	}
	var v any
	if err := stdjson.Unmarshal(trimmed, &v); err != nil {
		return fmt.Errorf("device configuration is not valid JSON: %w", err)
	}
	switch v.(type) {
	case map[string]any, nil: // null: the serializer reports the missing kind
		return nil
	case []any:
		return errors.New("device configuration must be a JSON object, not an array")
	case string:
		return errors.New("device configuration must be a JSON object, not a string")
	default:
		return fmt.Errorf("device configuration must be a JSON object, not %s", trimmed)
	}
}

// decodeError turns the serializer's errors into ones that name the field. apimachinery's own
// "missing" errors quote the whole object, which is noise in an event, and its "not registered"
// error names the Go scheme, which means nothing to a user.
func decodeError(gvk *schema.GroupVersionKind, err error) error {
	supportedVersion := []string{SchemeGroupVersion.String()}
	supportedKinds := []string{GpuConfigKind, NpuConfigKind}
	switch {
	case runtime.IsMissingKind(err):
		return field.Required(field.NewPath("kind"), "must be "+GpuConfigKind+" or "+NpuConfigKind)
	case runtime.IsMissingVersion(err):
		return field.Required(field.NewPath("apiVersion"), "must be "+supportedVersion[0])
	case runtime.IsNotRegisteredError(err) && gvk != nil:
		if gvk.GroupVersion() != SchemeGroupVersion {
			return field.NotSupported(field.NewPath("apiVersion"), gvk.GroupVersion().String(), supportedVersion)
		}
		return field.NotSupported(field.NewPath("kind"), gvk.Kind, supportedKinds)
	case runtime.IsStrictDecodingError(err) && gvk != nil:
		return fmt.Errorf("%s: %w", gvk.Kind, err)
	case gvk != nil && gvk.Kind != "":
		return fmt.Errorf("%s: %w", gvk.Kind, err)
	default:
		return fmt.Errorf("decoding device configuration: %w", err)
	}
}

// Encode renders a config as JSON with its apiVersion and kind, as Decode reads it.
func Encode(c Config) ([]byte, error) {
	c = c.DeepCopyObject().(Config)
	gvks, _, err := scheme.ObjectKinds(c)
	if err != nil {
		return nil, err
	}
	c.GetObjectKind().SetGroupVersionKind(gvks[0])
	var buf bytes.Buffer
	if err := codec.Encode(c, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// NewDefault returns the configuration a request of the kind gets when no config applies to it.
func NewDefault(kind device.Kind) (Config, error) {
	switch kind {
	case device.KindGPU:
		return NewGpuConfig(), nil
	case device.KindNPU:
		return NewNpuConfig(), nil
	default:
		return nil, fmt.Errorf("no device configuration for device kind %q", kind)
	}
}

// Resolve returns the effective configuration of one request of a driver for devices of kind.
// configs are the opaque parameters that apply to the request, in precedence order: the
// DeviceClass's first, then the claim's. Every one is decoded and validated, so a bad config is
// reported even when a later one overrides it; the last one wins as a whole (fields are not
// merged, so what a user reads in the winning object is exactly what the container gets).
// Without any config the result is NewDefault(kind).
//
// A config of another device kind (a GpuConfig given to the NPU driver) is an error: a config
// entry names the driver it is for, so this is a mistake, not something to ignore.
func Resolve(kind device.Kind, configs [][]byte) (Config, error) {
	result, err := NewDefault(kind)
	if err != nil {
		return nil, err
	}
	for i, raw := range configs {
		cfg, err := Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("config[%d]: %w", i, err)
		}
		if cfg.DeviceKind() != kind {
			return nil, fmt.Errorf("config[%d]: %s configures %s devices, this driver prepares %s devices",
				i, cfg.GetObjectKind().GroupVersionKind().Kind, cfg.DeviceKind(), kind)
		}
		result = cfg
	}
	return result, nil
}
