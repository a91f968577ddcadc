//go:build e2e

package kind

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// openLoop opens every GPU node of the container twice a second and prints what open(2) says.
// A mock GPU node is a real character device whose major no driver of this kernel serves, so an
// open the device cgroup allows fails with ENXIO ("No such device or address") and one it
// denies with EPERM ("Operation not permitted"): the two tell apart whether the container may
// still use its GPU, without a GPU.
const openLoop = `i=0
while :; do
  for f in /dev/nvidia[0-9]*; do
    if ( : <"$f" ) 2>/tmp/err; then echo "$i $f opened"; else echo "$i $f $(sed 's/.*: //' /tmp/err)"; fi
  done
  i=$((i+1)); sleep 0.5
done`

// testDaemonReload: with the systemd cgroup driver (containerd's SystemdCgroup, the kubelet's
// cgroupDriver: systemd, as kind and most distributions run them), runc hands a container's
// device rules to systemd as DeviceAllow=/dev/char/<major>:<minor>. systemd before v240 stat()s
// that path and drops a rule whose path is missing, and runc then leaves it out itself
// (opencontainers/cgroups devices/systemd.go: "Old systemd versions use stat(2) on path...");
// a daemon-reload rewrites the container's device cgroup from what systemd kept, and the GPU is
// gone from the running container (NVIDIA's toolkit: "Failed to initialize NVML: Unknown
// Error"). systemd v240 and later parse the numbers out of the path. The kind node's systemd is
// newer (Debian 12's 252), so this shows the half kind can show: the pod opens its GPU in a loop
// across a daemon-reload on its node and keeps it, and the plugin made the /dev/char links that
// a node with an older systemd (RHEL 8's 239) needs, naming character devices with the numbers
// of the nodes the claim's spec gives the container.
func (e *env) testDaemonReload(ctx context.Context, t *testing.T) {
	const name = "daemon-reload"
	e.runPod(ctx, t, name, gpuClass, 1, openLoop)
	defer e.deletePod(ctx, t, name)
	before := e.waitLog(ctx, t, name, func(log string) bool { return strings.Count(log, "\n") >= 4 })
	if !strings.Contains(before, "No such device or address") {
		t.Fatalf("before the daemon-reload the container cannot open its GPU as a driverless device (ENXIO):\n%s", before)
	}
	// Every character device of the claim's spec, as the runtime got it: major:minor and path.
	devs := e.allocated(ctx, t, name)
	minor := strings.TrimPrefix(devs[0].name, "gpu-")
	for _, numbers := range []string{"195:" + minor, "195:255"} { // the GPU, nvidiactl
		got := strings.TrimSpace(e.exec(ctx, "sh", "-c", "stat -L -c '%F %t:%T' /dev/char/"+numbers+" 2>&1 || true"))
		maj, min, _ := strings.Cut(numbers, ":")
		want := fmt.Sprintf("character special file %x:%x", atoi(t, maj), atoi(t, min))
		if got != want {
			t.Errorf("/dev/char/%s on the node: %q, want a link to %q (the link runc and systemd before v240 need)", numbers, got, want)
		}
	}
	e.exec(ctx, "systemctl", "daemon-reload")
	mark := strings.Count(before, "\n")
	after := e.waitLog(ctx, t, name, func(log string) bool { return strings.Count(log, "\n") >= mark+8 })
	tail := strings.Join(strings.Split(strings.TrimSpace(after), "\n")[mark:], "\n")
	t.Logf("after systemctl daemon-reload on the node:\n%s", tail)
	if strings.Contains(tail, "Operation not permitted") || strings.Contains(tail, "opened") {
		t.Errorf("the container's device cgroup changed at the node's systemctl daemon-reload (EPERM: GPU taken away; opened: a driver answered):\n%s", tail)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitLog polls a pod's log until done says it has enough.
func (e *env) waitLog(ctx context.Context, t *testing.T, pod string, done func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, err := e.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil && done(string(b)) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: log not complete after 3m (err %v):\n%s\n%s", pod, err, b, e.describe(ctx, ns, pod))
		}
		time.Sleep(time.Second)
	}
}
