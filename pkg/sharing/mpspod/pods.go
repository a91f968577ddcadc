// Package mpspod runs each MPS control daemon in a pod of its own, bound to the plugin's node,
// so that a daemon lives as long as its pod and not as long as the plugin's: a crash, OOM kill,
// liveness kill or upgrade of the plugin's pod leaves the daemons, and the MPS clients they
// serve, running. This is NVIDIA's DRA driver's design (a Deployment per daemon, hostPID,
// chrooted into the driver root); here it is a bare Pod with spec.nodeName, named after the
// daemon's key, which any instance of the plugin on the node finds by that name: the new pod
// of a rolling update adopts the old one's daemons without seeing their processes.
//
// The pod runs the plugin's own image and binary as the daemon's runner
// (sharing.RunDaemonCommand): the runner, not the plugin, owns the daemon process; the pod owns
// the runner; and the plugin owns the pod (created by the first claim that needs the daemon,
// deleted by the last, under the node lock), the daemon's directory and its tmpfs. The kubelet
// checks the daemon through the runner's probe, which asks the control pipe, until the daemon
// is ready (a startup probe); no probe runs while it serves (below).
//
// What a cluster needs of such a pod (#27):
//   - A controller owner, because `kubectl drain` refuses a node with a pod that has none unless
//     --force (k8s.io/kubectl/pkg/drain's unreplicatedFilter). The owner is the Node: the pod
//     is part of the node, as the MPS daemon serves only that node's pods, and the garbage
//     collector removes it with the Node object. A DaemonSet owner, the other one drain knows
//     (it skips such pods with --ignore-daemonsets, daemonSetFilter), cannot be had: the
//     plugin's DaemonSet releases a pod it owns whose labels its selector does not match, and
//     deletes one that it does match as a second pod of the node. So drain evicts the daemon's
//     pod with the workloads; the runner serves on after SIGTERM until the plugin stops it
//     (its stop file, written before the plugin deletes the pod), which it does when the last
//     claim that counts on the daemon is unprepared, or until TerminationGracePeriod: drain
//     waits for it, and the workloads keep their MPS server while they terminate.
//   - The host's network: the daemon talks only through its pipe directory and needs no
//     address of a CNI network, which may not be up on a node that is starting.
//   - The chart's image pull secrets (ImagePullSecrets).
//   - No liveness probe: a probe that failed on a busy node (the pod asks for 10m of CPU, and
//     an exec probe runs in its cgroup) would restart the daemon and end every client of the
//     GPU. A daemon that ends is restarted by its container's restart; one that hangs is
//     replaced by the plugin's next prepare that finds it not answering (sharing.MPS.Ensure).
package mpspod

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/accel-dra/accel-dra/pkg/sharing"
)

// Labels and annotations of a daemon's pod. The chart's admission policy lets a plugin create
// only pods with ComponentLabel=Component, bound to its own node.
const (
	ComponentLabel = "app.kubernetes.io/component"
	Component      = "mps-control-daemon"
	PartOfLabel    = "app.kubernetes.io/part-of"
	DriverLabel    = "accel-dra.io/driver"
	// KeyAnnotation holds the daemon's key, which the name may only hash.
	KeyAnnotation = "accel-dra.io/mps-daemon-key"
)

// NamePrefix starts every daemon pod's name.
const NamePrefix = "accel-dra-mps-"

// ContainerName is the daemon pod's one container.
const ContainerName = "mps-control-daemon"

// DriverRootMount is where a daemon pod mounts the host's driver root.
const DriverRootMount = "/driver-root"

// DefaultCommand is the plugin binary in its image.
const DefaultCommand = "/usr/bin/accel-dra-kubelet-plugin"

// Defaults of the waits.
const (
	// DefaultReadyTimeout bounds the wait for a daemon pod to start or to become ready again:
	// the image is the plugin's own, on the node already, so a pod that takes longer has a
	// problem that the error names.
	DefaultReadyTimeout = 60 * time.Second
	// DefaultStopTimeout bounds the wait for a deleted pod to be gone; its runner quits the
	// daemon within seconds of SIGTERM.
	DefaultStopTimeout = 90 * time.Second
	pollInterval       = 250 * time.Millisecond
	// callTimeout bounds one API call: the plugin calls with the node lock held, and at
	// start-up before it registers, so an API server that does not answer must not hold it.
	callTimeout = 10 * time.Second
)

// Pods implements sharing.Daemons with one pod per daemon.
type Pods struct {
	Client    kubernetes.Interface
	Namespace string
	NodeName  string
	// NodeUID is the UID of the Node NodeName, the pods' owner; Start reads it when empty.
	NodeUID types.UID
	// DriverName labels the pods, so that two drivers' plugins do not sweep each other's.
	DriverName string
	// Image is the plugin's image, which the pods run.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets are the names of the Secrets in Namespace the image is pulled with: the
	// chart's imagePullSecrets, as its own pods have them.
	ImagePullSecrets []string
	// Command is the plugin binary in the image; default DefaultCommand.
	Command string
	// HostDriverRoot is the driver root on the host: the pod mounts it at DriverRootMount and
	// runs ControlPath chrooted into it. Empty: ControlPath is a host path, mounted into the
	// pod at the same path and run there (a stand-in on a mock node).
	HostDriverRoot string
	// ControlPath is nvidia-cuda-mps-control, inside the driver root or on the host.
	ControlPath string
	// PriorityClassName of the pods; a daemon whose clients run should be the last to go.
	PriorityClassName string
	ReadyTimeout      time.Duration
	StopTimeout       time.Duration
}

// Name is the name of the pod of the daemon key: NamePrefix and the key, lower case, where that
// is a valid pod name, else NamePrefix and a hash of the key. Keys are claim UIDs and GPU UUIDs,
// unique in the cluster, so the name is too, and every instance of the plugin computes it.
func Name(key string) string {
	n := NamePrefix + strings.ToLower(key)
	if len(validation.IsDNS1123Label(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(key))
	return NamePrefix + hex.EncodeToString(sum[:16])
}

// control is how the runner in the pod runs nvidia-cuda-mps-control.
func (p Pods) control() sharing.MPSControl {
	c := sharing.MPSControl{Path: cmp.Or(p.ControlPath, sharing.DefaultControlPath)}
	if p.HostDriverRoot != "" {
		c.Root = DriverRootMount
	}
	return c
}

// TerminationGracePeriod bounds how long a daemon pod that someone else deleted (drain's
// eviction) keeps serving until the plugin stops it: longer than workloads take to terminate.
const TerminationGracePeriod = time.Hour

// Pod is the pod of daemon s. Its owner is the Node of UID NodeUID; without one it has none
// (Start reads the UID).
func (p Pods) Pod(s sharing.DaemonSpec) *corev1.Pod {
	command := cmp.Or(p.Command, DefaultCommand)
	c := p.control()
	probe := func(ready bool) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
			Command: append([]string{command}, sharing.RunnerArgs("probe", s, c, 0, ready)...)}}}
	}
	// Ready once the runner has given the daemon its limits and the pipe answers; with no
	// readiness probe, it stays ready while the container runs.
	startup := probe(true)
	startup.InitialDelaySeconds, startup.PeriodSeconds, startup.TimeoutSeconds, startup.FailureThreshold = 1, 1, 15, 120
	hostPath := func(name, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(t)}}}
	}
	volumes := []corev1.Volume{hostPath("mps", s.Dir, corev1.HostPathDirectory)}
	mounts := []corev1.VolumeMount{{Name: "mps", MountPath: s.Dir}}
	if p.HostDriverRoot != "" {
		volumes = append(volumes, hostPath("driver-root", p.HostDriverRoot, corev1.HostPathDirectory))
		// A driver container (the GPU operator's) that restarts mounts its root again; the
		// probes, which run the control binary from the root, must see the new one.
		mounts = append(mounts, corev1.VolumeMount{Name: "driver-root", MountPath: DriverRootMount, MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)})
	} else {
		volumes = append(volumes, hostPath("control", c.Path, corev1.HostPathFile))
		mounts = append(mounts, corev1.VolumeMount{Name: "control", MountPath: c.Path, ReadOnly: true})
	}
	var owners []metav1.OwnerReference
	if p.NodeUID != "" {
		owners = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: p.NodeName, UID: p.NodeUID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
		}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: Name(s.Key), Namespace: p.Namespace, OwnerReferences: owners,
			Labels:      map[string]string{ComponentLabel: Component, PartOfLabel: "accel-dra", DriverLabel: p.DriverName},
			Annotations: map[string]string{KeyAnnotation: s.Key},
		},
		Spec: corev1.PodSpec{
			NodeName: p.NodeName,
			// The daemon runs chrooted into the driver root, whose /proc is the host's.
			HostPID:                      true,
			HostNetwork:                  true,
			RestartPolicy:                corev1.RestartPolicyAlways,
			PriorityClassName:            p.PriorityClassName,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			// How long an evicted daemon serves its clients at most while they terminate.
			TerminationGracePeriodSeconds: ptr.To(int64(TerminationGracePeriod / time.Second)),
			// It serves pods that run on the node whatever taints the node gets.
			Tolerations:      []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ImagePullSecrets: pullSecrets(p.ImagePullSecrets),
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           p.Image,
				ImagePullPolicy: p.ImagePullPolicy,
				Command:         []string{command},
				Args:            sharing.RunnerArgs("run", s, c, 0, false),
				// Mounting (/dev/shm, the directory in the root), chroot and the GPUs.
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
				}},
				StartupProbe:             startup,
				VolumeMounts:             mounts,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: volumes,
		},
	}
}

// get is the daemon's pod, nil if there is none. A pod of that name that is not the daemon's
// (another node's, another key's) is an error: it is never taken for it, nor deleted.
func (p Pods) get(ctx context.Context, s sharing.DaemonSpec) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pod, err := p.Client.CoreV1().Pods(p.Namespace).Get(ctx, Name(s.Key), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("MPS control daemon pod %s/%s: %w", p.Namespace, Name(s.Key), err)
	}
	if pod.Spec.NodeName != p.NodeName || pod.Annotations[KeyAnnotation] != s.Key {
		return nil, fmt.Errorf("pod %s/%s is not the MPS control daemon %s of node %s (node %q, key %q)", p.Namespace, pod.Name, s.Key, p.NodeName, pod.Spec.NodeName, pod.Annotations[KeyAnnotation])
	}
	return pod, nil
}

// Ready implements sharing.Daemons: the daemon's pod exists and is ready. A pod that is
// starting, or restarting its container, is waited for.
func (p Pods) Ready(ctx context.Context, s sharing.DaemonSpec) (bool, error) {
	pod, err := p.get(ctx, s)
	if err != nil || pod == nil {
		return false, err
	}
	if podReady(pod) {
		return true, nil
	}
	if pod.DeletionTimestamp != nil || finished(pod) {
		return false, nil
	}
	err = p.waitReady(ctx, s)
	return err == nil, nil
}

// Start implements sharing.Daemons.
func (p Pods) Start(ctx context.Context, s sharing.DaemonSpec) error {
	logger := klog.FromContext(ctx)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if p.NodeUID == "" {
		node, err := p.Client.CoreV1().Nodes().Get(cctx, p.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("MPS control daemon pod %s/%s: reading its owner, node %s: %w", p.Namespace, Name(s.Key), p.NodeName, err)
		}
		p.NodeUID = node.UID
	}
	pod := p.Pod(s)
	if _, err := p.Client.CoreV1().Pods(p.Namespace).Create(cctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating MPS control daemon pod %s/%s: %w", p.Namespace, pod.Name, err)
	}
	logger.V(2).Info("Created MPS control daemon pod", "pod", klog.KObj(pod), "daemon", s.Key)
	return p.waitReady(ctx, s)
}

// waitReady waits until the pod is ready, and otherwise says what the pod is waiting for.
func (p Pods) waitReady(ctx context.Context, s sharing.DaemonSpec) error {
	var last *corev1.Pod
	timeout := cmp.Or(p.ReadyTimeout, DefaultReadyTimeout)
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		pod, err := p.get(ctx, s)
		switch {
		case err != nil:
			return false, err
		case pod == nil:
			return false, errors.New("it was deleted")
		case finished(pod):
			last = pod
			return false, errors.New("it ended")
		}
		last = pod
		return podReady(pod), nil
	})
	if err == nil {
		return nil
	}
	if wait.Interrupted(err) {
		err = fmt.Errorf("not ready after %s", timeout)
	}
	return fmt.Errorf("MPS control daemon pod %s/%s: %w%s", p.Namespace, Name(s.Key), err, describe(last))
}

// Stop implements sharing.Daemons: the pod is deleted (its runner quits the daemon on SIGTERM)
// and waited for until it is gone, so that a new daemon never meets the old one on the pipe.
func (p Pods) Stop(ctx context.Context, s sharing.DaemonSpec) error {
	pod, err := p.get(ctx, s)
	if err != nil || pod == nil {
		return err
	}
	pods := p.Client.CoreV1().Pods(p.Namespace)
	// The runner serves on after SIGTERM unless it is asked to stop (an eviction); this is the
	// plugin stopping it.
	if err := sharing.AskToStop(s.Dir); err != nil {
		return fmt.Errorf("MPS control daemon pod %s/%s: %w", p.Namespace, pod.Name, err)
	}
	// Only this pod: not one of the same name created after it.
	dctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err = pods.Delete(dctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting MPS control daemon pod %s/%s: %w", p.Namespace, pod.Name, err)
	}
	timeout := cmp.Or(p.StopTimeout, DefaultStopTimeout)
	err = wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && got.UID != pod.UID, err
	})
	if err != nil {
		return fmt.Errorf("MPS control daemon pod %s/%s is not gone after %s (is the kubelet of node %s running?): %w", p.Namespace, pod.Name, timeout, p.NodeName, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted MPS control daemon pod", "pod", klog.KObj(pod), "daemon", s.Key)
	return nil
}

// Keys implements sharing.Daemons: the keys of this driver's daemon pods on this node.
func (p Pods) Keys(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	list, err := p.Client.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{ComponentLabel: Component, DriverLabel: p.DriverName}).String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", p.NodeName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing MPS control daemon pods: %w", err)
	}
	var keys []string
	for _, pod := range list.Items {
		if key := pod.Annotations[KeyAnnotation]; key != "" && pod.Spec.NodeName == p.NodeName && Name(key) == pod.Name {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// describe says what a pod that is not ready waits for, from its status: its phase, and its
// container's state (waiting reason, last termination) and restarts.
func describe(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	parts := []string{"phase " + string(cmp.Or(pod.Status.Phase, corev1.PodPending))}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, strings.TrimSpace("waiting: "+w.Reason+" "+w.Message))
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			parts = append(parts, fmt.Sprintf("last exit %d: %s", t.ExitCode, strings.TrimSpace(t.Message)))
		}
		if cs.RestartCount > 0 {
			parts = append(parts, fmt.Sprintf("%d restarts", cs.RestartCount))
		}
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func pullSecrets(names []string) []corev1.LocalObjectReference {
	var out []corev1.LocalObjectReference
	for _, n := range names {
		out = append(out, corev1.LocalObjectReference{Name: n})
	}
	return out
}
