//go:build e2e

package kind

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/accel-dra/accel-dra/e2e/framework"
)

// testNVIDIAQuickstart (issue #28, 5) runs, in the compatibility mode, the workloads of NVIDIA's
// DRA driver quickstart (NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart: gpu-test1, -test2,
// -test3), written here from their description, not copied: pods that run `nvidia-smi -L` with
// claims of class gpu.nvidia.com. NVIDIA's use `ubuntu` images; the offline kind cluster has
// its own Debian-based workload image in their place (nvidia-smi comes from the driver root
// through the claim's CDI spec, as on a real node).
//   - two pods, each with a GPU of one template: each sees one GPU, not the other's;
//   - one pod, two containers sharing one claim: both see the same one GPU;
//   - one ResourceClaim shared by two pods: both see the same one GPU.
func (e *env) testNVIDIAQuickstart(ctx context.Context, t *testing.T) {
	const smi = "nvidia-smi -L; echo '== end'; exec sleep 3600"
	pod := func(name, claimRef string, containers ...string) string {
		s := fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - name: gpu
    %s
  containers:`, name, claimRef)
		for _, c := range containers {
			s += fmt.Sprintf(`
  - name: %s
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", %q]
    resources:
      claims:
      - name: gpu`, c, e.workload, smi)
		}
		return s + "\n"
	}
	single := func(kind, name string) string {
		if kind == "ResourceClaimTemplate" {
			return fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: %s
  namespace: default
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
`, name)
		}
		return fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: %s
  namespace: default
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
`, name)
	}
	for _, tc := range []struct {
		name     string
		manifest string
		// pods and their containers; same: all of them see one and the same GPU, else each
		// pod its own.
		pods map[string][]string
		same bool
	}{
		{
			name:     "TwoPodsOneTemplate",
			manifest: single("ResourceClaimTemplate", "qs-single-gpu") + "---" + pod("qs-pod1", "resourceClaimTemplateName: qs-single-gpu", "ctr") + "---" + pod("qs-pod2", "resourceClaimTemplateName: qs-single-gpu", "ctr"),
			pods:     map[string][]string{"qs-pod1": {"ctr"}, "qs-pod2": {"ctr"}},
		},
		{
			name:     "TwoContainersOneClaim",
			manifest: single("ResourceClaimTemplate", "qs-shared-ctr") + "---" + pod("qs-pod3", "resourceClaimTemplateName: qs-shared-ctr", "ctr0", "ctr1"),
			pods:     map[string][]string{"qs-pod3": {"ctr0", "ctr1"}},
			same:     true,
		},
		{
			name:     "OneClaimTwoPods",
			manifest: single("ResourceClaim", "qs-shared") + "---" + pod("qs-pod4", "resourceClaimName: qs-shared", "ctr") + "---" + pod("qs-pod5", "resourceClaimName: qs-shared", "ctr"),
			pods:     map[string][]string{"qs-pod4": {"ctr"}, "qs-pod5": {"ctr"}},
			same:     true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apply(ctx, t, e, tc.manifest)
			t.Cleanup(func() {
				for p := range tc.pods {
					_ = framework.DeletePod(context.Background(), e.client, ns, p, 2*time.Minute)
				}
				for _, n := range []string{"qs-single-gpu", "qs-shared-ctr"} {
					_ = e.client.ResourceV1().ResourceClaimTemplates(ns).Delete(context.Background(), n, metav1.DeleteOptions{})
				}
				_ = e.client.ResourceV1().ResourceClaims(ns).Delete(context.Background(), "qs-shared", metav1.DeleteOptions{})
			})
			seen := map[string]string{} // pod/container: the GPU it lists
			for p, ctrs := range tc.pods {
				if _, err := framework.WaitForPodRunning(ctx, e.client, ns, p, 3*time.Minute); err != nil {
					t.Fatalf("pod %s: %v\n%s", p, err, e.describe(ctx, ns, p))
				}
				for _, c := range ctrs {
					gpus := e.listedGPUs(ctx, t, p, c)
					if len(gpus) != 1 {
						t.Fatalf("%s/%s: nvidia-smi -L lists %q, want one GPU", p, c, gpus)
					}
					seen[p+"/"+c] = gpus[0]
				}
			}
			var distinct []string
			for _, g := range seen {
				if !slices.Contains(distinct, g) {
					distinct = append(distinct, g)
				}
			}
			if want := map[bool]int{true: 1, false: len(seen)}[tc.same]; len(distinct) != want {
				t.Errorf("the containers list GPUs %v: want %d distinct", seen, want)
			}
		})
	}
}

var smiUUID = regexp.MustCompile(`\(UUID: (GPU-[0-9a-f-]+)\)`)

// listedGPUs are the UUIDs nvidia-smi -L printed in the container, once it printed "== end".
func (e *env) listedGPUs(ctx context.Context, t *testing.T, pod, container string) []string {
	t.Helper()
	var out string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		b, err := e.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if out = string(b); err == nil && regexp.MustCompile(`(?m)^== end$`).MatchString(out) {
			break
		}
	}
	var uuids []string
	for _, m := range smiUUID.FindAllStringSubmatch(out, -1) {
		uuids = append(uuids, m[1])
	}
	return uuids
}
