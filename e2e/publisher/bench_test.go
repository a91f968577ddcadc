//go:build e2e

package publisher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/template"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkPublisher measures the publisher against a real apiserver with 1,000 nodes in 100
// MachineDeployments (PUBLISHER_BENCH_GROUPS × PUBLISHER_BENCH_NODES): Node objects,
// ResourceSlices and Cluster API objects created directly, no kubelets. It runs once per node
// shape of PUBLISHER_BENCH_SHAPES (default both):
//   - whole-gpu: 8 whole H100s per node, one slice;
//   - dynamic-mig: what the plugin publishes for the mock h100-8x-mig with --dynamic-mig (8
//     partitionable GPUs and their 200 MIG partitions with shared counters, 5 slices), made by
//     the plugin's own code (nodeplugin.GenerateSlices).
//
// Every node also has a slice of another driver (PUBLISHER_BENCH_OTHER_DEVICES devices, default
// 8) that the publisher does not serve.
//
// Reported:
//   - median-ms, p99-ms: from the last of the updates that change the driverVersion of all
//     nodes of one group (the group's template changes only when all its nodes agree) to the
//     watch event of the MachineDeployment with the new template hash, over
//     PUBLISHER_BENCH_SAMPLES changes (at least; one per b.Loop iteration beyond that);
//     median-from-first-ms from the first of those updates;
//   - writes/change: the publisher's writes per such change (1 is ideal);
//   - steady-writes: writes while node identity changes (new GPU UUIDs on one node per group),
//     node updates that do not matter (annotations, heartbeats, lifecycle taints) go on, and
//     the timestamp label churn below runs;
//   - churn-cores: the publisher's CPU seconds (utime+stime of /proc/<pid>/stat) during the
//     timestamp label churn divided by its wall time. The churn rewrites a label
//     (nvidia.com/gfd.timestamp, as GPU feature discovery does every 60 s) on every node once
//     per PUBLISHER_BENCH_CHURN_PERIOD (default 15s: GFD's 60 s compressed 4 times, so the
//     publisher sees 4 times the real event rate), spread evenly over the period, for
//     PUBLISHER_BENCH_CHURN (default 60s);
//   - restart-writes: writes of a restarted publisher that finds every group up to date;
//   - initial-s: from the publisher's start to every group annotated;
//   - peak-rss-MiB: the publisher process's peak resident set (VmHWM of /proc/<pid>/status:
//     everything the process held, not only the Go heap), the larger of the first process's
//     (start, churn) and the restarted one's (start, latency samples).
func BenchmarkPublisher(b *testing.B) {
	shapes := strings.Split(os.Getenv("PUBLISHER_BENCH_SHAPES"), ",")
	if os.Getenv("PUBLISHER_BENCH_SHAPES") == "" {
		shapes = []string{shapeWholeGPU, shapeDynamicMIG}
	}
	for _, shape := range shapes {
		b.Run(shape, func(b *testing.B) { benchmarkPublisher(b, shape) })
	}
}

const (
	shapeWholeGPU   = "whole-gpu"
	shapeDynamicMIG = "dynamic-mig"
	// otherDriver publishes slices on every node that the publisher does not serve.
	otherDriver = "nic.example.com"
	// timestampLabel is rewritten on every node during the churn, as GPU feature discovery does.
	timestampLabel = "nvidia.com/gfd.timestamp"
)

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func benchmarkPublisher(b *testing.B, shape string) {
	groups, perGroup := envInt("PUBLISHER_BENCH_GROUPS", 100), envInt("PUBLISHER_BENCH_NODES", 10)
	minSamples := envInt("PUBLISHER_BENCH_SAMPLES", 60)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	devices, err := newBenchShape(ctx, shape, envInt("PUBLISHER_BENCH_OTHER_DEVICES", 8))
	if err != nil {
		b.Fatal(err)
	}

	// No kubelets renew these nodes' leases; without the node lifecycle controller they are
	// not tainted unreachable one by one for minutes, which would keep the publisher busy with
	// (irrelevant) node updates and the measurement from ever seeing a quiet cluster.
	c := cluster.StartForTest(b, cluster.Options{ControllerManagerFlags: []string{"--controllers=*,-node-lifecycle-controller"}})
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = 1000, 2000
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	cl, err := framework.NewCAPIClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := framework.InstallClusterAPI(ctx, cfg, cl); err != nil {
		b.Fatal(err)
	}
	// Build the binaries before anything is timed.
	if _, err := framework.Binary("accel-dra-template-publisher"); err != nil {
		b.Fatal(err)
	}

	start := time.Now()
	if err := populate(ctx, clientset, cl, devices, groups, perGroup); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: %d nodes in %d groups created in %s", shape, groups*perGroup, groups, time.Since(start).Round(time.Millisecond))

	w, err := watchHashes(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	pub, err := startPublisher(ctx, c, "--leader-elect=false", "--profiling")
	if err != nil {
		b.Fatal(err)
	}
	if path := os.Getenv("PUBLISHER_BENCH_CPUPROFILE"); path != "" {
		// A CPU profile of the publisher's first 20 s, for looking into its start-up.
		go func() {
			resp, err := http.Get("http://" + pub.MetricsAddr + "/debug/pprof/profile?seconds=20")
			if err != nil {
				b.Logf("profile: %v", err)
				return
			}
			defer func() { _ = resp.Body.Close() }()
			data, _ := io.ReadAll(resp.Body)
			_ = os.WriteFile(path, data, 0o644)
		}()
	}
	for g := range groups {
		if _, err := w.waitChange(ctx, groupNameOf(g), "", 5*time.Minute); err != nil {
			b.Fatalf("group %d never annotated: %v\n%s", g, err, pub.Proc.LogTail(20))
		}
	}
	initial := time.Since(start)
	// The templates hold the nodes' devices: a publisher that annotated empty templates would
	// be fast and small for nothing.
	if err := checkTemplates(ctx, cl, devices, groups); err != nil {
		b.Fatal(err)
	}
	pub.settle(ctx, b, 3*time.Second)
	b.Logf("all %d groups annotated %s after the publisher started (%v writes, peak RSS %.0f MiB so far)", groups, initial.Round(time.Millisecond), pub.writes(b), peakRSSMiB(b, pub.Proc.Pid()))

	// Steady state: identity churn, irrelevant node updates, and the timestamp label churn.
	before, reconciles := pub.writes(b), pub.reconciles(b)
	if err := churn(ctx, clientset, devices, groups, perGroup); err != nil {
		b.Fatal(err)
	}
	pub.settleAfter(ctx, b, 3*time.Second, reconciles)
	period, churnFor := envDuration("PUBLISHER_BENCH_CHURN_PERIOD", 15*time.Second), envDuration("PUBLISHER_BENCH_CHURN", time.Minute)
	cpuBefore, churnStart := cpuSeconds(b, pub.Proc.Pid()), time.Now()
	if err := labelChurn(ctx, clientset, groups, perGroup, period, churnFor); err != nil {
		b.Fatal(err)
	}
	churnCores := (cpuSeconds(b, pub.Proc.Pid()) - cpuBefore) / time.Since(churnStart).Seconds()
	pub.settle(ctx, b, 3*time.Second)
	steady := pub.writes(b) - before
	peak := peakRSSMiB(b, pub.Proc.Pid())

	// A restart finds everything up to date.
	if err := pub.Proc.Stop(); err != nil {
		b.Fatal(err)
	}
	if pub, err = startPublisher(ctx, c, "--leader-elect=false"); err != nil {
		b.Fatal(err)
	}
	pub.settleAfter(ctx, b, 3*time.Second, 0)
	restart := pub.writes(b)

	// Latency of template changes.
	var fromLast, fromFirst []time.Duration
	before = pub.writes(b)
	sample := func(i int) {
		g := groupNameOf(i % groups)
		old := w.hash(g)
		first, last, err := setDriverVersion(ctx, clientset, devices, i%groups, perGroup, fmt.Sprintf("570.%d.0", 200+i))
		if err != nil {
			b.Fatal(err)
		}
		seen, err := w.waitChange(ctx, g, old, time.Minute)
		if err != nil {
			b.Fatalf("group %s: template not updated: %v", g, err)
		}
		fromLast = append(fromLast, max(0, seen.Sub(last)))
		fromFirst = append(fromFirst, seen.Sub(first))
	}
	i := 0
	for b.Loop() {
		sample(i)
		i++
	}
	for ; i < minSamples; i++ {
		sample(i)
	}
	pub.settle(ctx, b, 2*time.Second)
	perChange := (pub.writes(b) - before) / float64(i)
	peak = max(peak, peakRSSMiB(b, pub.Proc.Pid()))

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(fromLast, 50)), "median-ms")
	b.ReportMetric(ms(percentile(fromLast, 99)), "p99-ms")
	b.ReportMetric(ms(percentile(fromFirst, 50)), "median-from-first-ms")
	b.ReportMetric(perChange, "writes/change")
	b.ReportMetric(steady, "steady-writes")
	b.ReportMetric(restart, "restart-writes")
	b.ReportMetric(initial.Seconds(), "initial-s")
	b.ReportMetric(peak, "peak-rss-MiB")
	b.ReportMetric(churnCores, "churn-cores")
	b.Logf("%s: %d samples: median %.1f ms, p99 %.1f ms (from the first update: median %.1f ms); %.2f writes per change; %v writes in steady state, %v after a restart; peak RSS %.0f MiB; %.3f cores during the label churn (every node every %s for %s)",
		shape, i, ms(percentile(fromLast, 50)), ms(percentile(fromLast, 99)), ms(percentile(fromFirst, 50)), perChange, steady, restart, peak, churnCores, period, churnFor)
}

// peakRSSMiB is VmHWM of the process: its peak resident set since it started.
func peakRSSMiB(b *testing.B, pid int) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb / 1024
		}
	}
	b.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// cpuSeconds is the user and system CPU time of the process (/proc/<pid>/stat fields 14 and 15,
// in USER_HZ = 100 ticks a second on Linux).
func cpuSeconds(b *testing.B, pid int) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest) // f[0] is field 3
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %v %v", pid, err1, err2)
	}
	return (utime + stime) / 100
}

// labelChurn rewrites timestampLabel on every node once per period for d, node by node at
// even intervals; nodes of one group are period/perGroup apart, and the value has milliseconds,
// so that no two nodes ever agree on it.
func labelChurn(ctx context.Context, cs kubernetes.Interface, groups, perGroup int, period, d time.Duration) error {
	total := groups * perGroup
	tick := time.NewTicker(period / time.Duration(total))
	defer tick.Stop()
	end := time.Now().Add(d)
	errs := make(chan error, 1)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; time.Now().Before(end); i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case <-tick.C:
		}
		n, g := (i%total)/groups, i%groups
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"%d"}}}`, timestampLabel, time.Now().UnixMilli())
			if _, err := cs.CoreV1().Nodes().Patch(ctx, nodeNameOf(g, n), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	return nil
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	idx := (len(s)*p + 99) / 100
	return s[min(max(idx-1, 0), len(s)-1)]
}

// checkTemplates checks that the first, middle and last group's template has as many devices
// of the served driver as one of its nodes publishes.
func checkTemplates(ctx context.Context, cl client.Client, shape *benchShape, groups int) error {
	want := 0
	for _, sl := range shape.slices(0, 0, 0, "570.124.6") {
		if sl.Spec.Driver == framework.GPUDriver {
			want += len(sl.Spec.Devices)
		}
	}
	for _, g := range []int{0, groups / 2, groups - 1} {
		md := &clusterv1.MachineDeployment{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: framework.CAPINamespace, Name: groupNameOf(g)}, md); err != nil {
			return err
		}
		tmpl, err := template.Decode(md.Annotations)
		if err != nil {
			return fmt.Errorf("group %s: %w", groupNameOf(g), err)
		}
		got := 0
		for _, d := range tmpl.Drivers {
			if d.Name == framework.GPUDriver {
				got += len(d.Devices)
			}
		}
		if got != want {
			return fmt.Errorf("group %s: the template has %d devices of %s, its nodes publish %d", groupNameOf(g), got, framework.GPUDriver, want)
		}
	}
	return nil
}

func groupNameOf(g int) string    { return fmt.Sprintf("bench-%03d", g) }
func nodeNameOf(g, n int) string  { return fmt.Sprintf("bench-%03d-node-%02d", g, n) }
func sliceNameOf(g, n int) string { return nodeNameOf(g, n) + "-gpu" }
func benchUUID(node string, i, gen int) string {
	return fmt.Sprintf("GPU-%s-%d-%d", node, gen, i)
}

// benchDevices are the 8 GPUs of a DGX-H100-like node, as the plugin publishes them.
func benchDevices(node string, uuidGen int, driverVersion string) []resourceapi.Device {
	roots := []string{"pci0000:15", "pci0000:48", "pci0000:97", "pci0000:c7"}
	var out []resourceapi.Device
	for i := range 8 {
		out = append(out, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":                            {StringValue: new("gpu")},
				"uuid":                            {StringValue: new(benchUUID(node, i, uuidGen))},
				"productName":                     {StringValue: new("NVIDIA H100 80GB HBM3")},
				"architecture":                    {StringValue: new("Hopper")},
				"index":                           {IntValue: new(int64(i))},
				"driverVersion":                   {VersionValue: new(driverVersion)},
				"cudaComputeCapability":           {VersionValue: new("9.0.0")},
				"resource.kubernetes.io/pciBusID": {StringValue: new(fmt.Sprintf("0000:%02x:00.0", 0x1b+i*0x18))},
				"resource.kubernetes.io/pcieRoot": {StringValue: new(roots[i/2])},
				"resource.kubernetes.io/numaNode": {IntValue: new(int64(i / 4))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		})
	}
	return out
}

// benchShape makes the ResourceSlices of one bench node: the served driver's and another
// driver's.
type benchShape struct {
	// gpu are the served driver's slices of a node named generatedNode (dynamic-mig), nil for
	// whole-gpu (benchDevices).
	gpu          []resourceapi.ResourceSlice
	otherDevices int
}

const generatedNode = "generated"

func newBenchShape(ctx context.Context, shape string, otherDevices int) (*benchShape, error) {
	s := &benchShape{otherDevices: otherDevices}
	switch shape {
	case shapeWholeGPU:
	case shapeDynamicMIG:
		o := nodeplugin.NewOptions()
		o.Backend, o.MockProfile, o.DynamicMIG, o.NodeName = backend.Mock, "h100-8x-mig", true, generatedNode
		var err error
		if s.gpu, err = nodeplugin.GenerateSlices(ctx, o); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("PUBLISHER_BENCH_SHAPES: unknown shape %q (want %s or %s)", shape, shapeWholeGPU, shapeDynamicMIG)
	}
	return s, nil
}

// gpuSliceNames are the names of the served driver's slices of a node.
func (s *benchShape) gpuSliceNames(g, n int) []string {
	if s.gpu == nil {
		return []string{sliceNameOf(g, n)}
	}
	names := make([]string, len(s.gpu))
	for i := range s.gpu {
		names[i] = fmt.Sprintf("%s-%d", sliceNameOf(g, n), i)
	}
	return names
}

// slices returns the node's slices: the served driver's (with UUIDs of generation uuidGen)
// and then the other driver's.
func (s *benchShape) slices(g, n, uuidGen int, driverVersion string) []*resourceapi.ResourceSlice {
	node := nodeNameOf(g, n)
	var out []*resourceapi.ResourceSlice
	if s.gpu == nil {
		out = append(out, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: sliceNameOf(g, n)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: framework.GPUDriver, NodeName: new(node),
				Pool:    resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
				Devices: benchDevices(node, uuidGen, driverVersion),
			},
		})
	} else {
		names := s.gpuSliceNames(g, n)
		for i := range s.gpu {
			sl := s.gpu[i].DeepCopy()
			sl.ObjectMeta = metav1.ObjectMeta{Name: names[i]}
			sl.Spec.NodeName = new(node)
			sl.Spec.Pool.Name = strings.Replace(sl.Spec.Pool.Name, generatedNode, node, 1)
			for j := range sl.Spec.Devices {
				setIdentity(sl.Spec.Devices[j].Attributes, node, uuidGen)
				if _, ok := sl.Spec.Devices[j].Attributes["driverVersion"]; ok {
					sl.Spec.Devices[j].Attributes["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: new(driverVersion)}
				}
			}
			out = append(out, sl)
		}
	}
	other := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: nodeNameOf(g, n) + "-nic"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: otherDriver, NodeName: new(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := range s.otherDevices {
		other.Spec.Devices = append(other.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("nic-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"macAddress":                      {StringValue: new(fmt.Sprintf("%s-%d", node, i))},
				"model":                           {StringValue: new("ConnectX-7")},
				"resource.kubernetes.io/pciBusID": {StringValue: new(fmt.Sprintf("0000:%02x:00.1", 0x1b+i*0x18))},
			},
		})
	}
	return append(out, other)
}

// setIdentity makes the generated node's UUIDs and serials the node's own (generation gen),
// keeping which devices share one (a MIG partition's parentUUID is its GPU's uuid).
func setIdentity(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, node string, gen int) {
	for name, a := range attrs {
		switch name {
		case "uuid", "parentUUID", "serial":
			if a.StringValue != nil {
				attrs[name] = resourceapi.DeviceAttribute{StringValue: new(fmt.Sprintf("%s-%s-%d", *a.StringValue, node, gen))}
			}
		}
	}
}

// parallel runs fn for 0..n-1 on a few workers and returns the first error.
func parallel(n, workers int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// populate creates the groups, their nodes (with capacity), slices and machines.
func populate(ctx context.Context, cs kubernetes.Interface, cl client.Client, shape *benchShape, groups, perGroup int) error {
	gs := make([]*framework.NodeGroup, groups)
	if err := parallel(groups, 8, func(g int) error {
		var err error
		gs[g], err = framework.CreateNodeGroup(ctx, cl, groupNameOf(g), nil)
		return err
	}); err != nil {
		return err
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("224"),
		corev1.ResourceMemory:           resource.MustParse("2Ti"),
		corev1.ResourceEphemeralStorage: resource.MustParse("3Ti"),
		corev1.ResourcePods:             resource.MustParse("110"),
	}
	return parallel(groups*perGroup, 16, func(i int) error {
		g, n := i/perGroup, i%perGroup
		name := nodeNameOf(g, n)
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			// The labels a kubelet registers with, beta ones included (else the
			// controller-manager adds those later, a change the publisher would write).
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
			"node.kubernetes.io/instance-type": "p5.48xlarge", "node.cluster.x-k8s.io/group": groupNameOf(g),
		}}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		// A patch, not an update: the controller-manager's node controllers change the node
		// at the same time.
		status, err := json.Marshal(map[string]any{"status": corev1.NodeStatus{Capacity: res, Allocatable: res}})
		if err != nil {
			return err
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			return err
		}
		for _, s := range shape.slices(g, n, 0, "570.124.6") {
			if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		_, err = gs[g].AddMachine(ctx, cl, name, name, false)
		return err
	})
}

// updateSlices changes the devices of one node's slices of the served driver (a new pool
// generation, as a driver publishes a change), slice by slice.
func updateSlices(ctx context.Context, cs kubernetes.Interface, shape *benchShape, g, n int, mutate func(node string, s *resourceapi.ResourceSlice)) error {
	for _, name := range shape.gpuSliceNames(g, n) {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := cs.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			mutate(nodeNameOf(g, n), s)
			s.Spec.Pool.Generation++
			_, err = cs.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// setDriverVersion gives all nodes of group g a new driver version at once and returns when the
// first update was sent and the last one done.
func setDriverVersion(ctx context.Context, cs kubernetes.Interface, shape *benchShape, g, perGroup int, version string) (first, last time.Time, err error) {
	first = time.Now()
	err = parallel(perGroup, perGroup, func(n int) error {
		return updateSlices(ctx, cs, shape, g, n, func(_ string, s *resourceapi.ResourceSlice) {
			for i := range s.Spec.Devices {
				if _, ok := s.Spec.Devices[i].Attributes["driverVersion"]; ok {
					s.Spec.Devices[i].Attributes["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: new(version)}
				}
			}
		})
	})
	return first, time.Now(), err
}

// churn makes changes that must not cause writes: new GPU UUIDs and PCI addresses on one node of
// every group (as a replaced machine would have), and annotation updates on every node.
func churn(ctx context.Context, cs kubernetes.Interface, shape *benchShape, groups, perGroup int) error {
	if err := parallel(groups, 16, func(g int) error {
		return updateSlices(ctx, cs, shape, g, g%perGroup, func(node string, s *resourceapi.ResourceSlice) {
			for i := range s.Spec.Devices {
				if shape.gpu == nil {
					s.Spec.Devices[i].Attributes["uuid"] = resourceapi.DeviceAttribute{StringValue: new(benchUUID(node, i, 1))}
					continue
				}
				for name, a := range s.Spec.Devices[i].Attributes {
					// setIdentity's generation 0 becomes 1: the API caps attribute strings
					// at 64 bytes, so nothing is appended.
					if v := a.StringValue; (name == "uuid" || name == "parentUUID") && v != nil && strings.HasSuffix(*v, "-0") {
						s.Spec.Devices[i].Attributes[name] = resourceapi.DeviceAttribute{StringValue: new(strings.TrimSuffix(*v, "-0") + "-1")}
					}
				}
			}
		})
	}); err != nil {
		return err
	}
	return parallel(groups*perGroup, 16, func(i int) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench.accel-dra.io/touched":%q}}}`, time.Now().Format(time.RFC3339Nano))
		_, err := cs.CoreV1().Nodes().Patch(ctx, nodeNameOf(i/perGroup, i%perGroup), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	})
}

// hashWatcher follows the template hash of every MachineDeployment through a watch.
type hashWatcher struct {
	mu      sync.Mutex
	hashes  map[string]string
	seen    map[string]time.Time
	changed map[string]chan struct{}
}

func watchHashes(ctx context.Context, cfg *rest.Config) (*hashWatcher, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	res := dc.Resource(clusterv1.GroupVersion.WithResource("machinedeployments")).Namespace(framework.CAPINamespace)
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	w := &hashWatcher{hashes: map[string]string{}, seen: map[string]time.Time{}, changed: map[string]chan struct{}{}}
	for _, item := range list.Items {
		w.update(&item)
	}
	rv := list.GetResourceVersion()
	go func() {
		for ctx.Err() == nil {
			wi, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = u.GetResourceVersion()
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					w.update(u)
				}
			}
		}
	}()
	return w, nil
}

func (w *hashWatcher) update(u *unstructured.Unstructured) {
	now := time.Now()
	h := u.GetAnnotations()[template.HashAnnotation]
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.hashes[u.GetName()]; ok && old == h {
		return
	}
	w.hashes[u.GetName()] = h
	w.seen[u.GetName()] = now
	if ch, ok := w.changed[u.GetName()]; ok {
		close(ch)
	}
	w.changed[u.GetName()] = make(chan struct{})
}

func (w *hashWatcher) hash(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hashes[name]
}

// waitChange waits until the group's hash is other than old and returns when that was seen.
func (w *hashWatcher) waitChange(ctx context.Context, name, old string, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		h, seen, ch := w.hashes[name], w.seen[name], w.changed[name]
		if ch == nil {
			ch = make(chan struct{})
			w.changed[name] = ch
		}
		w.mu.Unlock()
		if h != old {
			return seen, nil
		}
		select {
		case <-ch:
		case <-deadline:
			return time.Time{}, wait.ErrorInterrupted(fmt.Errorf("hash of %s still %q after %s", name, old, timeout))
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}
