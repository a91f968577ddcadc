package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/publisher"
)

// testScheme knows the API types the chart renders: Kubernetes' and the Prometheus operator's.
var testScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{scheme.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// monitoringOn turns every monitoring object on.
var monitoringOn = map[string]any{"monitoring": map[string]any{
	"serviceMonitor":   map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
	"prometheusRule":   map[string]any{"enabled": true},
	"grafanaDashboard": map[string]any{"enabled": true},
}}

func init() {
	// The monitoring objects, with the plugins of both drivers and the publisher: by a
	// ServiceMonitor, and by a PodMonitor.
	valueSets["monitoring-service"] = valueSet{
		file:     "values-mock.yaml",
		values:   mergeValues(monitoringOn, map[string]any{"publisher": map[string]any{"enabled": true}}),
		drivers:  map[string]string{"gpu.accel-dra.io": "mock", "npu.accel-dra.io": "npu-mock"},
		profiles: map[string]string{"gpu.accel-dra.io": "h100-8x-2numa", "npu.accel-dra.io": "ascend910b-8x"},
		surge:    true, publisher: true,
	}
	valueSets["monitoring-pod"] = valueSet{
		values: map[string]any{
			"drivers": devicePluginOff["drivers"],
			"rbac":    map[string]any{"nodeEventsNamespace": "kube-system"},
			"monitoring": map[string]any{
				"service":          map[string]any{"enabled": true},
				"podMonitor":       map[string]any{"enabled": true, "interval": "1m"},
				"prometheusRule":   map[string]any{"enabled": true, "deviceUnhealthyFor": "10m", "prepareP99Seconds": 0.5, "alertLabels": map[string]any{"team": "gpu"}},
				"grafanaDashboard": map[string]any{"enabled": true, "namespace": "monitoring"},
			},
		},
		drivers: map[string]string{"gpu.accel-dra.io": "nvml"}, surge: true,
	}
}

var monitoringKinds = []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"}

// TestMonitoringOffByDefault: without the values, no monitoring object (a cluster without the
// Prometheus operator's CRDs would refuse the install), and each switch renders its own.
func TestMonitoringOffByDefault(t *testing.T) {
	count := func(r *Rendered) map[string]int {
		n := map[string]int{}
		for _, k := range monitoringKinds {
			n[k] = len(r.OfKind(k))
		}
		for _, s := range r.OfKind("Service") {
			if s.GetLabels()["accel-dra.io/metrics"] == "true" {
				n["Service"]++
			}
		}
		for _, c := range r.OfKind("ConfigMap") {
			if c.GetLabels()["grafana_dashboard"] == "1" {
				n["dashboard"]++
			}
		}
		return n
	}
	publisherOn := map[string]any{"publisher": map[string]any{"enabled": true}}
	for name, tc := range map[string]struct {
		values map[string]any
		want   map[string]int
	}{
		"default":         {nil, map[string]int{}},
		"publisher":       {publisherOn, map[string]int{}},
		"services":        {mergeValues(publisherOn, map[string]any{"monitoring": map[string]any{"service": map[string]any{"enabled": true}}}), map[string]int{"Service": 2}},
		"service monitor": {map[string]any{"monitoring": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}, map[string]int{"Service": 1, "ServiceMonitor": 1}},
		"pod monitor":     {map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true}}}, map[string]int{"PodMonitor": 1}},
		"rules":           {map[string]any{"monitoring": map[string]any{"prometheusRule": map[string]any{"enabled": true}}}, map[string]int{"PrometheusRule": 1}},
		"dashboard":       {map[string]any{"monitoring": map[string]any{"grafanaDashboard": map[string]any{"enabled": true}}}, map[string]int{"dashboard": 1}},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := render(Options{Values: tc.values})
			if err != nil {
				t.Fatal(err)
			}
			got := count(r)
			for k, v := range got {
				if v != tc.want[k] {
					t.Errorf("%d %s rendered, want %d", v, k, tc.want[k])
				}
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%d %s rendered, want %d", got[k], k, v)
				}
			}
		})
	}
}

// workloadPod is a plugin or publisher pod template with the port its binary serves metrics on.
type workloadPod struct {
	name        string
	namespace   string
	labels      map[string]string
	ports       []corev1.ContainerPort
	metricsPort int32 // from the binary's own flags
}

func workloadPods(t *testing.T, r *Rendered) []workloadPod {
	t.Helper()
	var out []workloadPod
	port := func(addr string) int32 {
		_, p, _ := strings.Cut(addr, ":")
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("address %q: %v", addr, err)
		}
		return int32(n)
	}
	for _, u := range r.OfKind("DaemonSet") {
		ds := toTyped[appsv1.DaemonSet](t, u)
		c := ds.Spec.Template.Spec.Containers[0]
		o := nodeplugin.NewOptions()
		if err := o.NewFlagSet().Parse(c.Args); err != nil {
			t.Fatal(err)
		}
		out = append(out, workloadPod{ds.Name, ds.Namespace, ds.Spec.Template.Labels, c.Ports, port(o.HTTPAddress)})
	}
	for _, u := range r.OfKind("Deployment") {
		d := toTyped[appsv1.Deployment](t, u)
		c := d.Spec.Template.Spec.Containers[0]
		o := publisher.NewOptions()
		if err := o.NewFlagSet().Parse(c.Args); err != nil {
			t.Fatal(err)
		}
		out = append(out, workloadPod{d.Name, d.Namespace, d.Spec.Template.Labels, c.Ports, port(o.MetricsBindAddress)})
	}
	return out
}

// namedPort resolves a port name of a pod to its number; 0 if the pod has no such port.
func (p workloadPod) namedPort(name string) int32 {
	for _, cp := range p.ports {
		if cp.Name == name {
			return cp.ContainerPort
		}
	}
	return 0
}

// TestMonitorsReachMetrics follows each monitor as Prometheus would: the ServiceMonitor's
// selector to the metrics Services, each Service's selector and target port to a pod's
// port, the PodMonitor's selector and ports to the pods; every plugin and publisher pod is
// scraped, exactly once, on the port its binary serves /metrics on.
func TestMonitorsReachMetrics(t *testing.T) {
	for _, name := range []string{"monitoring-service", "monitoring-pod"} {
		t.Run(name, func(t *testing.T) {
			r := renderSet(t, valueSets[name])
			pods := workloadPods(t, r)
			scraped := map[string]int{}
			services := map[string]*corev1.Service{}
			for _, u := range r.OfKind("Service") {
				s := toTyped[corev1.Service](t, u)
				services[s.Name] = s
				if s.Spec.ClusterIP != corev1.ClusterIPNone {
					t.Errorf("Service %s is not headless: each plugin pod must be a target of its own", s.Name)
				}
				sel := labels.SelectorFromSet(s.Spec.Selector)
				var matched []string
				for _, p := range pods {
					if p.namespace == s.Namespace && sel.Matches(labels.Set(p.labels)) {
						matched = append(matched, p.name)
						sp := s.Spec.Ports[0]
						if sp.Name != "metrics" || sp.TargetPort.Type != intstr.String || p.namedPort(sp.TargetPort.StrVal) != p.metricsPort {
							t.Errorf("Service %s port %+v does not reach %s's metrics port %d", s.Name, sp, p.name, p.metricsPort)
						}
					}
				}
				if len(matched) != 1 {
					t.Errorf("Service %s selects %v, want one workload's pods", s.Name, matched)
				}
			}
			for _, u := range r.OfKind("ServiceMonitor") {
				sm := toTyped[monitoringv1.ServiceMonitor](t, u)
				if sm.Labels["release"] != "prometheus" {
					t.Errorf("ServiceMonitor labels %v lack the values' release label", sm.Labels)
				}
				sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range services {
					if !sel.Matches(labels.Set(s.Labels)) || !slices.Contains(sm.Spec.NamespaceSelector.MatchNames, s.Namespace) {
						continue
					}
					for _, p := range pods {
						if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(p.labels)) {
							for _, ep := range sm.Spec.Endpoints {
								if ep.Port == s.Spec.Ports[0].Name && ep.Path == "/metrics" {
									scraped[p.name]++
									checkNodeLabel(t, "ServiceMonitor", ep.RelabelConfigs)
								}
							}
						}
					}
				}
			}
			for _, u := range r.OfKind("PodMonitor") {
				pm := toTyped[monitoringv1.PodMonitor](t, u)
				sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				if pm.Spec.PodMetricsEndpoints[0].Interval != "1m" {
					t.Errorf("PodMonitor interval %q, want the values' 1m", pm.Spec.PodMetricsEndpoints[0].Interval)
				}
				for _, p := range pods {
					if !sel.Matches(labels.Set(p.labels)) || !slices.Contains(pm.Spec.NamespaceSelector.MatchNames, p.namespace) {
						continue
					}
					for _, ep := range pm.Spec.PodMetricsEndpoints {
						if ep.Port != nil && p.namedPort(*ep.Port) != 0 {
							if p.namedPort(*ep.Port) != p.metricsPort || ep.Path != "/metrics" {
								t.Errorf("PodMonitor scrapes %s on port %s (%d) %s, its metrics are on %d /metrics", p.name, *ep.Port, p.namedPort(*ep.Port), ep.Path, p.metricsPort)
							}
							scraped[p.name]++
							checkNodeLabel(t, "PodMonitor", ep.RelabelConfigs)
						}
					}
				}
			}
			for _, p := range pods {
				if scraped[p.name] != 1 {
					t.Errorf("%s is scraped %d times, want once", p.name, scraped[p.name])
				}
			}
		})
	}
}

// checkNodeLabel: the alerts and the dashboard group by node.
func checkNodeLabel(t *testing.T, kind string, rc []monitoringv1.RelabelConfig) {
	t.Helper()
	if !slices.ContainsFunc(rc, func(c monitoringv1.RelabelConfig) bool {
		return c.TargetLabel == "node" && slices.Equal(c.SourceLabels, []monitoringv1.LabelName{"__meta_kubernetes_pod_node_name"})
	}) {
		t.Errorf("%s relabelings %+v do not set node from the pod's node", kind, rc)
	}
}

// registeredMetrics are the metrics the plugin and the publisher register.
func registeredMetrics() map[string]bool {
	out := map[string]bool{}
	for _, n := range append(nodeplugin.MetricNames(), publisher.MetricNames()...) {
		out[n] = true
	}
	return out
}

// grafanaVars are Grafana's interval variables, which PromQL cannot parse; the others ($node)
// appear in label values only.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// metricNames parses expr and returns the metric names it selects.
func metricNames(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := parser.ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// registeredName reports whether name is a registered metric, or the _bucket, _sum or _count series of
// a registered histogram.
func registeredName(registered map[string]bool, name string) bool {
	if registered[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && registered[base] {
			return true
		}
	}
	return false
}

var labelValuesQuery = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)

// TestMonitoringQueriesUseRegisteredMetrics parses every alert expression and every dashboard
// query as PromQL and checks that each accel_dra_* metric they select is one the binaries
// register: a renamed metric must not leave an alert that never fires.
func TestMonitoringQueriesUseRegisteredMetrics(t *testing.T) {
	registered := registeredMetrics()
	for _, name := range []string{"accel_dra_build_info", "accel_dra_device_info", "accel_dra_xid_events_total", "accel_dra_template_publisher_writes_total"} {
		if !registered[name] {
			t.Fatalf("%s is not among the registered metrics %v", name, registered)
		}
	}
	r := renderSet(t, valueSets["monitoring-service"])
	used := map[string]bool{}
	check := func(where, expr string) {
		t.Helper()
		names := metricNames(t, where, expr)
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if strings.HasPrefix(n, "accel_dra_") && !registeredName(registered, n) {
				t.Errorf("%s: %q queries %s, which neither binary registers", where, expr, n)
			}
		}
	}

	rules := r.OfKind("PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(rules))
	}
	pr := toTyped[monitoringv1.PrometheusRule](t, rules[0])
	var alerts []string
	for _, g := range pr.Spec.Groups {
		for _, rule := range g.Rules {
			alerts = append(alerts, rule.Alert)
			check("alert "+rule.Alert, rule.Expr.String())
			if rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" {
				t.Errorf("alert %s: labels %v, annotations %v; want a severity, a summary and a description", rule.Alert, rule.Labels, rule.Annotations)
			}
		}
	}
	for _, want := range []string{"AccelDRADeviceUnhealthy", "AccelDRAPrepareSlow", "AccelDRADevicesRejected", "AccelDRACheckpointErrors", "AccelDRAResourceSlicePublishFailing", "AccelDRAPublisherGroupsWithProblems", "AccelDRAPublisherWritesFailing", "AccelDRAPublisherWorkloadClusterUnreachable"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}

	var dashboard struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	var cms []*corev1.ConfigMap
	for _, u := range r.OfKind("ConfigMap") {
		cms = append(cms, toTyped[corev1.ConfigMap](t, u))
	}
	if len(cms) != 1 || cms[0].Labels["grafana_dashboard"] != "1" {
		t.Fatalf("dashboard ConfigMaps %v, want one labelled grafana_dashboard: \"1\"", cms)
	}
	if err := json.Unmarshal([]byte(cms[0].Data["accel-dra.json"]), &dashboard); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	targets := 0
	for _, p := range dashboard.Panels {
		for _, tg := range p.Targets {
			targets++
			check("panel "+p.Title, tg.Expr)
		}
	}
	if targets < 10 {
		t.Errorf("the dashboard has %d queries", targets)
	}
	for _, v := range dashboard.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue
		}
		s, _ := q["query"].(string)
		m := labelValuesQuery.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(<metric>, <label>)", v.Name, s)
			continue
		}
		check("variable "+v.Name, m[1])
	}

	// The node-wide metrics this change adds are all shown or alerted on.
	for _, n := range []string{"accel_dra_device_info", "accel_dra_xid_events_total", "accel_dra_ecc_events_total", "accel_dra_resourceslice_publish_errors_total", "accel_dra_mig_operations_total", "accel_dra_mps_daemon_starts_total", "accel_dra_driver_changes_total", "accel_dra_build_info", "accel_dra_node_reporter"} {
		if !used[n] {
			t.Errorf("%s is neither on the dashboard nor in an alert", n)
		}
	}
}

// TestAlertThresholdsFollowValues: the thresholds and extra labels of the values reach the
// rules (monitoring-pod sets them).
func TestAlertThresholdsFollowValues(t *testing.T) {
	r := renderSet(t, valueSets["monitoring-pod"])
	pr := toTyped[monitoringv1.PrometheusRule](t, r.OfKind("PrometheusRule")[0])
	found := 0
	for _, g := range pr.Spec.Groups {
		if g.Name == "accel-dra-publisher" {
			t.Error("publisher alerts rendered without the publisher")
		}
		for _, rule := range g.Rules {
			if rule.Labels["team"] != "gpu" {
				t.Errorf("alert %s labels %v lack alertLabels' team", rule.Alert, rule.Labels)
			}
			switch rule.Alert {
			case "AccelDRADeviceUnhealthy":
				found++
				if rule.For == nil || *rule.For != "10m" {
					t.Errorf("AccelDRADeviceUnhealthy for %v, want the values' 10m", rule.For)
				}
			case "AccelDRAPrepareSlow":
				found++
				e, err := parser.ParseExpr(rule.Expr.String())
				if err != nil {
					t.Fatal(err)
				}
				b, ok := e.(*parser.BinaryExpr)
				if n, isNum := b.RHS.(*parser.NumberLiteral); !ok || !isNum || n.Val != 0.5 || b.Op != parser.GTR {
					t.Errorf("AccelDRAPrepareSlow %q, want p99 > the values' 0.5", rule.Expr.String())
				}
			}
		}
	}
	if found != 2 {
		t.Errorf("found %d of the two alerts", found)
	}
	cm := r.Find("ConfigMap", DefaultReleaseName+"-dashboard")
	if cm == nil || cm.GetNamespace() != "monitoring" {
		t.Errorf("dashboard ConfigMap %v, want it in the values' namespace monitoring", cm)
	}
}

// TestEventsNamespace: the plugin stores its Node events where its Role lets it write,
// rbac.nodeEventsNamespace; a namespace the API server would not take them in is refused.
func TestEventsNamespace(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"default": {nil, "default"},
		"set":     {map[string]any{"rbac": map[string]any{"nodeEventsNamespace": "kube-system"}}, "kube-system"},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := render(Options{Values: tc.values})
			if err != nil {
				t.Fatal(err)
			}
			args, err := pluginArgs(tc.values, "gpu.accel-dra.io", nil)
			if err != nil {
				t.Fatal(err)
			}
			o := nodeplugin.NewOptions()
			if err := o.NewFlagSet().Parse(args); err != nil {
				t.Fatal(err)
			}
			o.NodeName = "node-a" // from the downward API
			if err := o.Complete(); err != nil {
				t.Fatal(err)
			}
			if o.EventsNamespace != tc.want {
				t.Errorf("the plugin stores events in %q, want %q", o.EventsNamespace, tc.want)
			}
			role := toTyped[rbacv1.Role](t, r.Find("Role", DefaultReleaseName+"-plugin-node-events"))
			rb := toTyped[rbacv1.RoleBinding](t, r.Find("RoleBinding", DefaultReleaseName+"-plugin-node-events"))
			if role.Namespace != o.EventsNamespace || rb.Namespace != o.EventsNamespace {
				t.Errorf("events Role in %q, RoleBinding in %q; the plugin writes events to %q", role.Namespace, rb.Namespace, o.EventsNamespace)
			}
		})
	}
	if _, err := render(Options{Values: map[string]any{"rbac": map[string]any{"nodeEventsNamespace": DefaultNamespace}}}); err == nil {
		t.Error("events in the release namespace rendered, want a schema error: the API server refuses events about a Node there")
	}
}

var docMetric = regexp.MustCompile("accel_dra_[a-z0-9_]+")

// TestObservabilityDocListsEveryMetric: docs/observability.md names every accel_dra_* metric the
// binaries register, and no other.
func TestObservabilityDocListsEveryMetric(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	registered := registeredMetrics()
	inDoc := map[string]bool{}
	for _, n := range docMetric.FindAllString(string(doc), -1) {
		inDoc[n] = true
		if !registeredName(registered, n) {
			t.Errorf("docs/observability.md names %s, which neither binary registers", n)
		}
	}
	for n := range registered {
		if strings.HasPrefix(n, "accel_dra_") && !inDoc[n] {
			t.Errorf("%s is registered but not in docs/observability.md", n)
		}
	}
}

// TestMonitoringSchemaRefuses: mistakes in the monitoring values fail before anything renders.
func TestMonitoringSchemaRefuses(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"unknown key":          {"monitoring": map[string]any{"serviceMonitor": map[string]any{"enable": true}}},
		"bad interval":         {"monitoring": map[string]any{"podMonitor": map[string]any{"interval": "30 seconds"}}},
		"bad for":              {"monitoring": map[string]any{"prometheusRule": map[string]any{"deviceUnhealthyFor": "5"}}},
		"zero p99":             {"monitoring": map[string]any{"prometheusRule": map[string]any{"prepareP99Seconds": 0}}},
		"non-string label":     {"monitoring": map[string]any{"grafanaDashboard": map[string]any{"labels": map[string]any{"grafana_dashboard": 1}}}},
		"bad dashboard namesp": {"monitoring": map[string]any{"grafanaDashboard": map[string]any{"namespace": "Monitoring"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(Options{Values: vals}); err == nil {
				t.Errorf("values %v rendered, want a schema error", vals)
			}
		})
	}
}
