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
)

// devices is the synthetic node's GPU count: enough for 1,000 prepared claims plus the ones
// being measured.
const devices = 1024

type benchEnv struct {
	c      *cluster.Cluster
	plugin *framework.Plugin
	dra    drapb.DRAPluginClient
	node   string
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
	})
	if envErr != nil {
		b.Fatal(envErr)
	}
	return env
}

// envProfileDir names a directory for CPU profiles of the plugin process, one per benchmark
// that takes one (BENCH_PROFILE_DIR in hack/bench.sh); unset, the plugin runs without
// --profiling, as the chart runs it.
const envProfileDir = "BENCH_PROFILE_DIR"

// profile starts a CPU profile of the plugin, if asked to; the returned function waits for it
// and writes <dir>/<name>.pprof. pprof's endpoint profiles for a fixed time (10 s), and a
// profile cut short is lost, so the wait may outlast the benchmark; an idle process adds no
// samples meanwhile.
func (e *benchEnv) profile(b *testing.B, name string) func() {
	dir := os.Getenv(envProfileDir)
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get("http://" + e.plugin.HTTPAddr + "/debug/pprof/profile?seconds=10")
		if err != nil {
			b.Error(err)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			b.Error(err)
			return
		}
		if err := os.WriteFile(filepath.Join(dir, name+".pprof"), data, 0o644); err != nil {
			b.Error(err)
		}
	}()
	return func() { <-done }
}

// claim creates (or reuses) an allocated claim for the given devices in the apiserver.
func (e *benchEnv) claim(b *testing.B, name string, devs ...int) *drapb.Claim {
	ctx := context.Background()
	client := e.c.Client().ResourceV1().ResourceClaims("default")
	if got, err := client.Get(ctx, name, metav1.GetOptions{}); err == nil {
		return &drapb.Claim{Namespace: "default", Name: name, Uid: string(got.UID)}
	}
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: framework.GPUDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(len(devs))},
		}}}},
	}
	c, err := client.Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devs {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: framework.GPUDriver, Pool: e.node, Device: "gpu-" + strconv.Itoa(d),
		})
	}
	if _, err := client.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	return &drapb.Claim{Namespace: "default", Name: name, Uid: string(c.UID)}
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

func report(b *testing.B, prefix string, ds []time.Duration) {
	b.ReportMetric(float64(percentile(ds, 0.5).Microseconds())/1000, prefix+"-p50-ms")
	b.ReportMetric(float64(percentile(ds, 0.99).Microseconds())/1000, prefix+"-p99-ms")
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
			c := e.claim(b, fmt.Sprintf("seq-%d", n), devs...)
			var prep, unprep []time.Duration
			sum0, count0 := e.pluginPrepareTotals(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				prep = append(prep, e.prepare(b, c))
				unprep = append(unprep, e.unprepare(b, c))
			}
			b.StopTimer()
			report(b, "prepare", prep)
			report(b, "unprepare", unprep)
			// The plugin's own share of a prepare (its histogram), without the helper's claim
			// GET from the apiserver and the gRPC round trip.
			sum1, count1 := e.pluginPrepareTotals(b)
			if count1 > count0 {
				b.ReportMetric((sum1-sum0)/(count1-count0)*1000, "plugin-prepare-mean-ms")
			}
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
	stop()
	b.ReportMetric(float64(per*workers)/elapsed.Seconds(), "claims/s")
	report(b, "prepare", prep)
}

// BenchmarkPrepareWithPrepared measures one claim's prepare+unprepare while 10 or 1,000 other
// claims stay prepared: the cost must not grow with them. With 1,000 it also reports the
// plugin's resident memory.
func BenchmarkPrepareWithPrepared(b *testing.B) {
	e := setup(b)
	held := 0
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("prepared=%d", n), func(b *testing.B) {
			for ; held < n; held++ {
				e.prepare(b, e.claim(b, fmt.Sprintf("held-%d", held), 24+held))
			}
			c := e.claim(b, "probe", 0)
			var prep []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				prep = append(prep, e.prepare(b, c))
				e.unprepare(b, c)
			}
			b.StopTimer()
			report(b, "prepare", prep)
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

func (e *benchEnv) pluginPrepareTotals(b *testing.B) (sum, count float64) {
	// Before the first prepare the histogram has no series yet: zero.
	sum, _ = e.plugin.Metric("accel_dra_prepare_duration_seconds_sum")
	count, _ = e.plugin.Metric("accel_dra_prepare_duration_seconds_count")
	return sum, count
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
// GETs each claim from the apiserver (a quorum read, resourceVersion ""). The watch-cache read
// (resourceVersion "0") is shown for comparison.
func BenchmarkClaimGet(b *testing.B) {
	e := setup(b)
	c := e.claim(b, "get-probe", 0)
	cfg := e.c.RESTConfig()
	cfg.QPS = -1 // no client-side limit, as the plugin's defaults allow far more than this loop
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	client := cs.ResourceV1().ResourceClaims("default")
	for _, rv := range []string{"", "0"} {
		b.Run("resourceVersion="+rv, func(b *testing.B) {
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
