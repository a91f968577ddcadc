package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/accel-dra/accel-dra/e2e/fakecri"
)

// NodeOptions configure AddNode.
type NodeOptions struct {
	// Name is the node name (and the kubelet's --hostname-override). Default: node-<n>.
	Name string
	// Labels are set on the Node object before AddNode returns.
	Labels map[string]string
	// CDIDirs are the CDI spec directories the node's fake runtime resolves devices from.
	// Default: one directory, <node dir>/cdi, created empty.
	CDIDirs []string
	// KubeletFlags are appended to the kubelet's command line (a repeated flag overrides).
	KubeletFlags []string
}

// Node is a real kubelet with a fake container runtime.
type Node struct {
	Name string
	// Dir is the node's own directory inside the cluster's work directory.
	Dir string
	// RootDir is the kubelet's --root-dir.
	RootDir string
	// CDIDirs are the CDI spec directories CRI resolves devices from.
	CDIDirs []string
	// CRI is the node's fake container runtime.
	CRI *fakecri.Server

	cluster     *Cluster
	args        []string
	logPath     string
	healthzPort int

	mu       sync.Mutex
	kubelet  *Process
	stopOnce sync.Once
}

// RegistrarDir is where the kubelet looks for plugin registration sockets
// (<root>/plugins_registry); pass it to the DRA plugin.
func (n *Node) RegistrarDir() string { return filepath.Join(n.RootDir, "plugins_registry") }

// PluginDataDir is the conventional data directory of a kubelet plugin (<root>/plugins/<driver>),
// where its DRA service socket lives.
func (n *Node) PluginDataDir(driver string) string {
	return filepath.Join(n.RootDir, "plugins", driver)
}

// Kubelet is the current kubelet process.
func (n *Node) Kubelet() *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kubelet
}

// AddNode starts a fake runtime and a real kubelet for a new node and waits until the Node is
// Ready and schedulable. The kubelet runs in its own user and mount namespace with /proc/sys
// read-only, so it cannot change host kernel settings, and with a private /var/log.
func (c *Cluster) AddNode(ctx context.Context, opts NodeOptions) (_ *Node, retErr error) {
	c.mu.Lock()
	if opts.Name == "" {
		opts.Name = "node-" + strconv.Itoa(len(c.nodes)+1)
	}
	for _, n := range c.nodes {
		if n.Name == opts.Name {
			c.mu.Unlock()
			return nil, fmt.Errorf("node %s already added", opts.Name)
		}
	}
	c.mu.Unlock()

	begin := time.Now()
	dir := filepath.Join(c.dir, "nodes", opts.Name)
	n := &Node{
		Name:    opts.Name,
		Dir:     dir,
		RootDir: filepath.Join(dir, "kubelet"),
		CDIDirs: opts.CDIDirs,
		cluster: c,
		logPath: filepath.Join(c.logsDir, "kubelet-"+opts.Name+".log"),
	}
	if len(n.CDIDirs) == 0 {
		n.CDIDirs = []string{filepath.Join(dir, "cdi")}
	}
	for _, d := range append([]string{n.RootDir, filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins")}, n.CDIDirs...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}

	cri, err := fakecri.Start(filepath.Join(dir, "cri.sock"), fakecri.Options{CDIDirs: n.CDIDirs})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	n.CRI = cri
	c.register(nil, func() { n.Stop() })
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	defer func() {
		if retErr != nil {
			n.Stop()
		}
	}()

	// The node authenticates with a client certificate that the Node authorizer and
	// NodeRestriction recognise.
	certFile, keyFile, err := c.pki.clientCert("node-"+n.Name, "system:node:"+n.Name, []string{"system:nodes"})
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
	if err := writeKubeconfig(kubeconfig, c.apiserverURL, c.pki.CAFile, &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}); err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	configFile := filepath.Join(dir, "kubelet-config.yaml")
	n.healthzPort = ports[1]
	if err := writeKubeletConfig(configFile, n, cri.Endpoint(), ports[0], ports[1]); err != nil {
		return nil, err
	}

	kubeletArgs := append([]string{
		filepath.Join(c.binDir, "kubelet"),
		"--config=" + configFile,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + n.RootDir,
		"--cert-dir=" + filepath.Join(n.RootDir, "pki"),
		"--hostname-override=" + n.Name,
		"--v=2",
	}, opts.KubeletFlags...)
	n.args = namespacedCommand(dir, kubeletArgs)
	if err := n.startKubelet(); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx, opts.Labels, begin); err != nil {
		return nil, err
	}
	c.logf("node %s ready after %s", n.Name, time.Since(begin).Round(10*time.Millisecond))
	return n, nil
}

// namespacedCommand wraps a kubelet command line so that it runs in a new user and mount
// namespace (root mapped to the caller) where the host is read-only but for the node's own
// directory: /proc/sys, / and every other writable mount outside /proc and /dev are remounted
// read-only, /var/log and /var/lib are private tmpfs, and /var/lib/kubelet is <node>/var-lib-kubelet. Unconfined, a kubelet writes vm.overcommit_memory,
// kernel.panic and kernel.panic_on_oops, creates /var/log/containers and, mapped to root, could
// write any root-owned file. The shell execs the kubelet only if /proc/sys and / are read-only;
// other mounts it cannot remount are reported in the kubelet log. The mounts vanish with the
// namespace, so nothing is left to clean up on the host.
func namespacedCommand(nodeDir string, kubelet []string) []string {
	const script = `set -e
node=$1; shift
mount --bind "$node" "$node"
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
if [ -d /var/log ]; then mount -t tmpfs -o mode=0755 tmpfs /var/log; fi
# The device-plugin manager ignores --root-dir and uses /var/lib/kubelet/device-plugins.
mkdir -p "$node/var-lib-kubelet"
mount -t tmpfs -o mode=0755 tmpfs /var/lib
mkdir /var/lib/kubelet
mount --bind "$node/var-lib-kubelet" /var/lib/kubelet
mount -o remount,bind,ro /
awk '$6 ~ /(^|,)rw(,|$)/ { print $5 }' /proc/self/mountinfo | while read -r mp; do
  case "$mp" in
    /|/proc|/proc/*|/dev|/dev/*|/var/log|/var/lib|/var/lib/kubelet|"$node"|"$node"/*) continue ;;
  esac
  mount -o remount,bind,ro "$mp" || echo "harness: could not make $mp read-only" >&2
done
touch /proc/sys/kernel/panic 2>/dev/null && { echo "harness: /proc/sys is writable, not starting the kubelet" >&2; exit 1; }
exec "$@"`
	return append([]string{"unshare", "--user", "--map-root-user", "--mount", "--propagation", "private",
		"sh", "-c", script, "kubelet-ns", nodeDir}, kubelet...)
}

func writeKubeletConfig(path string, n *Node, criEndpoint string, port, healthzPort int) error {
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		// Loopback only, anonymous and unauthorised: nothing but the harness can reach it.
		Address:            "127.0.0.1",
		Port:               int32(port),
		ReadOnlyPort:       0,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To(int32(healthzPort)),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
		// CI hosts may have cgroup v1, and a kubelet in a user namespace cannot manage cgroups.
		FailCgroupV1:             ptr.To(false),
		CgroupsPerQOS:            ptr.To(false),
		CgroupDriver:             "cgroupfs",
		EnforceNodeAllocatable:   []string{},
		FailSwapOn:               ptr.To(false),
		ContainerRuntimeEndpoint: criEndpoint,
		FeatureGates:             map[string]bool{"KubeletInUserNamespace": true},
		PodLogsDir:               filepath.Join(n.Dir, "pod-logs"),
		VolumePluginDir:          filepath.Join(n.Dir, "volume-plugins"),
		ResolverConfig:           ptr.To(""),
		// A busy or nearly full CI disk must not evict pods or taint the node; images are fake.
		EvictionHard: map[string]string{
			"memory.available":   "0%",
			"nodefs.available":   "0%",
			"nodefs.inodesFree":  "0%",
			"imagefs.available":  "0%",
			"imagefs.inodesFree": "0%",
		},
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		ImageGCLowThresholdPercent:  ptr.To(int32(99)),
		SerializeImagePulls:         ptr.To(false),
		ProtectKernelDefaults:       false,
	}
	// enforceNodeAllocatable must be an explicit empty list (nil means the default, "pods"),
	// which the typed struct's omitempty cannot write.
	raw, err := json.Marshal(&cfg)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	m["enforceNodeAllocatable"] = []any{}
	data, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func (n *Node) startKubelet() error {
	p, err := startProcess("kubelet-"+n.Name, n.args, nil, n.logPath)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.kubelet = p
	n.mu.Unlock()
	n.cluster.register(p, nil)
	return nil
}

// waitReady waits until the kubelet answers /healthz and has reported the Node Ready since
// `since`, without the not-ready/unreachable taints, after setting labels on it.
func (n *Node) waitReady(ctx context.Context, labels map[string]string, since time.Time) error {
	client := n.cluster.client
	labelled := len(labels) == 0
	healthz := httpCheck(nil, "http://127.0.0.1:"+strconv.Itoa(n.healthzPort)+"/healthz", "ok")
	since = since.Truncate(time.Second) // heartbeats have a resolution of one second
	return waitFor(ctx, nodeTimeout, n.Kubelet(), "node "+n.Name+" Ready", func(ctx context.Context) error {
		if err := healthz(ctx); err != nil {
			return fmt.Errorf("kubelet not healthy: %w", err)
		}
		node, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			if isNotFound(err) {
				return fmt.Errorf("node %s not registered yet", n.Name)
			}
			return err
		}
		if !labelled {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
			if _, err := client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("labelling node: %w", err)
			}
			labelled = true
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status != corev1.ConditionTrue {
					return fmt.Errorf("node %s Ready=%s: %s: %s", n.Name, cond.Status, cond.Reason, cond.Message)
				}
				if cond.LastHeartbeatTime.Time.Before(since) {
					return fmt.Errorf("node %s: no status from the new kubelet yet (last heartbeat %s)", n.Name, cond.LastHeartbeatTime.UTC().Format(time.RFC3339))
				}
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node %s has no Ready condition yet", n.Name)
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				return fmt.Errorf("node %s still tainted %s:%s", n.Name, t.Key, t.Effect)
			}
		}
		return nil
	})
}

// RestartKubelet stops the kubelet (SIGTERM) and starts it again with the same configuration and
// runtime state, then waits until the node is Ready again.
func (n *Node) RestartKubelet(ctx context.Context) error {
	begin := time.Now()
	if err := n.Kubelet().Stop(); err != nil {
		return err
	}
	if err := n.startKubelet(); err != nil {
		return err
	}
	return n.waitReady(ctx, nil, begin)
}

// Stop stops the kubelet, then the fake runtime. The Node object stays (it turns NotReady).
// Cluster.Stop calls it; calling it again is harmless.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		if k := n.Kubelet(); k != nil {
			_ = k.Stop()
		}
		if n.CRI != nil {
			n.CRI.Stop()
		}
	})
}
