package publisher

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/accel-dra/accel-dra/pkg/kubeclient"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// Name is the binary's name, the default leader election lease name, the controller name and
// the field manager of its writes.
const Name = "accel-dra-template-publisher"

// FieldManager is the server-side apply field manager of the publisher's annotation writes.
const FieldManager = Name

// Default driver names.
const (
	GPUDriverName = "gpu.accel-dra.io"
	NPUDriverName = "npu.accel-dra.io"
)

// Modes of the publisher (--mode).
const (
	// ModeSelfManaged: the node groups and their nodes are in the same cluster (a self-managed
	// Cluster API cluster, or one where the groups are mirrored).
	ModeSelfManaged = "self-managed"
	// ModeManagement: the publisher runs against a Cluster API management cluster and reads
	// each group's nodes from its workload cluster through the Cluster's kubeconfig Secret.
	ModeManagement = "management"
)

// Options are the publisher's settings, one flag each.
type Options struct {
	Mode                    string
	WorkloadProbeInterval   time.Duration
	WorkloadSyncTimeout     time.Duration
	Kube                    kubeclient.Options
	LeaderElect             bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	MetricsBindAddress      string
	HealthProbeBindAddress  string
	Drivers                 []string
	GPUDriver               string
	TemplateBudgetBytes     int
	WatchNamespace          string
	IdentityAttributes      []string
	KeepDeviceTaints        bool
	Workers                 int
	Profiling               bool
	SeedsDir                string
	SeedTemplatesDir        string
	StaleTemplatePolicy     string
	Logging                 *logsapi.LoggingConfiguration
	// LeaseDuration and friends are not flags; tests shorten them.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// NewOptions returns the defaults, which fit the Helm chart's Deployment.
func NewOptions() *Options {
	return &Options{
		// A controller, not a node agent: modest rate limits, enough to write every group
		// of a large cluster after a restart within seconds.
		Kube:                   kubeclient.Options{QPS: 50, Burst: 100},
		Mode:                   ModeSelfManaged,
		WorkloadProbeInterval:  30 * time.Second,
		WorkloadSyncTimeout:    10 * time.Second,
		LeaderElect:            true,
		LeaderElectionID:       Name,
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		Drivers:                []string{GPUDriverName, NPUDriverName},
		GPUDriver:              GPUDriverName,
		TemplateBudgetBytes:    template.DefaultBudget,
		IdentityAttributes:     template.DefaultIdentityAttributes(),
		Workers:                2,
		StaleTemplatePolicy:    StaleWithdraw,
		Logging:                logsapi.NewLoggingConfiguration(),
		LeaseDuration:          15 * time.Second,
		RenewDeadline:          10 * time.Second,
		RetryPeriod:            2 * time.Second,
	}
}

// NewFlagSet returns the binary's flag set bound to o. The Helm chart test parses the chart's
// container args with this same flag set, so a renamed flag fails there.
func (o *Options) NewFlagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet(Name, pflag.ContinueOnError)
	o.Kube.AddFlags(fs)
	fs.StringVar(&o.Mode, "mode", o.Mode, "Where the nodes are: self-managed (in the cluster of --kubeconfig, with the node groups) or management (--kubeconfig is a Cluster API management cluster; each group's nodes are read from its workload cluster through the Secret <cluster>-kubeconfig).")
	fs.DurationVar(&o.WorkloadProbeInterval, "workload-cluster-probe-interval", o.WorkloadProbeInterval, "With --mode=management: how often each workload cluster's API server is checked.")
	fs.DurationVar(&o.WorkloadSyncTimeout, "workload-cluster-sync-timeout", o.WorkloadSyncTimeout, "With --mode=management: how long a reconcile waits for a new workload cluster cache to sync before reporting the cluster unreachable.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Run only while holding the leader election lease, so that replicas can stand by.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader election lease (default: the namespace the pod runs in).")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader election lease.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of the Prometheus /metrics endpoint (plain HTTP); 0 disables it.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the /healthz and /readyz endpoints; 0 disables them.")
	fs.StringSliceVar(&o.Drivers, "drivers", o.Drivers, "DRA drivers whose ResourceSlices go into node group templates.")
	fs.StringVar(&o.GPUDriver, "autoscaler-gpu-driver", o.GPUDriver, "capacity.cluster-autoscaler.kubernetes.io/dra-driver (with gpu-count, the number of its whole devices) names, per group, the driver of the whole devices in its template; this driver for a group with whole devices of several drivers (without it among them: the driver with the most, then the first by name). Empty writes neither key.")
	fs.IntVar(&o.TemplateBudgetBytes, "template-budget-bytes", o.TemplateBudgetBytes, fmt.Sprintf("Size limit of the template annotations (keys plus values), at most %d (three quarters of the %d bytes the API allows all annotations of an object). A larger template is not written (and never truncated).", MaxTemplateBudget, apivalidation.TotalAnnotationSizeLimitB))
	fs.StringVar(&o.WatchNamespace, "watch-namespace", o.WatchNamespace, "Only publish templates for MachineDeployments and MachineSets in this namespace (default: all).")
	fs.StringSliceVar(&o.IdentityAttributes, "identity-attributes", o.IdentityAttributes, "Device attributes whose values identify one piece of hardware; they become placeholders in templates (a name without a domain matches that identifier in any domain).")
	fs.BoolVar(&o.KeepDeviceTaints, "keep-device-taints", o.KeepDeviceTaints, "Keep device taints in templates (by default they are dropped as transient).")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Node groups reconciled in parallel.")
	fs.StringVar(&o.SeedsDir, "seeds-dir", o.SeedsDir, "Directory of the seeds a node group can name in template.accel-dra.io/seed: <name>.yaml, a NodeGroupSeed, written to a group that has no template from its own nodes (default: none).")
	fs.StringVar(&o.SeedTemplatesDir, "seed-templates-dir", o.SeedTemplatesDir, "Directory of <name>.json, the template document of a seed that gives no devices, as accel-dra-kubelet-plugin generate-template writes it (default: --seeds-dir).")
	fs.StringVar(&o.StaleTemplatePolicy, "stale-template-policy", o.StaleTemplatePolicy, "What to do with the template of a group at zero whose infrastructure machine template changed since the template was taken: withdraw (remove it and the capacity keys, so that the autoscaler does not scale the group up for the old machines), reseed (apply the group's seed or copy-from if it names one, else withdraw) or keep.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go profiles under /debug/pprof/ on the metrics address.")
	logsapi.AddFlags(o.Logging, fs)
	return fs
}

// Validate checks the options after parsing.
func (o *Options) Validate() error {
	if o.Mode != ModeSelfManaged && o.Mode != ModeManagement {
		return fmt.Errorf("--mode=%q: want %s or %s", o.Mode, ModeSelfManaged, ModeManagement)
	}
	if o.WorkloadProbeInterval <= 0 || o.WorkloadSyncTimeout <= 0 {
		return fmt.Errorf("--workload-cluster-probe-interval and --workload-cluster-sync-timeout must be positive")
	}
	if o.TemplateBudgetBytes <= 0 || o.TemplateBudgetBytes > MaxTemplateBudget {
		return fmt.Errorf("--template-budget-bytes=%d: must be in (0, %d], leaving room for the group's other annotations within the API's %d bytes", o.TemplateBudgetBytes, MaxTemplateBudget, apivalidation.TotalAnnotationSizeLimitB)
	}
	if len(o.Drivers) == 0 {
		return fmt.Errorf("--drivers: at least one driver is required")
	}
	if !slices.Contains(StalePolicies, o.StaleTemplatePolicy) {
		return fmt.Errorf("--stale-template-policy=%q: want one of %s", o.StaleTemplatePolicy, strings.Join(StalePolicies, ", "))
	}
	if o.Workers < 1 {
		return fmt.Errorf("--workers=%d: must be at least 1", o.Workers)
	}
	if o.LeaderElect && o.LeaderElectionID == "" {
		return fmt.Errorf("--leader-election-id must not be empty with --leader-elect")
	}
	return nil
}

// ApplyLogging validates and applies the logging flags; call it once after flag parsing.
func (o *Options) ApplyLogging() error {
	return logsapi.ValidateAndApply(o.Logging, nil)
}
