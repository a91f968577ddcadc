//go:build e2e

package compat

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
)

// TestOtherDriverSlices: accel-dra's GPU plugin under its own name never publishes a GPU whose
// UUID another DRA driver's ResourceSlices on the node name (docs/migrate-from-nvidia.md, "Two
// drivers, one GPU"): a slice of gpu.nvidia.com naming gpu-1, as NVIDIA's plugin publishes it,
// takes gpu-1 out of accel-dra's slices with a Node event saying what to do; a plugin that
// starts while it is there never publishes gpu-1 (every version of its slices is watched); once
// it goes, gpu-1 is published again.
func TestOtherDriverSlices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const own, node = framework.GPUDriver, "two-drivers"
	c := cluster.StartForTest(t, cluster.Options{})
	client := c.Client()
	n, err := c.AddNode(ctx, cluster.NodeOptions{Name: node})
	if err != nil {
		t.Fatal(err)
	}
	p, err := framework.StartPlugin(ctx, c, n, framework.PluginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all := publishedDevices(ctx, t, client, own, node, func(d map[string]string) bool { return len(d) > 1 })
	uuid := all["gpu-1"]
	if uuid == "" {
		t.Fatalf("no gpu-1 with a uuid among %v", all)
	}
	t.Logf("%s publishes %d devices; gpu-1 is %s", own, len(all), uuid)

	// NVIDIA's plugin publishing the same GPU on the node (its slice's shape: the uuid attribute
	// in its own domain).
	nv := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.nvidia.com"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpu.nvidia.com", NodeName: &n.Name, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": {StringValue: ptr("gpu")}, "uuid": {StringValue: &uuid},
			}}},
		},
	}
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, nv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	without := func(d map[string]string) bool { _, ok := d["gpu-1"]; return !ok && len(d) == len(all)-1 }
	publishedDevices(ctx, t, client, own, node, without)
	ev := nodeEvent(ctx, t, client, node, nodeplugin.ReasonDevicesServedByAnotherDriver)
	for _, want := range []string{"gpu-1 (" + uuid + ": gpu.nvidia.com)", "move the node over", "docs/migrate-from-nvidia.md"} {
		if !strings.Contains(ev, want) {
			t.Errorf("the Node event %q does not say %q", ev, want)
		}
	}

	// A plugin that starts beside NVIDIA's slice: its slices, deleted while it was down, come
	// back without gpu-1 in every version the API server stores.
	p.Kill()
	<-p.Process().Done()
	if err := client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=" + own}); err != nil {
		t.Fatal(err)
	}
	w, err := client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + own})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	publishedDevices(ctx, t, client, own, node, without)
	for drained := false; !drained; {
		select {
		case e := <-w.ResultChan():
			if s, ok := e.Object.(*resourceapi.ResourceSlice); ok && e.Type != watch.Deleted {
				for _, d := range s.Spec.Devices {
					if d.Name == "gpu-1" {
						t.Errorf("the restarted plugin published gpu-1 (slice %s, %s)", s.Name, e.Type)
					}
				}
			}
		case <-time.After(2 * time.Second): // every event of the publish has arrived by now
			drained = true
		}
	}

	// NVIDIA's plugin leaves: gpu-1 is back.
	if err := client.ResourceV1().ResourceSlices().Delete(ctx, nv.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := publishedDevices(ctx, t, client, own, node, func(d map[string]string) bool { return len(d) == len(all) }); got["gpu-1"] != uuid {
		t.Errorf("gpu-1 came back as %q, want %s", got["gpu-1"], uuid)
	}
	nodeEvent(ctx, t, client, node, nodeplugin.ReasonDevicesPublishedAgain)
}

// publishedDevices waits until the devices (name to uuid) driver publishes on node satisfy ok.
func publishedDevices(ctx context.Context, t *testing.T, client kubernetes.Interface, driver, node string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	var got map[string]string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + driver})
		if err != nil {
			return false, nil
		}
		got = map[string]string{}
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				got[d.Name] = ""
				if u := d.Attributes["uuid"].StringValue; u != nil {
					got[d.Name] = *u
				}
			}
		}
		return ok(got), nil
	}); err != nil {
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Fatalf("%s publishes %v on %s: %v", driver, names, node, err)
	}
	return got
}

// nodeEvent waits for an event about node with reason and returns its message.
func nodeEvent(ctx context.Context, t *testing.T, client kubernetes.Interface, node, reason string) string {
	t.Helper()
	var msg string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Reason == reason {
				msg = e.Note
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no event %s about node %s", reason, node)
	}
	return msg
}

func ptr[T any](v T) *T { return &v }
