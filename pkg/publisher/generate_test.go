package publisher

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	fakekube "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/accelctl"
	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/backend/npumock"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
	"github.com/accel-dra/accel-dra/pkg/driver"
	"github.com/accel-dra/accel-dra/pkg/metrics"
	"github.com/accel-dra/accel-dra/pkg/mig"
	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// TestGeneratedSeedEqualsMirror: for every mock profile (and the declared machines of
// docs/examples/shapes) and every plugin option that changes
// what the plugin publishes, the seed `accelctl template generate` makes (through the plugin's
// generate-template, run in process) gives exactly the annotations the publisher writes once a
// node of that profile, running the plugin with those options, has joined the group: the same
// bytes for the four template keys, dra-driver, gpu-count and dra-pool (and, as the seed is
// given the node's capacity and labels, for those too). Only source differs (seed, nodes).
//
// The node side is the plugin's, short of its process: the backend on the node's own name (so
// other UUIDs, serial numbers), the driver's Resources(), the kubelet plugin helper's slice
// controller writing ResourceSlices to an API (a fake clientset), and the publisher's reconcile
// of those slices. What the template replaces by placeholders is all that may differ between
// the two: node and pool names, slice names and counts, and the identity attributes uuid,
// parentUUID, serial, pciBusID and pcieRoot (template.DefaultIdentityAttributes).
func TestGeneratedSeedEqualsMirror(t *testing.T) {
	type option struct {
		name                   string
		dynamicMIG, consumable bool
		migProfiles            []string
	}
	options := []option{{name: "default"}, {name: "consumable-memory", consumable: true}, {name: "dynamic-mig", dynamicMIG: true}, {name: "dynamic-mig+consumable-memory", dynamicMIG: true, consumable: true},
		{name: "dynamic-mig+profiles", dynamicMIG: true, migProfiles: []string{"1g.10gb", "3g.40gb"}}}
	type profile struct{ name, backend string }
	var profiles []profile
	for _, p := range nvmlmock.Profiles() {
		profiles = append(profiles, profile{p, backend.Mock})
	}
	for _, p := range npumock.Profiles() {
		profiles = append(profiles, profile{p, backend.NPUMock})
	}
	// Declared machines, as the docs show them.
	shapes, err := filepath.Glob("../../docs/examples/shapes/*.yaml")
	if err != nil || len(shapes) == 0 {
		t.Fatalf("no shape files: %v", err)
	}
	for _, f := range shapes {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		b := backend.Mock
		if npumock.IsShape(abs) {
			b = backend.NPUMock
		}
		profiles = append(profiles, profile{nvmlmock.ShapePrefix + abs, b})
	}
	// The nodes' slices are published concurrently, before the subtests that wait for them: the
	// slice controller waits a second for its informer, whatever the fake API server does.
	_, ctx := ktesting.NewTestContext(t)
	const nodeName = "node-a"
	type mirror struct {
		slices []resourceapi.ResourceSlice
		err    error
	}
	sem := make(chan struct{}, 16)
	mirrors := map[string]chan mirror{}
	name := func(p profile, o option) string {
		return strings.TrimSuffix(filepath.Base(p.name), ".yaml") + "/" + o.name
	}
	dirs := t.TempDir()
	for _, p := range profiles {
		for _, o := range options {
			if o.dynamicMIG && p.backend == backend.NPUMock {
				continue // the NPU backend has no MIG; the plugin refuses the flag there
			}
			dir, err := os.MkdirTemp(dirs, "node-")
			if err != nil {
				t.Fatal(err)
			}
			ch := make(chan mirror, 1)
			mirrors[name(p, o)] = ch
			go func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				s, err := pluginSlices(ctx, dir, p.backend, p.name, nodeName, o.dynamicMIG, o.consumable, o.migProfiles)
				ch <- mirror{s, err}
			}()
		}
	}
	for _, p := range profiles {
		for _, o := range options {
			ch, ok := mirrors[name(p, o)]
			if !ok {
				continue
			}
			t.Run(name(p, o), func(t *testing.T) {
				// First, so that no publication outlives the test that logs it.
				m := <-ch
				_, ctx := ktesting.NewTestContext(t)
				shape := accelctl.Shape{Profile: p.name, DynamicMIG: o.dynamicMIG, MIGProfiles: o.migProfiles, ConsumableMemory: o.consumable}
				node := gpuNode(nodeName)
				seed := seedv1alpha1.NodeGroupSeed{Labels: maps.Clone(node.Labels)}
				delete(seed.Labels, "kubernetes.io/hostname")
				cpu, mem, disk := node.Status.Allocatable.Cpu().DeepCopy(), node.Status.Allocatable.Memory().DeepCopy(), node.Status.Allocatable.StorageEphemeral().DeepCopy()
				pods := int32(node.Status.Allocatable.Pods().Value())
				seed.Capacity = seedv1alpha1.Capacity{CPU: &cpu, Memory: &mem, EphemeralDisk: &disk, MaxPods: &pods}
				generated, err := accelctl.GenerateSeed(ctx, shape, seed, inProcessPlugin)
				if err != nil {
					t.Fatal(err)
				}
				// Through the file `accelctl template generate` prints and `template seed` reads.
				file, err := yaml.Marshal(generated)
				if err != nil {
					t.Fatal(err)
				}
				if generated, err = seedv1alpha1.Decode(file); err != nil {
					t.Fatal(err)
				}
				po := NewOptions()
				seedAnn, err := accelctl.SeedAnnotations(generated, accelctl.SeedOptions{Budget: po.TemplateBudgetBytes, GPUDriver: po.GPUDriver})
				if err != nil {
					t.Fatal(err)
				}

				// The publisher's seed mode, in the Helm chart's layout: the seed's settings, and
				// the template generate-template wrote. The group names the seed and has no
				// machine yet.
				seedsDir := t.TempDir()
				settings := *generated
				settings.Template = nil
				settingsFile, err := yaml.Marshal(settings)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(seedsDir, "gpu.yaml"), settingsFile, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(seedsDir, "gpu.json"), generated.Template.Raw, 0o644); err != nil {
					t.Fatal(err)
				}
				md, ms := machineDeployment("gpu", map[string]string{nodegroup.SeedAnnotation: "gpu"}), machineSet("gpu-1", "gpu", 1, 0)
				objs := []client.Object{md, ms, node}
				if m.err != nil {
					t.Fatalf("the plugin on node %s: %v", nodeName, m.err)
				}
				for _, s := range m.slices {
					objs = append(objs, s.DeepCopy())
				}
				e := newEnv(t, objs...)
				e.r.Seeds = Seeds{Dir: seedsDir}
				key := GroupKey{KindMachineDeployment, ns, "gpu"}
				e.reconcile(key)
				if diff := cmp.Diff(seedAnn, managed(e.annotations(key))); diff != "" {
					t.Errorf("accelctl's seed (-) and the publisher's seed mode (+) differ (%v):\n%s", e.events(), diff)
				}

				// The node joins.
				if err := e.client.Create(e.ctx, machine("m1", ms, nodeName)); err != nil {
					t.Fatal(err)
				}
				e.reconcile(key)
				mirrored := managed(e.annotations(key))

				if got := mirrored[nodegroup.SourceAnnotation]; got != nodegroup.SourceNodes {
					t.Fatalf("the publisher did not mirror the node (source %q): %v", got, e.events())
				}
				if got := seedAnn[nodegroup.SourceAnnotation]; got != nodegroup.SourceSeed {
					t.Errorf("generated seed not marked as one: source %q", got)
				}
				delete(mirrored, nodegroup.SourceAnnotation)
				delete(seedAnn, nodegroup.SourceAnnotation)
				if diff := cmp.Diff(seedAnn, mirrored); diff != "" {
					t.Errorf("generated seed (-) and the annotations mirrored from a node (+) differ:\n%s", diff)
				}
			})
		}
	}
}

// managed returns the publisher's keys of a set of annotations.
func managed(ann map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range ann {
		if nodegroup.IsManagedKey(k) {
			out[k] = v
		}
	}
	return out
}

// inProcessPlugin runs the plugin binary's generate-template in this process.
func inProcessPlugin(ctx context.Context, args []string) ([]byte, error) {
	if len(args) == 0 || args[0] != nodeplugin.GenerateCommand {
		return nil, fmt.Errorf("not the plugin's %s: %q", nodeplugin.GenerateCommand, args)
	}
	var out strings.Builder
	if err := nodeplugin.RunGenerate(ctx, args[1:], &out); err != nil {
		return nil, err
	}
	return []byte(out.String()), nil
}

// pluginSlices are the ResourceSlices the plugin publishes on node with the mock profile: its
// backend, its driver (driver.New, Resources) and the slice controller of the kubelet plugin
// helper, writing to a fake API server. dir is its own.
func pluginSlices(ctx context.Context, dir, backendName, profile, node string, dynamicMIG, consumable bool, migProfiles []string) ([]resourceapi.ResourceSlice, error) {
	be, err := backend.New(ctx, backend.Options{Name: backendName, MockProfile: profile, NodeName: node, MockDir: filepath.Join(dir, "mock")})
	if err != nil {
		return nil, err
	}
	defer func() { _ = be.Close() }()
	inv, err := be.Enumerate(ctx)
	if err != nil {
		return nil, err
	}
	if dynamicMIG {
		var opts []mig.Option
		if len(migProfiles) > 0 {
			opts = append(opts, mig.WithProfiles(migProfiles))
		}
		if inv, err = mig.Dynamic(inv, opts...); err != nil {
			return nil, err
		}
	}
	driverName := nodeplugin.GPUDriverName
	if backendName == backend.NPUMock {
		driverName = nodeplugin.NPUDriverName
	}
	store, err := checkpoint.Open(filepath.Join(dir, "checkpoint"), "boot-1")
	if err != nil {
		return nil, err
	}
	defer func() { _ = store.Close() }()
	drv, err := driver.New(ctx, driver.Options{
		DriverName: driverName, NodeName: node, Inventory: inv, CDI: cdi.New(filepath.Join(dir, "cdi"), inv.Kind),
		State: store, Metrics: metrics.NewPlugin(driverName), ConsumableMemory: consumable,
	})
	if err != nil {
		return nil, err
	}
	defer drv.Close()

	kube := fakekube.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: types.UID("uid-" + node)}})
	// The fake API server does not generate names, which the slice controller asks for.
	var n atomic.Int64
	kube.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if s.Name == "" {
			s.Name = fmt.Sprintf("%s%05d", s.GenerateName, n.Add(1))
		}
		return false, nil, nil
	})
	res := drv.Resources()
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: driverName, KubeClient: kube, Resources: &res,
		Owner: &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID("uid-" + node)},
	})
	if err != nil {
		return nil, err
	}
	defer ctrl.Stop()
	want := 0
	for _, p := range res.Pools {
		want += len(p.Slices)
	}
	var list *resourceapi.ResourceSliceList
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err = kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == want, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the slice controller did not publish %d slices: %w", want, err)
	}
	for i := range list.Items {
		// What an API server sets, which the publisher's cache of slices uses.
		list.Items[i].UID = types.UID("uid-" + list.Items[i].Name)
		list.Items[i].ResourceVersion = ""
	}
	return list.Items, nil
}
