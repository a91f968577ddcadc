#!/usr/bin/env bash
# Creates a kind cluster with accel-dra on mock devices: the plugin image, the Helm chart
# (deployments/helm/accel-dra/values-mock.yaml: mock GPUs and NPUs on every node) and a sample
# pod that prints what its container got.
#
#   hack/kind/up.sh                     # images from registries: kind's node image, the
#                                       # Dockerfile built as users build it (golang, distroless)
#   hack/kind/up.sh --images=local      # no registry: the node image from hack/kind/node-image.sh,
#                                       # the plugin image from `make build` through the
#                                       # Dockerfile's prebuilt stage (hack/kind/plugin-image.sh),
#                                       # kind and helm from hack/kind/tools.sh (what CI runs)
#   hack/kind/up.sh --no-sample         # stop after the chart is installed
#
# Needs a Docker engine (hack/kind/docker.sh start brings one up in CI), and for published
# images kind, kubectl and helm on the PATH. Environment: KIND_CLUSTER_NAME (default accel-dra),
# KIND_NODE_IMAGE (published images: default kind's own), KIND_WORKERS (default 1),
# IMAGE_TAG (default dev), HELM_EXTRA_ARGS (more helm flags), KUBECONFIG (where kind writes the
# cluster's credentials; default kind's, ~/.kube/config). hack/kind/down.sh deletes the cluster.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
CLUSTER=${KIND_CLUSTER_NAME:-accel-dra}
NAMESPACE=accel-dra
CHART=$ROOT/deployments/helm/accel-dra
images=published sample=1
for a in "$@"; do
  case "$a" in
    --images=published|--images=local) images=${a#--images=} ;;
    --no-sample) sample=0 ;;
    *) echo "up.sh: unknown argument $a (see the comment at the top)" >&2; exit 2 ;;
  esac
done
say() { echo "==> $*"; }

if [ "$images" = local ]; then
  tools=$("$here/tools.sh")
  kube=$("$ROOT/hack/build-k8s.sh" --for-kind)
  export PATH="$tools:$kube:$PATH"
fi
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "up.sh: $tool is not on the PATH" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "up.sh: no Docker engine answers (docker info failed; hack/kind/docker.sh start brings one up as root)" >&2; exit 1; }

if [ "$images" = local ]; then
  say "building the node image (hack/kind/node-image.sh)"
  # ACCEL_DRA_NODE_RUNTIME=containerd1: the variant whose containerd 1.7 ignores CDI.
  node_image=$("$here/node-image${ACCEL_DRA_NODE_RUNTIME:+-$ACCEL_DRA_NODE_RUNTIME}.sh")
  say "building the plugin image (make build, hack/kind/plugin-image.sh)"
  make -C "$ROOT" build PLATFORMS=linux/"$(go env GOARCH)" >/dev/null
  plugin_image=$("$here/plugin-image.sh" "${IMAGE_TAG:-dev}")
  workload_image=$("$here/workload-image.sh")
else
  node_image=${KIND_NODE_IMAGE:-}
  plugin_image=accel-dra-kubelet-plugin:${IMAGE_TAG:-dev}
  workload_image=debian:bookworm-slim
  say "building $plugin_image"
  docker build --target plugin -t "$plugin_image" "$ROOT"
fi

# The cluster's configuration: hack/kind/kind-config.yaml, with patches for this machine.
config=$(mktemp)
trap 'rm -f "$config"' EXIT
{
  sed -n '/^kind: Cluster/,$p' "$here/kind-config.yaml" | sed '/^- role: worker/,$d'
  for _ in $(seq "${KIND_WORKERS:-1}"); do printf -- '- role: worker\n  labels:\n    accel-dra.io/kind-worker: "true"\n'; done
  echo "kubeadmConfigPatches:"
  # kube-proxy leaves the conntrack settings alone: they are the machine's, not the node's.
  printf -- '- |\n  kind: KubeProxyConfiguration\n  conntrack:\n    maxPerCore: 0\n    tcpEstablishedTimeout: 0s\n    tcpCloseWaitTimeout: 0s\n'
  # Kubernetes 1.35+ kubelets refuse cgroup v1 unless told otherwise.
  if [ "$(docker info --format '{{.CgroupVersion}}')" = 1 ]; then
    printf -- '- |\n  kind: KubeletConfiguration\n  failCgroupV1: false\n'
  fi
  # The offline node image has no CoreDNS image (nothing here needs cluster DNS).
  if [ "$images" = local ]; then
    printf -- '- |\n  kind: InitConfiguration\n  skipPhases: ["preflight", "addon/coredns"]\n'
  fi
} > "$config"

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  say "reusing kind cluster $CLUSTER"
else
  say "creating kind cluster $CLUSTER${node_image:+ from $node_image}"
  kind create cluster --name "$CLUSTER" --config "$config" ${node_image:+--image "$node_image"} --wait 3m
fi
kubectl config use-context "kind-$CLUSTER" >/dev/null

say "loading $plugin_image into the nodes"
kind load docker-image --name "$CLUSTER" "$plugin_image"
if [ "$images" = local ]; then kind load docker-image --name "$CLUSTER" "$workload_image"; fi

say "installing the chart on mock devices"
kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# The plugin pods mount host paths and run as root; the namespace allows that under Pod Security.
kubectl label namespace "$NAMESPACE" --overwrite pod-security.kubernetes.io/enforce=privileged >/dev/null
# shellcheck disable=SC2086
helm upgrade --install accel-dra "$CHART" --namespace "$NAMESPACE" \
  -f "$CHART/values-mock.yaml" \
  --set plugin.image.repository="${plugin_image%:*}" \
  --set plugin.image.tag="${plugin_image##*:}" \
  --set plugin.image.pullPolicy=Never \
  ${HELM_EXTRA_ARGS:-} --wait --timeout 5m

say "waiting for ResourceSlices"
for _ in $(seq 60); do
  [ -z "$(kubectl get resourceslices -o name)" ] || break
  sleep 2
done
kubectl get resourceslices

[ "$sample" = 1 ] || exit 0
say "running the sample workload"
sed "s#image: .*#image: $workload_image#" "$here/sample-workload.yaml" > "$config.sample"
kubectl delete -f "$config.sample" --ignore-not-found --wait >/dev/null
kubectl apply -f "$config.sample"
kubectl wait --for=jsonpath='{.status.phase}'=Succeeded pod/accel-dra-sample --timeout=3m || {
  kubectl describe pod accel-dra-sample
  exit 1
}
kubectl logs pod/accel-dra-sample
rm -f "$config.sample"
say "done; hack/kind/down.sh deletes the cluster"
