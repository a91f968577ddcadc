//go:build e2e

// Package bench measures the node plugin over its real gRPC socket, the way the kubelet calls
// it, with the claims held in a real apiserver and the plugin binary at its default settings.
// Run it with `make bench`.
package bench

import (
	"context"
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/kubeclient"
)

// devices is the synthetic node's GPU count: enough for 1,000 prepared claims plus the ones
// being measured.
const devices = 1024

type benchEnv struct {
	c      *cluster.Cluster
	plugin *framework.Plugin
	dra    drapb.DRAPluginClient
	node   string
	// held are claims for BenchmarkPrepareWithPrepared to keep prepared. They are created
	// before any benchmark runs, so that every benchmark (and every -count run) finds the same
	// objects in the apiserver and etcd, as many as a busy cluster has, and none measures
	// right after a burst of 2,000 writes.
	held []*drapb.Claim
	// client creates the claims, without the harness client's rate limit.
	client kubernetes.Interface
}

var (
	env     *benchEnv
	envErr  error
	envOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		env.c.Stop()
	}
	os.Exit(code)
}

func setup(b *testing.B) *benchEnv {
	envOnce.Do(func() {
		ctx := context.Background()
		c, err := cluster.Start(ctx, cluster.Options{StopOnSignal: true})
		if err != nil {
			envErr = err
			return
		}
		env = &benchEnv{c: c, node: "bench-node"}
		n, err := c.AddNode(ctx, cluster.NodeOptions{Name: env.node})
		if err != nil {
			envErr = err
			return
		}
		args := []string{"-v=0"}
		if os.Getenv(envProfileDir) != "" {
			args = append(args, "--profiling")
		}
		// BENCH_PLUGIN_ARGS compares settings, e.g. "--device-metadata=false".
		args = append(args, strings.Fields(os.Getenv("BENCH_PLUGIN_ARGS"))...)
		env.plugin, err = framework.StartPlugin(ctx, c, n, framework.PluginOptions{Backend: "mock", Profile: fmt.Sprintf("bench-%d", devices), ExtraArgs: args})
		if err != nil {
			envErr = err
			return
		}
		if _, err := framework.WaitForSlices(ctx, c.Client(), framework.GPUDriver, env.node, devices); err != nil {
			envErr = err
			return
		}
		conn, err := grpc.NewClient("unix://"+filepath.Join(n.PluginDataDir(framework.GPUDriver), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			envErr = err
			return
		}
		env.dra = drapb.NewDRAPluginClient(conn)
		cfg := c.RESTConfig()
		cfg.QPS = -1
		if env.client, envErr = kubernetes.NewForConfig(cfg); envErr != nil {
			return
		}
		env.held = make([]*drapb.Claim, heldClaims)
		for i := range env.held {
			if env.held[i], envErr = env.createClaim(ctx, fmt.Sprintf("held-%d", i), 24+i); envErr != nil {
				return
			}
		}
	})
	if envErr != nil {
		b.Fatal(envErr)
	}
	return env
}

// envProfileDir names a directory for CPU profiles of the plugin process and of the
// kube-apiserver, one pair per measured loop (BENCH_PROFILE_DIR in hack/bench.sh); unset, the
// plugin runs without --profiling, as the chart runs it.
const envProfileDir = "BENCH_PROFILE_DIR"

// profile starts CPU profiles of the plugin and the kube-apiserver, if asked to; the returned
// function waits for them and writes <dir>/<name>-plugin.pprof and <dir>/<name>-apiserver.pprof
// (with a number appended for the second and later runs of one name). pprof's endpoint
// profiles for a fixed time (10 s), and a profile cut short is lost, so the wait may outlast
// the loop; an idle process adds no samples meanwhile.
func (e *benchEnv) profile(b *testing.B, name string) func() {
	dir := os.Getenv(envProfileDir)
	if dir == "" {
		return func() {}
	}
	base := strings.NewReplacer("/", "-", "=", "").Replace(name)
	name = base
	for i := 2; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, name+"-plugin.pprof")); err != nil {
			break
		}
		name = base + "." + strconv.Itoa(i)
	}
	var wg sync.WaitGroup
	write := func(file string, data []byte, err error) {
		defer wg.Done()
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, file), data, 0o644)
		}
		if err != nil {
			b.Error(err)
		}
	}
	wg.Add(2)
	go func() {
		resp, err := http.Get("http://" + e.plugin.HTTPAddr + "/debug/pprof/profile?seconds=10")
		if err != nil {
			write("", nil, err)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(resp.Body)
		write(name+"-plugin.pprof", data, err)
	}()
	go func() {
		data, err := e.c.Client().CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").Timeout(time.Minute).DoRaw(context.Background())
		write(name+"-apiserver.pprof", data, err)
	}()
	return wg.Wait
}

// claim creates (or reuses) an allocated claim for the given devices in the apiserver.
func (e *benchEnv) claim(b *testing.B, name string, devs ...int) *drapb.Claim {
	c, err := e.createClaim(context.Background(), name, devs...)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func (e *benchEnv) createClaim(ctx context.Context, name string, devs ...int) (*drapb.Claim, error) {
	client := e.client.ResourceV1().ResourceClaims("default")
	if got, err := client.Get(ctx, name, metav1.GetOptions{}); err == nil {
		return &drapb.Claim{Namespace: "default", Name: name, Uid: string(got.UID)}, nil
	}
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: framework.GPUDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(len(devs))},
		}}}},
	}
	c, err := client.Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devs {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: framework.GPUDriver, Pool: e.node, Device: "gpu-" + strconv.Itoa(d),
		})
	}
	if _, err := client.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	return &drapb.Claim{Namespace: "default", Name: name, Uid: string(c.UID)}, nil
}

func (e *benchEnv) prepare(b *testing.B, c *drapb.Claim) time.Duration {
	start := time.Now()
	resp, err := e.dra.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{c}})
	d := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if r := resp.Claims[c.Uid]; r == nil || r.Error != "" {
		b.Fatalf("prepare %s: %+v", c.Name, r)
	}
	return d
}

func (e *benchEnv) unprepare(b *testing.B, c *drapb.Claim) time.Duration {
	start := time.Now()
	resp, err := e.dra.NodeUnprepareResources(context.Background(), &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{c}})
	d := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if r := resp.Claims[c.Uid]; r == nil || r.Error != "" {
		b.Fatalf("unprepare %s: %+v", c.Name, r)
	}
	return d
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func report(b *testing.B, prefix string, ds []time.Duration) {
	b.ReportMetric(ms(percentile(ds, 0.5)), prefix+"-p50-ms")
	b.ReportMetric(ms(percentile(ds, 0.99)), prefix+"-p99-ms")
}

// sequential prepares and unprepares claim c b.N times, one call at a time, and reports the
// latencies the kubelet sees and where they go (breakdown).
func (e *benchEnv) sequential(b *testing.B, name string, c *drapb.Claim) {
	var prep, unprep []time.Duration
	before := e.snapshot(b)
	stop := e.profile(b, name)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		prep = append(prep, e.prepare(b, c))
		unprep = append(unprep, e.unprepare(b, c))
	}
	b.StopTimer()
	after := e.snapshot(b)
	stop()
	report(b, "prepare", prep)
	report(b, "unprepare", unprep)
	b.ReportMetric(ms(mean(prep)), "prepare-mean-ms")
	e.breakdown(b, c, before, after, b.N)
}

// snapshot is what the breakdown of a measured loop is computed from: the plugin's counters
// and the CPU time of every process of the harness.
type snapshot struct {
	metrics map[string]float64
	cpu     map[string]float64 // seconds, by process
}

// pluginMetrics are the plugin's counters the breakdown uses, by the name it reports them
// under. A plugin that does not export one (an older build) reports nothing for it.
var pluginMetrics = map[string][]string{
	// The plugin's own share of a prepare: the driver's work, without the helper's claim GET
	// and gRPC.
	"prepare":   {"accel_dra_prepare_duration_seconds"},
	"unprepare": {"accel_dra_unprepare_duration_seconds"},
	// The whole NodePrepareResources call as the plugin's gRPC server sees it: the helper's
	// claim GET, decoding it, and the driver's share.
	"grpc-prepare": {"accel_dra_grpc_request_duration_seconds", `method="NodePrepareResources"`},
	// The helper's claim GET as the plugin's HTTP client sees it: request sent to response
	// headers, without decoding.
	"claim-get": {"accel_dra_api_request_duration_seconds", `verb="GET"`, `resource="resourceclaims"`},
	"gc":        {"go_gc_duration_seconds"},
}

func (e *benchEnv) snapshot(b *testing.B) snapshot {
	s := snapshot{metrics: map[string]float64{}, cpu: cpuSeconds(e.c)}
	for name, m := range pluginMetrics {
		// A histogram or summary without a sample yet has no series: zero.
		sum, err := e.plugin.Metric(m[0]+"_sum", m[1:]...)
		if err != nil {
			continue
		}
		count, err := e.plugin.Metric(m[0]+"_count", m[1:]...)
		if err != nil {
			continue
		}
		s.metrics[name+"-sum"], s.metrics[name+"-count"] = sum, count
	}
	return s
}

// breakdown reports, for a loop of n prepare+unprepare pairs of claim c that ran between
// before and after:
//   - plugin-<part>-mean-ms: the mean of each part of a prepare the plugin measures (its own
//     share, the whole gRPC call as its server sees it, the claim GET's HTTP round trip);
//   - plugin-gc/op: garbage collections of the plugin per pair;
//   - cpu-<process>-ms/op: CPU time of each process per pair, user and system (the machine's
//     cores are shared by all of them);
//   - ref-get-p50-ms and ref-grpc-empty-p50-ms: right after the loop, n GETs of the claim the
//     way the helper does them (quorum read, protobuf), and n NodePrepareResources calls with
//     no claims (the gRPC round trip through the helper, with no GET and no driver work).
func (e *benchEnv) breakdown(b *testing.B, c *drapb.Claim, before, after snapshot, n int) {
	for _, part := range []string{"prepare", "unprepare", "grpc-prepare", "claim-get"} {
		count := after.metrics[part+"-count"] - before.metrics[part+"-count"]
		if count > 0 {
			b.ReportMetric((after.metrics[part+"-sum"]-before.metrics[part+"-sum"])/count*1000, "plugin-"+part+"-mean-ms")
		}
	}
	if _, ok := after.metrics["gc-count"]; ok {
		b.ReportMetric((after.metrics["gc-count"]-before.metrics["gc-count"])/float64(n), "plugin-gc/op")
	}
	total := 0.0
	for proc, s := range after.cpu {
		d := (s - before.cpu[proc]) / float64(n) * 1000
		total += d
		if d > 0 {
			b.ReportMetric(d, "cpu-"+proc+"-ms/op")
		}
	}
	b.ReportMetric(total, "cpu-all-ms/op")

	cfg := e.c.RESTConfig()
	cfg.QPS = -1
	kubeclient.UseProtobuf(cfg)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	claims := cs.ResourceV1().ResourceClaims(c.Namespace)
	var gets, empty []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := claims.Get(context.Background(), c.Name, metav1.GetOptions{}); err != nil {
			b.Fatal(err)
		}
		gets = append(gets, time.Since(start))
		start = time.Now()
		if _, err := e.dra.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{}); err != nil {
			b.Fatal(err)
		}
		empty = append(empty, time.Since(start))
	}
	b.ReportMetric(ms(percentile(gets, 0.5)), "ref-get-p50-ms")
	b.ReportMetric(ms(percentile(empty, 0.5)), "ref-grpc-empty-p50-ms")
}

// cpuSeconds returns the CPU time (user and system) used so far by each process the harness
// started, its descendants included, and by this test binary ("bench", which also runs the
// fake container runtime), by name: etcd, kube-apiserver, the plugin as "plugin", ...
func cpuSeconds(c *cluster.Cluster) map[string]float64 {
	type proc struct {
		ppid  int
		ticks float64
	}
	procs := map[int]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces; the fields after it do not.
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		procs[pid] = proc{ppid: ppid, ticks: utime + stime}
	}
	roots := map[int]string{os.Getpid(): "bench"}
	for _, p := range c.Processes() {
		if p.Exited() {
			continue
		}
		name := p.Name
		if strings.HasPrefix(name, "plugin-") {
			name = "plugin"
		} else if strings.HasPrefix(name, "kubelet") {
			name = "kubelet"
		}
		roots[p.Pid()] = name
	}
	out := map[string]float64{}
	for pid, p := range procs {
		// Ticks of USER_HZ, 100 per second on Linux.
		for q := pid; q > 1; q = procs[q].ppid {
			if name, ok := roots[q]; ok {
				out[name] += p.ticks / 100
				break
			}
			if _, ok := procs[q]; !ok {
				break
			}
		}
	}
	return out
}

// BenchmarkPrepareUnprepare is one claim at a time: NodePrepareResources then
// NodeUnprepareResources, for a 1-device and an 8-device claim.
func BenchmarkPrepareUnprepare(b *testing.B) {
	e := setup(b)
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			devs := make([]int, n)
			for i := range devs {
				devs[i] = i
			}
			e.sequential(b, b.Name(), e.claim(b, fmt.Sprintf("seq-%d", n), devs...))
		})
	}
}

// BenchmarkConcurrentPrepare runs 8 workers, each preparing and unpreparing its own claim on
// its own device, and reports prepared claims per second.
func BenchmarkConcurrentPrepare(b *testing.B) {
	e := setup(b)
	const workers = 8
	claims := make([]*drapb.Claim, workers)
	for w := range claims {
		claims[w] = e.claim(b, fmt.Sprintf("conc-%d", w), 16+w)
	}
	var mu sync.Mutex
	var prep []time.Duration
	before := e.snapshot(b)
	b.ResetTimer()
	start := time.Now()
	stop := e.profile(b, "concurrent")
	var wg sync.WaitGroup
	per := (b.N + workers - 1) / workers
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(c *drapb.Claim) {
			defer wg.Done()
			var local []time.Duration
			for i := 0; i < per; i++ {
				local = append(local, e.prepare(b, c))
				e.unprepare(b, c)
			}
			mu.Lock()
			prep = append(prep, local...)
			mu.Unlock()
		}(claims[w])
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	after := e.snapshot(b)
	stop()
	b.ReportMetric(float64(per*workers)/elapsed.Seconds(), "claims/s")
	report(b, "prepare", prep)
	total := 0.0
	for proc, s := range after.cpu {
		total += s - before.cpu[proc]
	}
	// Against 2 cores: how close the harness is to being CPU-bound.
	b.ReportMetric(total/elapsed.Seconds(), "cpu-busy-cores")
}

// heldClaims is how many claims BenchmarkPrepareWithPrepared keeps prepared at most.
const heldClaims = 1000

// BenchmarkPrepareWithPrepared measures one claim's prepare+unprepare while 10 or 1,000 other
// claims stay prepared: the cost must not grow with them. All 1,000 claims exist in the
// apiserver from the start (setup), so that the two runs differ only in how many the plugin
// holds prepared, not in what the apiserver and etcd store. With 1,000 it also reports the plugin's
// resident memory. The held claims are unprepared at the end, so that every -count run starts
// from none.
func BenchmarkPrepareWithPrepared(b *testing.B) {
	e := setup(b)
	held := e.held
	c := e.claim(b, "probe", 0)
	defer func() {
		for _, h := range held {
			e.unprepare(b, h)
		}
	}()
	prepared := 0
	for _, n := range []int{10, heldClaims} {
		b.Run(fmt.Sprintf("prepared=%d", n), func(b *testing.B) {
			for ; prepared < n; prepared++ {
				e.prepare(b, held[prepared])
			}
			e.sequential(b, b.Name(), c)
			// VmRSS counts the binary's mapped text, which depends on the page cache; RssAnon is
			// what the plugin itself holds.
			for field, unit := range map[string]string{"VmRSS": "plugin-rss-MiB", "RssAnon": "plugin-rss-anon-MiB", "RssFile": "plugin-rss-file-MiB"} {
				if v, err := statusMiB(e.plugin.Process().Pid(), field); err == nil {
					b.ReportMetric(v, unit)
				}
			}
			if got, err := e.plugin.Metric("accel_dra_prepared_claims"); err != nil || int(got) != n {
				b.Fatalf("plugin reports %v prepared claims (%v), want %d", got, err, n)
			}
		})
	}
}

func statusMiB(pid int, field string) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

// BenchmarkClaimGet is the part of a prepare that is not the plugin's: the kubelet plugin helper
// GETs each claim from the apiserver (a quorum read, resourceVersion ""), with the plugin's
// client in protobuf. JSON, client-go's default, and the watch-cache read (resourceVersion
// "0"), which the plugin must not use, are shown for comparison.
func BenchmarkClaimGet(b *testing.B) {
	e := setup(b)
	c := e.claim(b, "get-probe", 0)
	for _, enc := range []string{"protobuf", "json"} {
		cfg := e.c.RESTConfig()
		cfg.QPS = -1 // no client-side limit, as the plugin's defaults allow far more than this loop
		if enc == "protobuf" {
			kubeclient.UseProtobuf(cfg)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		client := cs.ResourceV1().ResourceClaims("default")
		for _, rv := range []string{"", "0"} {
			b.Run("encoding="+enc+"/resourceVersion="+rv, func(b *testing.B) {
				var ds []time.Duration
				for i := 0; i < b.N; i++ {
					start := time.Now()
					if _, err := client.Get(context.Background(), c.Name, metav1.GetOptions{ResourceVersion: rv}); err != nil {
						b.Fatal(err)
					}
					ds = append(ds, time.Since(start))
				}
				report(b, "get", ds)
			})
		}
	}
}
