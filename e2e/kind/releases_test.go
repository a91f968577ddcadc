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
	// gpuProfile is the GPU mock's profile (default mig-mixed).
	gpuProfile string
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

// helmTo installs or upgrades the release to r, with the mock values of r's chart and r's
// profile (default mig-mixed: whole GPUs and static MIG devices), GPUs only.
func (e *env) helmTo(ctx context.Context, t *testing.T, r chartRelease) {
	t.Helper()
	profile := r.gpuProfile
	if profile == "" {
		profile = "mig-mixed"
	}
	out, err := e.cmd(ctx, []string{"KUBECONFIG=" + e.kubeconfig}, filepath.Join(e.tools, "helm"), "upgrade", "--install", release, r.chart,
		"-n", releaseNS, "-f", filepath.Join(r.chart, "values-mock.yaml"),
		"--set", "mock.gpuProfile="+profile, "--set", "drivers.npu.enabled=false",
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
	t.Run("DRMLoaded", func(t *testing.T) { e.testUpgradeDRMLoaded(ctx, t, prev, this) })
}

// testUpgradeDRMLoaded: pods prepared by the previous release on a machine without nvidia-drm
// (its mock has no DRM nodes), then this release on the same machine with nvidia-drm loaded
// (mig-mixed-drm: the same GPUs, with a /dev/dri card and render node each). The claims are the
// same GPUs and must stay prepared: after the upgrade, a restart of each pod's container (which
// the runtime starts from the claim's CDI spec, with the CDI IDs the kubelet got from the
// previous release) must succeed, the whole GPU's container with its DRM nodes and the MIG
// device's without, and nothing may be left once the pods are gone.
func (e *env) testUpgradeDRMLoaded(ctx context.Context, t *testing.T, prev, this chartRelease) {
	this.gpuProfile = "mig-mixed-drm"
	e.exec(ctx, "rm", "-f", gpuData+"/mock/"+nvmlmock.StateFileName)
	e.helmTo(ctx, t, prev)
	long := []workload{{name: "drm-whole", restart: true}, {name: "drm-mig", class: "mig.gpu.accel-dra.io", restart: true}}
	uids := e.startRunning(ctx, t, long)
	defer func() {
		for _, w := range long {
			if err := e.stopWorkload(ctx, w.name); err != nil {
				t.Error(err)
			}
		}
		e.expectNoLeftovers(ctx, t)
		if out, err := e.cmd(ctx, []string{"KUBECONFIG=" + e.kubeconfig}, filepath.Join(e.tools, "helm"), "uninstall", release, "-n", releaseNS, "--wait"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	}()
	e.helmTo(ctx, t, this)
	for _, w := range long {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil || string(p.UID) != uids[w.name] || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
			t.Fatalf("after the upgrade, pod %s is not the same pod running: %v %+v", w.name, err, p)
		}
		// Stop the container as a crash would: the kubelet starts it again, and the runtime
		// resolves the claim's CDI devices anew.
		id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
		e.exec(ctx, "crictl", "--runtime-endpoint", "unix:///run/containerd/containerd.sock", "stop", "--timeout", "0", id)
	}
	for _, w := range long {
		var last *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := e.client.CoreV1().Pods(ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = p
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].RestartCount >= 1 && cs[0].State.Running != nil, nil
		})
		if err != nil {
			var state any
			if last != nil && len(last.Status.ContainerStatuses) == 1 {
				state = last.Status.ContainerStatuses[0].State
			}
			t.Errorf("pod %s: its container did not run again after a restart following the upgrade: %v; state %+v\n%s", w.name, err, state, e.describe(ctx, ns, w.name))
			continue
		}
		var logs []byte
		err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			logs, err = e.client.CoreV1().Pods(ns).GetLogs(w.name, &corev1.PodLogOptions{}).DoRaw(ctx)
			return err == nil && strings.Contains(string(logs), "== end\n"), nil
		})
		if err != nil {
			t.Errorf("pod %s: logs of the restarted container: %v: %s", w.name, err, logs)
			continue
		}
		out := sections(string(logs))
		t.Logf("pod %s restarted: %s", w.name, strings.Join(strings.Fields(string(logs)), " "))
		// Its GPU: /dev/nvidiaN of the claim's device (of a MIG device's GPU), and for a MIG
		// device its two nvidia-caps nodes.
		devs := e.allocated(ctx, t, w.name)
		if len(devs) != 1 {
			t.Fatalf("pod %s: allocated %+v", w.name, devs)
		}
		gpu := "nvidia" + strings.SplitN(strings.TrimPrefix(devs[0].name, "gpu-"), "-", 2)[0]
		if strings.Join(out["dev"], " ") != gpu {
			t.Errorf("pod %s (%s): the restarted container has GPU nodes %q, want %s", w.name, devs[0].name, out["dev"], gpu)
		}
		if wantCaps := map[bool]int{true: 0, false: 2}[w.class == ""]; len(out["caps"]) != wantCaps {
			t.Errorf("pod %s (%s): the restarted container has nvidia-caps nodes %q, want %d", w.name, devs[0].name, out["caps"], wantCaps)
		}
		want := []string(nil)
		if w.class == "" {
			want = []string{"card", "renderD"}
		}
		var got []string
		for _, n := range out["dri"] {
			got = append(got, strings.TrimRight(n, "0123456789"))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("pod %s: the restarted container's /dev/dri has %q, want one each of %q", w.name, out["dri"], want)
		}
	}
	recs := e.records(ctx, t)
	heldOnce(t, recs)
	if len(recs) != len(long) {
		t.Errorf("after the upgrade: %d checkpoint records with %d pods running: %+v", len(recs), len(long), recs)
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
