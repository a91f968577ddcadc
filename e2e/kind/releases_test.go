//go:build e2e

package kind

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
)

// previousRelease is the release before this one: the commit users run today, whose plugin
// pods a rolling update of this one runs beside (and a rollback goes back to).
const previousRelease = "83431c1"

// release is a chart and the plugin image it installs.
type chartRelease struct {
	name, chart, repo, tag string
}

// buildPreviousRelease builds the previous release's plugin from the repository's history,
// into an image of the Dockerfile's prebuilt stage, and returns it with its chart.
func (e *env) buildPreviousRelease(ctx context.Context, t *testing.T) chartRelease {
	t.Helper()
	if out, err := e.cmd(ctx, nil, "git", "cat-file", "-e", previousRelease+"^{commit}"); err != nil {
		msg := fmt.Sprintf("the previous release %s is not in this clone's history (%v: %s)", previousRelease, err, out)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s; CI must test two releases side by side: clone with history", msg)
		}
		t.Skipf("SKIP two releases: %s", msg)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.CommandContext(ctx, "sh", "-c", "git archive "+previousRelease+" | tar -x -C "+src)
	archive.Dir = e.root
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", previousRelease, err, out)
	}
	build := exec.CommandContext(ctx, "hack/build.sh")
	build.Dir = src
	build.Env = append(os.Environ(), "PLATFORMS=linux/amd64", "BIN="+filepath.Join(dir, "bin"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release: %v\n%s", err, out)
	}
	// The image needs every binary of the prebuilt stage; the previous plugin uses none of
	// the two it did not ship (it runs the node's own hook and its mock's scripts).
	arch := filepath.Join(dir, "bin", "linux_amd64")
	for _, b := range []string{"nvidia-cdi-hook", "accel-dra-mock-nvidia"} {
		if out, err := e.cmd(ctx, nil, "cp", filepath.Join(e.root, "bin", "linux_amd64", b), arch); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	const tag = "e2e-previous"
	image := strings.TrimSpace(e.runEnv(ctx, []string{"BIN=" + filepath.Join(dir, "bin")}, "hack/kind/plugin-image.sh", tag))
	e.load(ctx, t, image)
	return chartRelease{name: previousRelease, chart: filepath.Join(src, "deployments/helm/accel-dra"), repo: "accel-dra-kubelet-plugin", tag: tag}
}

func (e *env) load(ctx context.Context, t *testing.T, image string) {
	t.Helper()
	if out, err := e.cmd(ctx, nil, filepath.Join(e.tools, "kind"), "load", "docker-image", "--name", e.name, image); err != nil {
		t.Fatalf("kind load %s: %v\n%s", image, err, out)
	}
}

// helmTo installs or upgrades the release to r, with the mock values of r's chart and the
// mig-mixed profile (whole GPUs and static MIG devices), GPUs only.
func (e *env) helmTo(ctx context.Context, t *testing.T, r chartRelease) {
	t.Helper()
	out, err := e.cmd(ctx, []string{"KUBECONFIG=" + e.kubeconfig}, filepath.Join(e.tools, "helm"), "upgrade", "--install", release, r.chart,
		"-n", releaseNS, "-f", filepath.Join(r.chart, "values-mock.yaml"),
		"--set", "mock.gpuProfile=mig-mixed", "--set", "drivers.npu.enabled=false",
		"--set", "plugin.image.repository="+r.repo, "--set", "plugin.image.tag="+r.tag, "--set", "plugin.image.pullPolicy=Never",
		"--wait", "--timeout", "5m")
	if err != nil {
		t.Fatalf("helm upgrade --install to %s: %v\n%s", r.name, err, out)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := e.pluginPods(ctx)
		return len(pods) == 1 && strings.HasSuffix(pods[0].Spec.Containers[0].Image, ":"+r.tag) && e.pluginPodOrNil(ctx) != nil, nil
	}); err != nil {
		t.Fatalf("the GPU plugin did not roll to %s: %v", r.name, err)
	}
}

// testTwoReleases: the previous release and this one side by side, as a rolling update with
// surge runs them on every node, in both directions (upgrade, then rollback), while pods on
// whole GPUs and static MIG devices run and short pods are prepared and unprepared through
// both plugin pods. Neither release may move the other's records aside or lose them: every
// pod keeps running, no device is held twice, and nothing is left once the pods are gone.
func (e *env) testTwoReleases(ctx context.Context, t *testing.T) {
	prev := e.buildPreviousRelease(ctx, t)
	this := chartRelease{name: "this release", chart: filepath.Join(e.root, "deployments/helm/accel-dra"), repo: strings.Split(e.plugin, ":")[0], tag: strings.Split(e.plugin, ":")[1]}
	// The previous release ran the node's own nvidia-cdi-hook, from the NVIDIA container
	// toolkit, which kind nodes do not have: this node gets one, as the toolkit installs it.
	e.exec(ctx, "mkdir", "-p", "/usr/bin")
	if out, err := e.cmd(ctx, nil, "docker", "cp", filepath.Join(e.root, "bin", "linux_amd64", "nvidia-cdi-hook"), e.node+":/usr/bin/nvidia-cdi-hook"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = e.cmd(context.Background(), nil, "docker", "exec", e.node, "rm", "-f", "/usr/bin/nvidia-cdi-hook")
	})

	// Another machine: the mock keeps its GPUs' state (MIG instances, compute modes) in its
	// directory, as GPUs keep theirs across plugin installs, and the earlier tests' machine was
	// h100-8x-2numa.
	e.exec(ctx, "rm", "-f", gpuData+"/mock/"+nvmlmock.StateFileName)
	e.helmTo(ctx, t, prev)
	long := []workload{{name: "rel-whole"}, {name: "rel-mig", class: "mig.gpu.accel-dra.io"}}
	uids := e.startRunning(ctx, t, long)
	for _, step := range []chartRelease{this, prev} {
		n := e.whileChurning(ctx, t, "rel-churn-"+strings.ReplaceAll(step.tag, ".", "-"), func() { e.helmTo(ctx, t, step) })
		t.Logf("rolled to %s; %d short pods came and went meanwhile", step.name, n)
		for _, w := range long {
			p, err := e.client.CoreV1().Pods(ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil || string(p.UID) != uids[w.name] || p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
				t.Errorf("after rolling to %s, pod %s is not the same pod running: %v %+v", step.name, w.name, err, p)
			}
		}
		recs := e.records(ctx, t)
		heldOnce(t, recs)
		if len(recs) != len(long) {
			t.Errorf("after rolling to %s: %d checkpoint records with %d pods running: %+v", step.name, len(recs), len(long), recs)
		}
		if out := strings.TrimSpace(e.exec(ctx, "sh", "-c", "ls "+gpuData+"/checkpoint/corrupt/ 2>/dev/null; true")); out != "" {
			t.Errorf("after rolling to %s, records were moved aside as unreadable: %s", step.name, out)
		}
	}
	for _, w := range long {
		if err := e.stopWorkload(ctx, w.name); err != nil {
			t.Error(err)
		}
	}
	e.expectNoLeftovers(ctx, t)
	if out, err := e.cmd(ctx, []string{"KUBECONFIG=" + e.kubeconfig}, filepath.Join(e.tools, "helm"), "uninstall", release, "-n", releaseNS, "--wait"); err != nil {
		t.Errorf("helm uninstall: %v\n%s", err, out)
	}
}

// whileChurning runs step while short one-GPU pods are created and deleted one after another,
// and returns how many came and went; a short pod that fails fails the test.
func (e *env) whileChurning(ctx context.Context, t *testing.T, prefix string, step func()) int {
	t.Helper()
	churnCtx, stop := context.WithCancel(ctx)
	var n int
	var churnErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; churnCtx.Err() == nil; i++ {
			name := fmt.Sprintf("%s-%d", prefix, i)
			if err := e.startWorkload(ctx, workload{name: name}); err != nil {
				churnErr = err
				return
			}
			if _, err := framework.WaitForPodRunning(ctx, e.client, ns, name, 3*time.Minute); err != nil {
				churnErr = err
				return
			}
			if err := e.stopWorkload(ctx, name); err != nil {
				churnErr = err
				return
			}
			n++
		}
	}()
	step()
	// A few more through the plugin pod the step left.
	time.Sleep(5 * time.Second)
	stop()
	wg.Wait()
	if churnErr != nil {
		t.Errorf("a short pod while rolling: %v", churnErr)
	}
	return n
}
