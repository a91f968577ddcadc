//go:build e2e

// Package schedbench measures what the slices the plugin publishes cost the real
// kube-scheduler: fake nodes (Node objects, no kubelet) carrying the pools the plugin's own code
// builds for each device model (models.go), one pre-created one-device ResourceClaim per pod,
// and a burst of pods created at once. It reports pods/s, the time from a pod's creation to its
// binding (both taken from a watch), and the scheduler's own DynamicResources PreFilter and
// Filter times from its metrics. docs/scheduling-benchmark.md explains the figures; `make bench`
// runs it through hack/bench.sh, which prints the table.
package schedbench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/kubeclient"
)

// Environment knobs (hack/bench.sh passes them through).
const (
	// envNodes is a comma-separated list of fleet sizes; default 50,200,1000.
	envNodes = "SCHED_BENCH_NODES"
	// envModels is a comma-separated list of model names (models.go); default all.
	envModels = "SCHED_BENCH_MODELS"
	// envPods is the burst size; default min(600, 6 × nodes), and for a model whose pods take
	// several devices at most three quarters of the fleet's devices, as 6 one-device pods per
	// 8-GPU node take.
	envPods = "SCHED_BENCH_PODS"
	// envProfileDir names a directory for a CPU profile of the scheduler during each burst
	// (<dir>/nodes=N-model=M.pprof); unset, none is taken.
	envProfileDir = "SCHED_BENCH_PROFILE_DIR"
	// envSchedulerFlags are extra kube-scheduler flags.
	envSchedulerFlags = "SCHED_BENCH_SCHEDULER_FLAGS"
	// envPercentage sets the scheduler's percentageOfNodesToScore (default: unset, the
	// adaptive default), through a KubeSchedulerConfiguration file.
	envPercentage = "SCHED_BENCH_PERCENTAGE_OF_NODES_TO_SCORE"
)

// schedulerFlags are the kube-scheduler's flags beyond the harness's. The scheduler's client
// limit (default 50 QPS, burst 100) would cap binding at about 25 pods/s (a claim status update
// and a binding per pod) and measure the client, not the scheduler. percentageOfNodesToScore
// stays at its default unless envPercentage sets it; that needs a configuration file, and with
// one the scheduler ignores its deprecated flags (--kubeconfig, --kube-api-qps), so the file
// carries them. dir is the cluster's work directory, where it writes admin.kubeconfig.
func schedulerFlags(dir string) ([]string, error) {
	flags := []string{"--kube-api-qps=5000", "--kube-api-burst=10000", "--v=1"}
	if env := os.Getenv(envPercentage); env != "" {
		pct, err := strconv.Atoi(env)
		if err != nil || pct < 0 || pct > 100 {
			return nil, fmt.Errorf("%s=%q: want a percentage", envPercentage, env)
		}
		cfg := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 5000
  burst: 10000
leaderElection:
  leaderElect: false
percentageOfNodesToScore: %d
`, filepath.Join(dir, "admin.kubeconfig"), pct)
		path := filepath.Join(dir, "kube-scheduler-config.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			return nil, err
		}
		flags = append(flags, "--config="+path)
	}
	return append(flags, strings.Fields(os.Getenv(envSchedulerFlags))...), nil
}

func sizes() ([]int, error) {
	env := os.Getenv(envNodes)
	if env == "" {
		env = "50,200,1000"
	}
	var out []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: %q is not a node count", envNodes, env, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func burst(nodes, devicesPerNode, devicesPerPod int) (int, error) {
	if env := os.Getenv(envPods); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%s=%q is not a pod count", envPods, env)
		}
		return n, nil
	}
	pods := min(600, 6*nodes)
	if devicesPerPod > 1 {
		pods = min(pods, nodes*devicesPerNode*3/(4*devicesPerPod))
	}
	return pods, nil
}

// BenchmarkScheduling runs, for each fleet size, one control plane with that many fake nodes
// and, for each model in turn, publishes the model's pool on every node, creates one claim per
// pod, then the pods at once, and measures until every pod is bound. Run it with
// -benchtime=1x: one burst is one measurement, and -count repeats it.
func BenchmarkScheduling(b *testing.B) {
	ns, err := sizes()
	if err != nil {
		b.Fatal(err)
	}
	ms, err := selected()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range ns {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			f := startFleet(b, n)
			for _, m := range ms {
				b.Run("model="+m.name, func(b *testing.B) {
					f.run(b, m)
				})
			}
		})
	}
}

type fleet struct {
	c      *cluster.Cluster
	client kubernetes.Interface
	nodes  []*corev1.Node
	runs   int
}

func startFleet(b *testing.B, n int) *fleet {
	ctx := context.Background()
	// A directory of the benchmark's own, so that the scheduler's configuration can name the
	// kubeconfig the cluster writes there.
	dir := b.TempDir()
	sched, err := schedulerFlags(dir)
	if err != nil {
		b.Fatal(err)
	}
	c := cluster.StartForTest(b, cluster.Options{
		Dir:            dir,
		SchedulerFlags: sched,
		// No kubelet renews the fake nodes' leases.
		ControllerManagerFlags: []string{"--controllers=*,-node-lifecycle-controller", "--kube-api-qps=5000", "--kube-api-burst=10000"},
		APIServerFlags:         []string{"--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000"},
	})
	cfg := c.RESTConfig()
	cfg.QPS = -1
	kubeclient.UseProtobuf(cfg)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := framework.EnsureChartDeviceClasses(ctx, client); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	nodes, err := createNodes(ctx, client, n)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d nodes created in %s", n, time.Since(start).Round(time.Millisecond))
	return &fleet{c: c, client: client, nodes: nodes}
}

func (f *fleet) run(b *testing.B, m model) {
	ctx := context.Background()
	f.runs++
	res, devices, err := m.pool(ctx, f.nodes[0].Name, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	pods, err := burst(len(f.nodes), devices, m.devicesPerPod())
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	slicesPerNode, err := publish(ctx, f.client, f.nodes, m.driver, res)
	if err != nil {
		b.Fatal(err)
	}
	ns := fmt.Sprintf("bench-%d", f.runs)
	defer func() {
		if err := f.cleanUp(ctx, ns, m.driver); err != nil {
			b.Error(err)
		}
	}()
	b.Logf("%d devices and %d slices per node published on %d nodes in %s", devices, slicesPerNode, len(f.nodes), time.Since(start).Round(time.Millisecond))

	if err := f.namespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	if err := parallel(pods, 16, func(i int) error {
		_, err := f.client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", i)},
			Spec:       resourceapi.ResourceClaimSpec{Devices: *m.claim.DeepCopy()},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	list, err := f.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	before, err := f.scrape()
	if err != nil {
		b.Fatal(err)
	}
	stopProfile := f.profile(b, fmt.Sprintf("nodes=%d-model=%s", len(f.nodes), m.name))
	cpuBefore, err := f.schedulerCPU()
	if err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	created := make(chan error, 1)
	go func() {
		created <- parallel(pods, 16, func(i int) error {
			_, err := f.client.CoreV1().Pods(ns).Create(ctx, benchPod(i), metav1.CreateOptions{})
			return err
		})
	}()
	added, bound, err := watchBindings(ctx, f.client.CoreV1().Pods(ns), list.ResourceVersion, pods, created)
	b.StopTimer()
	cpuAfter, cpuErr := f.schedulerCPU()
	stopProfile()
	if err != nil {
		b.Fatal(err)
	}
	if cpuErr != nil {
		b.Fatal(cpuErr)
	}
	after, err := f.scrape()
	if err != nil {
		b.Fatal(err)
	}

	var lat []time.Duration
	first, last := time.Time{}, time.Time{}
	for name, t := range bound {
		lat = append(lat, t.Sub(added[name]))
		if first.IsZero() || added[name].Before(first) {
			first = added[name]
		}
		if t.After(last) {
			last = t
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(pods)/last.Sub(first).Seconds(), "pods/s")
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[(len(lat)-1)*99/100]), "p99-ms")
	// The scheduler's CPU time per pod does not depend on what else runs on the machine, as
	// the rates above do: on a shared machine it is the steadier figure to compare models by.
	b.ReportMetric((cpuAfter-cpuBefore)/float64(pods)*1000, "sched-cpu-ms/pod")
	b.ReportMetric(float64(devices), "devices/node")
	b.ReportMetric(float64(m.devicesPerPod()), "devices/pod")
	b.ReportMetric(float64(pods), "pods")
	b.ReportMetric(float64(nodesExamined(len(f.nodes))), "examined/pod")
	b.ReportMetric(float64(slicesPerNode), "slices/node")
	for _, p := range draPoints {
		count := after[p+"_count"] - before[p+"_count"]
		if count > 0 {
			b.ReportMetric((after[p+"_sum"]-before[p+"_sum"])/count*1e6, "dra-"+strings.ToLower(p)+"-us")
			if p == "Filter" {
				// Filter calls per pod in the sampled scheduling cycles, as far as the
				// scheduler kept them: its asynchronous metrics recorder holds 1,000
				// observations a second and drops the rest (observeMetricAsync in
				// pkg/scheduler/metrics/metric_recorder.go of v1.37.1), and every filter plugin
				// records one per node, so on large fleets this undercounts.
				cycles := after["sampled_cycles"] - before["sampled_cycles"]
				if cycles > 0 {
					b.ReportMetric(count/cycles, "filters/pod")
				}
			}
		}
	}
	if c := after["attempts_count"] - before["attempts_count"]; c > 0 {
		b.ReportMetric((after["attempts_sum"]-before["attempts_sum"])/c*1000, "attempt-ms")
		b.ReportMetric(c/float64(pods), "attempts/pod")
	}
}

// cleanUp deletes the run's pods at once (no kubelet would confirm a graceful deletion), then
// its namespace, waiting until its claims are gone so that the next model finds every device
// free, then the model's slices.
func (f *fleet) cleanUp(ctx context.Context, ns, driver string) error {
	zero := int64(0)
	if err := f.client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := f.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := f.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return fmt.Errorf("namespace %s not gone: %w", ns, err)
	}
	return unpublish(ctx, f.client, driver)
}

// schedulerCPU returns the CPU time (user and system, in seconds) the kube-scheduler process
// has used so far, from /proc/<pid>/stat.
func (f *fleet) schedulerCPU() (float64, error) {
	for _, p := range f.c.Processes() {
		if p.Name != "kube-scheduler" || p.Exited() {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
		if err != nil {
			return 0, err
		}
		// The command name, in parentheses, may hold spaces; the fields after it do not.
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		utime, err1 := strconv.ParseFloat(fields[11], 64)
		stime, err2 := strconv.ParseFloat(fields[12], 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("kube-scheduler /proc/%d/stat: %q", p.Pid(), data)
		}
		// Ticks of USER_HZ, 100 per second on Linux.
		return (utime + stime) / 100, nil
	}
	return 0, fmt.Errorf("no running kube-scheduler")
}

// nodesExamined is how many feasible nodes the scheduler looks for per pod before it stops
// filtering: numFeasibleNodesToFind in pkg/scheduler/schedule_one.go of v1.37.1, with the
// percentageOfNodesToScore envPercentage sets or the adaptive default.
func nodesExamined(nodes int) int {
	const minFeasibleNodesToFind, minFeasibleNodesPercentageToFind = 100, 5
	if nodes < minFeasibleNodesToFind {
		return nodes
	}
	pct, err := strconv.Atoi(os.Getenv(envPercentage))
	if err != nil || pct == 0 {
		pct = max(50-nodes/125, minFeasibleNodesPercentageToFind)
	}
	return max(nodes*pct/100, minFeasibleNodesToFind)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (f *fleet) namespace(ctx context.Context, ns string) error {
	if _, err := f.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// Pods are refused until the namespace's service account exists.
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := f.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func benchPod(i int) *corev1.Pod {
	name := fmt.Sprintf("pod-%d", i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}},
			}},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "dev", ResourceClaimName: new(fmt.Sprintf("claim-%d", i))}},
			AutomountServiceAccountToken:  new(false),
			TerminationGracePeriodSeconds: new(int64(0)),
		},
	}
}

// watchBindings takes, from a pod watch, the time each pod was first seen (its creation) and
// the time it was first seen bound, until all n are bound. The apiserver closes a watch whose
// reader falls behind, which a burst on two cores can cause: the watch is then resumed from the
// last resourceVersion seen, so no event is lost, only received a little later. It fails when no
// pod is bound for a minute, naming how many are still pending.
func watchBindings(ctx context.Context, pods corev1client.PodInterface, rv string, n int, created <-chan error) (added, bound map[string]time.Time, err error) {
	added, bound = map[string]time.Time{}, map[string]time.Time{}
	stall := time.NewTimer(time.Minute)
	defer stall.Stop()
	for len(bound) < n {
		w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return nil, nil, err
		}
		rv, err = readBindings(w, n, created, stall, added, bound, rv)
		w.Stop()
		if err != nil {
			return nil, nil, err
		}
	}
	return added, bound, nil
}

// readBindings reads one watch until it closes or all n pods are bound, and returns the last
// resourceVersion seen.
func readBindings(w watch.Interface, n int, created <-chan error, stall *time.Timer, added, bound map[string]time.Time, rv string) (string, error) {
	for len(bound) < n {
		select {
		case err := <-created:
			if err != nil {
				return rv, fmt.Errorf("creating pods: %w", err)
			}
		case <-stall.C:
			return rv, fmt.Errorf("%d of %d pods bound, %d seen; none bound for a minute", len(bound), n, len(added))
		case ev, ok := <-w.ResultChan():
			now := time.Now()
			if !ok {
				return rv, nil
			}
			if ev.Type == watch.Error {
				return rv, fmt.Errorf("pod watch: %v", ev.Object)
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			rv = pod.ResourceVersion
			if _, seen := added[pod.Name]; !seen {
				added[pod.Name] = now
			}
			if _, done := bound[pod.Name]; !done && pod.Spec.NodeName != "" {
				bound[pod.Name] = now
				stall.Reset(time.Minute)
			}
		}
	}
	return rv, nil
}

// draPoints are the DynamicResources extension points whose time is reported. The scheduler
// records plugin times only in a sample of its scheduling cycles (pluginMetricsSamplePercent =
// 10 in pkg/scheduler/schedule_one.go of v1.37.1), one observation per call, so they are means
// over about a tenth of the pods; Filter is called once per node examined.
var draPoints = []string{"PreFilter", "Filter"}

// scrape reads the scheduler's metrics: for each of draPoints the _sum and _count of
// scheduler_plugin_execution_duration_seconds{plugin="DynamicResources"}, the number of sampled
// cycles (the PreFilter count: one call per cycle), and the scheduling attempts' duration.
func (f *fleet) scrape() (map[string]float64, error) {
	body, err := f.get("/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, labels, value, ok := sample(line)
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "scheduler_plugin_execution_duration_seconds_") && strings.Contains(labels, `plugin="DynamicResources"`):
			for _, p := range draPoints {
				if strings.Contains(labels, `extension_point="`+p+`"`) {
					out[p+strings.TrimPrefix(name, "scheduler_plugin_execution_duration_seconds")] += value
					if p == "PreFilter" && strings.HasSuffix(name, "_count") {
						out["sampled_cycles"] += value
					}
				}
			}
		case strings.HasPrefix(name, "scheduler_scheduling_attempt_duration_seconds_"):
			out["attempts"+strings.TrimPrefix(name, "scheduler_scheduling_attempt_duration_seconds")] += value
		}
	}
	return out, nil
}

// sample splits a Prometheus text line into name, labels and value.
func sample(line string) (name, labels string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", "", 0, false
	}
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	if err != nil {
		return "", "", 0, false
	}
	name = line[:sp]
	if i := strings.IndexByte(name, '{'); i >= 0 {
		name, labels = name[:i], name[i:]
	}
	return name, labels, v, true
}

// get GETs a path of the scheduler's secure port with the admin token.
func (f *fleet) get(path string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, f.c.SchedulerURL()+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+f.c.RESTConfig().BearerToken)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the harness's self-signed loopback scheduler
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET scheduler %s: %s: %.200s", path, resp.Status, body)
	}
	return body, nil
}

// profile takes a CPU profile of the scheduler from its pprof endpoint while the burst runs,
// if envProfileDir is set; the returned function ends it and writes it.
func (f *fleet) profile(b *testing.B, name string) func() {
	dir := os.Getenv(envProfileDir)
	if dir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// A fixed 10 s: the burst is shorter or about as long, and an idle scheduler adds no
		// samples.
		data, err := f.get("/debug/pprof/profile?seconds=10")
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".pprof"), data, 0o644)
		}
		if err != nil {
			b.Error(err)
		}
	}()
	return wg.Wait
}
