{{/* Chart name, possibly overridden. */}}
{{- define "accel-dra.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: the release name, prefixed with the chart name unless it already
contains it. Truncated to leave room for the longest suffix ("-publisher").
*/}}
{{- define "accel-dra.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "accel-dra.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "accel-dra.labels" -}}
helm.sh/chart: {{ include "accel-dra.chart" . }}
app.kubernetes.io/name: {{ include "accel-dra.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: accel-dra
{{- end }}

{{/* Selector labels of one component; call with (dict "root" $ "component" "gpu-plugin"). */}}
{{- define "accel-dra.selectorLabels" -}}
app.kubernetes.io/name: {{ include "accel-dra.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Name of a driver's DaemonSet and ServiceAccount; call with (dict "root" $ "key" "gpu"). */}}
{{- define "accel-dra.pluginName" -}}
{{- printf "%s-%s-plugin" (include "accel-dra.fullname" .root) .key }}
{{- end }}

{{- define "accel-dra.pluginClusterRole" -}}
{{- printf "%s-plugin" (include "accel-dra.fullname" .) }}
{{- end }}

{{- define "accel-dra.publisherName" -}}
{{- printf "%s-publisher" (include "accel-dra.fullname" .) }}
{{- end }}

{{/*
The backend a driver runs: its own, or its mock when mock.enabled is set. Call with
(dict "root" $ "key" "gpu" "driver" $driver).
*/}}
{{- define "accel-dra.backend" -}}
{{- if .root.Values.mock.enabled }}
{{- if eq .key "npu" }}npu-mock{{ else }}mock{{ end }}
{{- else }}
{{- .driver.backend }}
{{- end }}
{{- end }}

{{/* The mock profile of a driver, "" for the backend's default; same arguments as backend. */}}
{{- define "accel-dra.mockProfile" -}}
{{- $global := ternary .root.Values.mock.npuProfile .root.Values.mock.gpuProfile (eq .key "npu") }}
{{- if and .root.Values.mock.enabled $global }}
{{- $global }}
{{- else }}
{{- .driver.mockProfile }}
{{- end }}
{{- end }}

{{- define "accel-dra.isMockBackend" -}}
{{- $b := include "accel-dra.backend" . }}
{{- if or (eq $b "mock") (eq $b "npu-mock") }}true{{ end }}
{{- end }}

{{/* Image reference; call with (dict "root" $ "image" .Values.plugin.image). */}}
{{- define "accel-dra.image" -}}
{{- /* The release's images are tagged "v" and the chart's appVersion (make image, Makefile). */}}
{{- printf "%s:%s" .image.repository (default (printf "v%s" .root.Chart.AppVersion) .image.tag) }}
{{- end }}

{{/*
The publisher's rules on node groups (Cluster API objects) and their events; a ClusterRole's,
or with publisher.watchNamespace a Role's in that namespace.
*/}}
{{- define "accel-dra.publisherGroupRules" }}
- apiGroups: ["cluster.x-k8s.io"]
  resources: ["machines"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["cluster.x-k8s.io"]
  resources: ["machinesets", "machinedeployments", "machinepools"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if eq .Values.publisher.mode "management" }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end }}

{{- /*
The annotation keys the template publisher writes (pkg/publisher/nodegroup.ManagedKeys), as a
CEL list; its write-scope admission policy allows changes of these only.
*/}}
{{- define "accel-dra.publisherAnnotationKeys" -}}
{{ list
  "template.accel-dra.io/version"
  "template.accel-dra.io/hash"
  "template.accel-dra.io/encoding"
  "template.accel-dra.io/resourceslices"
  "capacity.cluster-autoscaler.kubernetes.io/dra-resource-slices"
  "capacity.cluster-autoscaler.kubernetes.io/cpu"
  "capacity.cluster-autoscaler.kubernetes.io/memory"
  "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk"
  "capacity.cluster-autoscaler.kubernetes.io/maxPods"
  "capacity.cluster-autoscaler.kubernetes.io/labels"
  "capacity.cluster-autoscaler.kubernetes.io/taints"
  "capacity.cluster-autoscaler.kubernetes.io/dra-driver"
  "capacity.cluster-autoscaler.kubernetes.io/dra-pool"
  "capacity.cluster-autoscaler.kubernetes.io/gpu-count"
  "template.accel-dra.io/source"
  "template.accel-dra.io/divergence"
  "template.accel-dra.io/machine-template"
  | toJson }}
{{- end }}

{{/*
A driver's plugin pod affinity, as YAML ("" for none); same arguments as backend. The driver's
affinity, else plugin.affinity; unless mock devices or a nodeSelector choose the nodes, or that
affinity has a nodeAffinity of its own, a required node affinity with one term per entry of
nodeAffinityLabels: the terms are ORed, so a node carrying any of the labels is selected.
Unless the affinity is the user's own nodeAffinity, every term also requires that the driver's
pauseLabel (the GPU operator's driver manager flips nvidia.com/gpu.deploy.dra-driver to
paused-for-driver-upgrade before it unloads the driver) is not paused, so that the plugin, which
holds NVML, leaves the node for the upgrade and comes back after it; NotIn also matches a node
without the label.
*/}}
{{- define "accel-dra.pluginAffinity" -}}
{{- $affinity := deepCopy (default .root.Values.plugin.affinity .driver.affinity | default dict) }}
{{- $labels := dig "nodeAffinityLabels" list .driver }}
{{- $pause := list }}
{{- with (dig "pauseLabel" "" .driver) }}
{{- $pause = list (dict "key" . "operator" "NotIn" "values" (list "paused-for-driver-upgrade")) }}
{{- end }}
{{- if not (hasKey $affinity "nodeAffinity") }}
{{- $terms := list }}
{{- if and (not .root.Values.mock.enabled) (not .driver.nodeSelector) $labels }}
{{- range $labels }}
{{- $expr := dict "key" .key "operator" "Exists" }}
{{- with (dig "values" list .) }}
{{- $expr = dict "key" $expr.key "operator" "In" "values" . }}
{{- end }}
{{- $terms = append $terms (dict "matchExpressions" (concat (list $expr) $pause)) }}
{{- end }}
{{- else if $pause }}
{{- $terms = list (dict "matchExpressions" $pause) }}
{{- end }}
{{- with $terms }}
{{- $_ := set $affinity "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" .)) }}
{{- end }}
{{- end }}
{{- with $affinity }}{{ toYaml . }}{{ end }}
{{- end }}

{{/*
A driver's DaemonSet rollingUpdate, as YAML; same arguments as backend. Fails on numbers
Kubernetes or the plugin cannot take.
*/}}
{{- define "accel-dra.rollingUpdate" -}}
{{- $given := dig "updateStrategy" dict .driver | default dict }}
{{- $withSurge := .root.Values.plugin.rollingUpdateWithSurge }}
{{- $where := printf "drivers.%s.updateStrategy" .key }}
{{- $surge := ternary 1 0 $withSurge }}
{{- if hasKey $given "maxSurge" }}
{{- $surge = $given.maxSurge }}
{{- else if and (hasKey $given "maxUnavailable") (not (has (toString $given.maxUnavailable) (list "0" "0%"))) }}
{{- $surge = 0 }}
{{- end }}
{{- $surging := not (has (toString $surge) (list "0" "0%")) }}
{{- $unavailable := ternary 0 1 $surging }}
{{- if hasKey $given "maxUnavailable" }}
{{- $unavailable = $given.maxUnavailable }}
{{- end }}
{{- $unavailing := not (has (toString $unavailable) (list "0" "0%")) }}
{{- if and $surging (not $withSurge) }}
{{- fail (printf "%s.maxSurge is %v, but plugin.rollingUpdateWithSurge is false: two plugin pods on one node need the kubelet's plugin rolling update (--pod-uid); set maxSurge to 0" $where $surge) }}
{{- end }}
{{- if and $surging $unavailing }}
{{- fail (printf "%s: maxSurge %v and maxUnavailable %v are both non-zero; Kubernetes allows only one (with surge, set maxUnavailable to 0)" $where $surge $unavailable) }}
{{- end }}
{{- if and (not $surging) (not $unavailing) }}
{{- fail (printf "%s: maxSurge and maxUnavailable are both 0; the DaemonSet would never update (set one of them)" $where) }}
{{- end }}
maxSurge: {{ ternary ($surge | quote) ($surge | int | toString) (kindIs "string" $surge) }}
maxUnavailable: {{ ternary ($unavailable | quote) ($unavailable | int | toString) (kindIs "string" $unavailable) }}
{{- end }}

{{/* Where the plugins store their events about Nodes. */}}
{{- define "accel-dra.eventsNamespace" -}}
{{- .Values.rbac.nodeEventsNamespace }}
{{- end }}

{{/*
"true" when a driver runs in NVIDIA's compatibility mode (the GPU driver with
drivers.gpu.compat.nvidia), else ""; arguments: a dict with key and driver.
*/}}
{{- define "accel-dra.isNVIDIACompat" -}}
{{- if and (eq .key "gpu") (dig "compat" "nvidia" false .driver) }}true{{ end }}
{{- end }}

{{/*
The label that hands a node over to the plugin from NVIDIA's DRA driver: in NVIDIA's
compatibility mode, and under accel-dra's own names where compat.besideNVIDIADriver states a
node-by-node move beside NVIDIA's driver, so that both moves are one runbook ("" otherwise or
when the label is turned off); same arguments as backend.
*/}}
{{- define "accel-dra.compatNodeLabel" -}}
{{- if or (include "accel-dra.isNVIDIACompat" .) (and (eq .key "gpu") (dig "compat" "besideNVIDIADriver" false .driver)) }}
{{- dig "compat" "nodeLabel" "" .driver }}
{{- end }}
{{- end }}

{{/*
A driver's plugin nodeSelector, as YAML ("" for none); same arguments as backend. In NVIDIA's
compatibility mode only the nodes labelled as handed over, so that the plugin never runs beside
NVIDIA's under the same driver name (docs/migrate-from-nvidia.md). A nodeSelector is ANDed with
the node affinity, so the node-affinity labels still apply. The uninstall's node clean-up runs on
the same nodes.
*/}}
{{- define "accel-dra.pluginNodeSelector" -}}
{{- $nodeSelector := ternary .root.Values.mock.nodeSelector .driver.nodeSelector (eq .root.Values.mock.enabled true) }}
{{- with (include "accel-dra.compatNodeLabel" .) }}
{{- $nodeSelector = merge (dict . "true") (deepCopy ($nodeSelector | default dict)) }}
{{- end }}
{{- with $nodeSelector }}{{ toYaml . }}{{ end }}
{{- end }}

{{/*
A driver's plugin data directory; same arguments as backend. In NVIDIA's compatibility mode not
NVIDIA's own directory (plugins/gpu.nvidia.com): its checkpoint stays as NVIDIA's driver left
it, for a rollback, and the uninstall's clean-up never touches it.
*/}}
{{- define "accel-dra.pluginDataDir" -}}
{{- $dir := printf "%s/plugins/%s" (trimSuffix "/" .root.Values.plugin.kubeletRootDir) .driver.driverName }}
{{- if include "accel-dra.isNVIDIACompat" . }}
{{- $dir = printf "%s-accel-dra" $dir }}
{{- end }}
{{- $dir }}
{{- end }}

{{/*
The NVIDIA compatibility mode (drivers.gpu.compat.nvidia, docs/migrate-from-nvidia.md) sets the
GPU driver's names to NVIDIA's in the values themselves, so that every template that reads the
driver name, the class names or the extended resource sees the same ones. Arguments: a dict
with key and driver (one entry of .Values.drivers). Idempotent: each template that ranges over
the drivers includes it first, whatever order Helm renders them in.
*/}}
{{- define "accel-dra.applyCompat" -}}
{{- $driver := .driver }}
{{- if include "accel-dra.isNVIDIACompat" . }}
{{- if not (has $driver.driverName (list "gpu.accel-dra.io" "gpu.nvidia.com")) }}
{{- fail (printf "drivers.gpu.compat.nvidia publishes the GPUs as NVIDIA's driver, gpu.nvidia.com; drivers.gpu.driverName=%s contradicts it: leave it at its default" $driver.driverName) }}
{{- end }}
{{- $_ := set $driver "driverName" "gpu.nvidia.com" }}
{{- if not $driver.deviceClass.name }}
{{- $_ := set $driver.deviceClass "name" "gpu.nvidia.com" }}
{{- end }}
{{- if not $driver.deviceClass.extendedResourceName }}
{{- $_ := set $driver.deviceClass "extendedResourceName" "nvidia.com/gpu" }}
{{- end }}
{{- if eq (dig "migDeviceClass" "name" "" $driver) "mig.gpu.accel-dra.io" }}
{{- $_ := set $driver.migDeviceClass "name" "mig.nvidia.com" }}
{{- end }}
{{- end }}
{{- end }}
