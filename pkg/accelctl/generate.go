package accelctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// PluginBinary is the node plugin's executable, which generates templates: the devices of a
// node come from its backends, which need NVML (cgo), and accelctl is a static binary.
const PluginBinary = "accel-dra-kubelet-plugin"

// pluginGenerateCommand is the plugin's subcommand (nodeplugin.GenerateCommand; not imported:
// that package links NVML).
const pluginGenerateCommand = "generate-template"

// Shape declares a node for `template generate`: a mock profile of the plugin and the plugin
// options that change what it publishes.
type Shape struct {
	// Profile is a mock profile (accel-dra-kubelet-plugin --mock-profile).
	Profile string
	// Backend is mock or npu-mock; empty: inferred from the profile.
	Backend string
	// DriverName overrides the plugin's default driver name.
	DriverName string
	DynamicMIG bool
	// MIGProfiles are the plugin's --mig-profiles (with DynamicMIG); empty: the plugin's default.
	MIGProfiles      []string
	ConsumableMemory bool
	// IdentityAttributes are the publisher's --identity-attributes, if it has any.
	IdentityAttributes []string
}

// PluginArgs are the plugin's arguments that generate the shape's template document.
func (s Shape) PluginArgs() []string {
	args := []string{pluginGenerateCommand, "--mock-profile=" + s.Profile}
	if s.Backend != "" {
		args = append(args, "--backend="+s.Backend)
	}
	if s.DriverName != "" {
		args = append(args, "--driver-name="+s.DriverName)
	}
	if s.DynamicMIG {
		args = append(args, "--dynamic-mig")
	}
	if len(s.MIGProfiles) > 0 {
		args = append(args, "--mig-profiles="+strings.Join(s.MIGProfiles, ","))
	}
	if s.ConsumableMemory {
		args = append(args, "--consumable-memory")
	}
	if len(s.IdentityAttributes) > 0 {
		args = append(args, "--identity-attributes="+strings.Join(s.IdentityAttributes, ","))
	}
	return args
}

// RunPlugin runs the plugin binary with args and returns its standard output.
type RunPlugin func(ctx context.Context, args []string) ([]byte, error)

// ExecPlugin runs the plugin executable at path; an empty path is PluginBinary beside
// accelctl's executable, else on $PATH.
func ExecPlugin(path string) RunPlugin {
	return func(ctx context.Context, args []string) ([]byte, error) {
		if path == "" {
			path = PluginBinary
			if exe, err := os.Executable(); err == nil {
				if p := filepath.Join(filepath.Dir(exe), PluginBinary); isFile(p) {
					path = p
				}
			}
		}
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("generating a template runs the node plugin's %s (it has the device model; accelctl is static): %w; give its path with --plugin", PluginBinary, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w: %s", path, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// GenerateSeed makes the NodeGroupSeed of a node of the shape: its template is the one the
// plugin builds for the shape (run, normally ExecPlugin), its capacity, labels and taints those
// given in seed, which the device model does not know.
func GenerateSeed(ctx context.Context, s Shape, seed seedv1alpha1.NodeGroupSeed, run RunPlugin) (*seedv1alpha1.NodeGroupSeed, error) {
	if s.Profile == "" {
		return nil, errors.New("a mock profile is required (--profile)")
	}
	doc, err := run(ctx, s.PluginArgs())
	if err != nil {
		return nil, err
	}
	// The document is checked as the seed command will read it, so that a plugin of another
	// version that writes something else fails here.
	if _, err := template.DecodeDocument(doc); err != nil {
		return nil, fmt.Errorf("template of profile %s: %w", s.Profile, err)
	}
	seed.APIVersion, seed.Kind = seedv1alpha1.APIVersion, seedv1alpha1.Kind
	seed.Template = &runtime.RawExtension{Raw: bytes.TrimSpace(doc)}
	seed.ResourceSlices = nil
	if err := seed.Validate(); err != nil {
		return nil, fmt.Errorf("node group seed: %w", err)
	}
	return &seed, nil
}

func newGenerateCommand(name string, streams IOStreams) *cobra.Command {
	var s Shape
	var plugin, cpu, memory, disk string
	var maxPods int32
	var labels map[string]string
	cmd := &cobra.Command{
		Use:   "generate --profile PROFILE --cpu CPU --memory MEMORY",
		Short: "Print the NodeGroupSeed of a node of a declared shape, from the plugin's device model",
		Long: fmt.Sprintf(`Runs the node plugin (accel-dra-kubelet-plugin generate-template) on a mock profile with the
plugin options that change its ResourceSlices, and prints a NodeGroupSeed whose template is what
the publisher will mirror from a real node of that shape, placeholders aside. Capacity, labels and
taints are not in the device model: give them with the flags. Apply the result with
"%s template seed GROUP -f -"; the publisher replaces it with the group's own nodes and
reports a TemplateDiverged event if a node differs from it (docs/template-publisher.md).`, name),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var seed seedv1alpha1.NodeGroupSeed
			for _, q := range []struct {
				flag, v string
				to      **resource.Quantity
			}{{"cpu", cpu, &seed.Capacity.CPU}, {"memory", memory, &seed.Capacity.Memory}, {"ephemeral-disk", disk, &seed.Capacity.EphemeralDisk}} {
				if q.v == "" {
					continue
				}
				v, err := resource.ParseQuantity(q.v)
				if err != nil {
					return fmt.Errorf("--%s: %w", q.flag, err)
				}
				*q.to = &v
			}
			if maxPods != 0 {
				seed.Capacity.MaxPods = &maxPods
			}
			seed.Labels = labels
			out, err := GenerateSeed(cmd.Context(), s, seed, ExecPlugin(plugin))
			if err != nil {
				return err
			}
			b, err := yaml.Marshal(out)
			if err != nil {
				return err
			}
			_, err = io.Copy(streams.Out, bytes.NewReader(b))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Profile, "profile", "", "Mock profile of the node (accel-dra-kubelet-plugin --mock-profile): h100-8x-2numa, a100-8x, gh200-1x, ascend910b-8x, ascend310p-2x, ..., or shape:FILE for a declared machine (docs/examples/shapes).")
	f.StringVar(&s.Backend, "backend", "", "mock or npu-mock (default: the one that has the profile).")
	f.StringVar(&s.DriverName, "driver-name", "", "The plugin's --driver-name (default per backend).")
	f.BoolVar(&s.DynamicMIG, "dynamic-mig", false, "The plugin's --dynamic-mig.")
	f.StringSliceVar(&s.MIGProfiles, "mig-profiles", nil, "The plugin's --mig-profiles (with --dynamic-mig).")
	f.BoolVar(&s.ConsumableMemory, "consumable-memory", false, "The plugin's --consumable-memory.")
	f.StringSliceVar(&s.IdentityAttributes, "identity-attributes", nil, "The publisher's --identity-attributes, if set.")
	f.StringVar(&plugin, "plugin", "", "Path of "+PluginBinary+" (default: beside accelctl, else on $PATH).")
	f.StringVar(&cpu, "cpu", "", "Allocatable CPU of a node (required).")
	f.StringVar(&memory, "memory", "", "Allocatable memory of a node (required).")
	f.StringVar(&disk, "ephemeral-disk", "", "Allocatable ephemeral storage of a node.")
	f.Int32Var(&maxPods, "max-pods", 0, "Pods a node takes.")
	f.StringToStringVar(&labels, "labels", nil, "Labels of a node, k=v,... (kubernetes.io/arch=arm64 for Grace Hopper).")
	_ = cmd.MarkFlagRequired("profile")
	return cmd
}
