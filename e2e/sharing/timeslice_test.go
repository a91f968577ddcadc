//go:build e2e

package sharing

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock"
	"github.com/accel-dra/accel-dra/pkg/sharing/standin"
)

// TestTimeSlicing: one claim with sharing strategy TimeSlicing, used by two pods: both run on
// its GPU, the plugin sets the interval with nvidia-smi (the GPU mock's stand-in, which
// records what it was asked) once, after putting the GPU in the DEFAULT compute mode, and puts
// the default interval back once both pods and the claim are gone, also when the plugin was
// killed (kill -9) in between.
func TestTimeSlicing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	smi := standin.Build(t, standin.MockTools, "nvidia-smi")
	e, _ := startEnv(ctx, t, "--nvidia-smi-path="+smi)

	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sliced"}, Spec: resourceapi.ResourceClaimSpec{
		Devices: framework.DeviceClaim("gpu", framework.GPUDriver, 1, nil, ""),
	}}
	claim.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
		Driver:     framework.GPUDriver,
		Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"accel-dra.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`)},
	}}}}
	if _, err := e.client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"ts-a", "ts-b"} {
		e.createPod(t, p, "sliced")
	}
	var uuid, dev string
	for _, p := range []string{"ts-a", "ts-b"} {
		if _, err := framework.WaitForPodRunning(ctx, e.client, ns, p, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.client.ResourceV1().ResourceClaims(ns).Get(ctx, "sliced", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dev = got.Status.Allocation.Devices.Results[0].Device
	slices, err := framework.WaitForSlices(ctx, e.client, framework.GPUDriver, nodeName, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name == dev {
				uuid = *d.Attributes["uuid"].StringValue
			}
		}
	}
	node := "/dev/nvidia" + strings.TrimPrefix(dev, "gpu-")
	for _, p := range []string{"ts-a", "ts-b"} {
		rec, err := e.node.CRI.WaitForContainer(ctx, ns, p, "ctr")
		if err != nil {
			t.Fatal(err)
		}
		if !hasDevice(rec, node) {
			t.Errorf("pod %s: no %s (the claim's %s) in %+v", p, node, dev, rec.Devices)
		}
	}
	if calls := readCalls(t, smi); calls != uuid+" 3\n" {
		t.Errorf("nvidia-smi was asked %q, want %q (Long, once, for the claim's GPU)", calls, uuid+" 3\n")
	}
	// The GPU was put in the DEFAULT compute mode (the mock records only modes that were set).
	modes, err := nvmlmock.ComputeModes(filepath.Join(e.node.PluginDataDir(framework.GPUDriver), "mock"))
	if err != nil || modes[uuid] != "DEFAULT" || len(modes) != 1 {
		t.Errorf("compute modes set: %v (%v), want DEFAULT on %s only", modes, err, uuid)
	}

	// A crash of the plugin while the claim is prepared: its record says what to put back
	// later, and the restarted plugin sets nothing again.
	e.plugin.Kill()
	if err := e.plugin.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"ts-a", "ts-b"} {
		e.deletePod(t, p)
	}
	if err := e.client.ResourceV1().ResourceClaims(ns).Delete(ctx, "sliced", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := uuid + " 3\n" + uuid + " 0\n"
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return readCalls(t, smi) == want, nil
	})
	if err != nil {
		t.Fatalf("after both pods and the claim went, nvidia-smi was asked %q, want %q", readCalls(t, smi), want)
	}
	if specs, err := e.plugin.CDISpecs(); err != nil || len(specs) != 0 {
		t.Errorf("CDI specs left: %v (%v)", specs, err)
	}
}

func readCalls(t *testing.T, smi string) string {
	t.Helper()
	b, err := os.ReadFile(smi + ".calls")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}
