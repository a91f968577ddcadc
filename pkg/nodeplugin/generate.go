package nodeplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// GenerateCommand is the plugin binary's first argument that makes it print the template of a
// declared node shape instead of running (RunGenerate).
const GenerateCommand = "generate-template"

// GenerateNodeName is the node the generator pretends to run on. It only makes the mock's
// UUIDs and serial numbers, which are identity attributes and so placeholders in the template;
// the template does not depend on it.
const GenerateNodeName = "generated"

// GenerateSlices returns the ResourceSlices the plugin run with o would publish on a node of
// the shape o declares: a mock profile (--backend=mock or npu-mock, --mock-profile) and the
// options that change what is published (--dynamic-mig, --consumable-memory, --driver-name,
// --nvidia-compat).
// It takes the plugin's own path from the backend to the slices (Run: backend.New, Enumerate,
// the dynamic-MIG model, driver.HealthyResources, NVIDIA's attributes in the compatibility
// mode), so that a seed is what a node of that shape
// publishes and not a transcription of it; the one step that is not the plugin's is the
// kubelet plugin helper's, which puts the slices into ResourceSlice objects (sliceObjects).
// Devices are healthy: a new node's are, and templates drop device taints anyway.
//
// An empty o.Backend is inferred from the profile (or the model of a "shape:<file>" profile,
// nvmlmock.Shape and npumock.Shape). o.NodeName defaults to GenerateNodeName.
func GenerateSlices(ctx context.Context, o *Options) ([]resourceapi.ResourceSlice, error) {
	if o.Backend == "" {
		file, isShape := strings.CutPrefix(o.MockProfile, npumock.ShapePrefix)
		switch {
		case slices.Contains(npumock.Profiles(), o.MockProfile), isShape && npumock.IsShape(file):
			o.Backend = backend.NPUMock
		default:
			o.Backend = backend.Mock
		}
	}
	if o.Backend == backend.NPUMock {
		// --nvidia-compat is the release's GPU driver's mode (the chart passes it to every seed
		// of such a release); the release's NPU plugin runs without it.
		o.NVIDIACompat = false
	}
	if o.Backend != backend.Mock && o.Backend != backend.NPUMock {
		return nil, fmt.Errorf("generating a template needs a mock backend (%s or %s) whose profile declares the node, not %q: the publisher mirrors the slices of a real node's backend", backend.Mock, backend.NPUMock, o.Backend)
	}
	if o.NodeName == "" {
		o.NodeName = GenerateNodeName
	}
	// The mock's state (the NPU mock's tree, the GPU mock's MIG instances) goes to a directory
	// of its own, never to a running plugin's.
	dir, err := os.MkdirTemp("", "accel-dra-generate-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	o.MockDir, o.PluginDataDir = dir, dir
	if err := o.Complete(); err != nil {
		return nil, err
	}
	be, err := backend.New(ctx, backend.Options{Name: o.Backend, MockProfile: o.MockProfile, NodeName: o.NodeName, MockDir: o.MockDir})
	if err != nil {
		return nil, fmt.Errorf("device backend %q: %w", o.Backend, err)
	}
	defer func() {
		if err := be.Close(); err != nil {
			klog.FromContext(ctx).Error(err, "Closing device backend")
		}
	}()
	inv, err := be.Enumerate(ctx)
	if err != nil {
		return nil, fmt.Errorf("enumerating devices: %w", err)
	}
	if o.DynamicMIG {
		if inv, _, err = dynamicMIG(ctx, be, inv, o.MIGProfiles); err != nil {
			return nil, fmt.Errorf("dynamic MIG: %w", err)
		}
	}
	res := driver.HealthyResources(driver.Options{DriverName: o.DriverName, NodeName: o.NodeName, Inventory: inv, ConsumableMemory: o.ConsumableMemory, Attributes: o.attributes()})
	return sliceObjects(o.DriverName, o.NodeName, res.Pools), nil
}

// sliceObjects makes ResourceSlice objects of a driver's pools, with the fields the kubelet
// plugin helper's slice controller sets on a node's first publication (generation 1, the pool's
// slice count, spec.nodeName). Names follow a template node's (<node>-<driver>-<i>); the
// template keeps none of them.
func sliceObjects(driverName, nodeName string, pools map[string]resourceslice.Pool) []resourceapi.ResourceSlice {
	names := make([]string, 0, len(pools))
	for name := range pools {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []resourceapi.ResourceSlice
	for _, pool := range names {
		ss := pools[pool].Slices
		for _, s := range ss {
			out = append(out, resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", nodeName, driverName, len(out))},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:                 driverName,
					Pool:                   resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: int64(len(ss))},
					NodeName:               &nodeName,
					Devices:                s.Devices,
					SharedCounters:         s.SharedCounters,
					PerDeviceNodeSelection: s.PerDeviceNodeSelection,
					PartitionTypeAttribute: s.PartitionTypeAttribute,
					SkipNodeOperations:     s.SkipNodeOperations,
				},
			})
		}
	}
	return out
}

// GenerateTemplate is the template of GenerateSlices' slices, built with the publisher's
// options (opts), as the publisher builds a node's.
func GenerateTemplate(ctx context.Context, o *Options, opts template.BuildOptions) (*template.Template, error) {
	s, err := GenerateSlices(ctx, o)
	if err != nil {
		return nil, err
	}
	return template.Build(s, opts)
}

// RunGenerate implements `accel-dra-kubelet-plugin generate-template [flags]`: the plugin's
// own flags declare the node (--backend, --mock-profile, --dynamic-mig, --consumable-memory,
// --driver-name, --nvidia-compat; the others are accepted and change nothing published), and
// --identity-attributes are the publisher's. It writes the template document
// (template.accel-dra.io/v1alpha1 NodeGroupTemplate, as `accelctl template show -o template`
// prints it), the "template:" of a NodeGroupSeed; `accelctl template generate` runs it.
func RunGenerate(ctx context.Context, args []string, out io.Writer) error {
	o := NewOptions()
	o.Backend, o.NodeName = "", GenerateNodeName
	fs := o.NewFlagSet()
	fs.Init(GenerateCommand, pflag.ContinueOnError)
	var identity []string
	var output string
	fs.StringVar(&output, "output", "", "Write the template document to this file instead of standard output (the publisher's seed init container has no shell to redirect with).")
	fs.StringSliceVar(&identity, "identity-attributes", nil, "Attributes whose values become placeholders, as the publisher's --identity-attributes (default: the publisher's default).")
	profiles := append(nvmlmock.Profiles(), npumock.Profiles()...)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: accel-dra-kubelet-plugin %s --mock-profile=PROFILE [--dynamic-mig] [--consumable-memory] [--driver-name=NAME]\n\nPrints the node group template of a node of a mock profile: %s, or shape:<file> (a declared machine, docs/template-publisher.md).\n\n%s",
			GenerateCommand, strings.Join(profiles, ", "), fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", GenerateCommand, fs.Args())
	}
	if o.MockProfile == "" {
		return errors.New("--mock-profile is required: one of " + strings.Join(profiles, ", "))
	}
	// The backend's progress is the plugin's start-up log; here only the result and errors
	// count, and the output is for a pipe.
	ctx = klog.NewContext(ctx, klog.LoggerWithName(logr.Discard(), GenerateCommand))
	t, err := GenerateTemplate(ctx, o, template.BuildOptions{IdentityAttributes: identity})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if output != "" {
		// The init container ends before the publisher starts: no reader sees half a file.
		return os.WriteFile(output, b, 0o644)
	}
	_, err = out.Write(b)
	return err
}
