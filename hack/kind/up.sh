#!/usr/bin/env bash
# Creates a kind cluster, builds and loads accel-dra's plugin image, installs the Helm chart on
# mock devices (deployments/helm/accel-dra/values-mock.yaml: mock GPUs and NPUs on every node) and
# runs hack/kind/sample-workload.yaml, printing what the container got.
#
# Needs a Docker engine, kind, kubectl and helm (v3.8+ or v4). CI machines have no Docker engine
# and do not run this; it is for developers. The e2e tests (make e2e) cover the chart and the
# plugin on a real control plane without Docker.
#
# Environment: KIND_CLUSTER_NAME (default accel-dra), KIND_NODE_IMAGE (default: kind's own),
# IMAGE_TAG (default dev), KEEP_CLUSTER=0 deletes the cluster at the end (default: keep it;
# hack/kind/down.sh deletes it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CLUSTER=${KIND_CLUSTER_NAME:-accel-dra}
TAG=${IMAGE_TAG:-dev}
PLUGIN_IMAGE=accel-dra-kubelet-plugin:${TAG}
NAMESPACE=accel-dra
CHART=${ROOT}/deployments/helm/accel-dra

for tool in docker kind kubectl helm; do
	command -v "$tool" >/dev/null || { echo "up.sh: $tool is not on the PATH" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "up.sh: no Docker engine is reachable (docker info failed)" >&2; exit 1; }

echo "==> building ${PLUGIN_IMAGE}"
docker build --target plugin -t "${PLUGIN_IMAGE}" "${ROOT}"

if kind get clusters | grep -qx "${CLUSTER}"; then
	echo "==> reusing kind cluster ${CLUSTER}"
else
	echo "==> creating kind cluster ${CLUSTER}"
	kind create cluster --name "${CLUSTER}" --config "${ROOT}/hack/kind/kind-config.yaml" \
		${KIND_NODE_IMAGE:+--image "${KIND_NODE_IMAGE}"} --wait 120s
fi
if [[ "${KEEP_CLUSTER:-1}" == 0 ]]; then
	trap 'kind delete cluster --name "${CLUSTER}"' EXIT
fi
kubectl config use-context "kind-${CLUSTER}" >/dev/null

echo "==> loading ${PLUGIN_IMAGE} into the nodes"
kind load docker-image --name "${CLUSTER}" "${PLUGIN_IMAGE}"

echo "==> installing the chart on mock devices"
kubectl create namespace "${NAMESPACE}" --dry-run=client -o yaml | kubectl apply -f -
# The plugin pods need host paths and run as root; label the namespace for Pod Security.
kubectl label namespace "${NAMESPACE}" --overwrite pod-security.kubernetes.io/enforce=privileged
helm upgrade --install accel-dra "${CHART}" --namespace "${NAMESPACE}" \
	-f "${CHART}/values-mock.yaml" \
	--set plugin.image.repository=accel-dra-kubelet-plugin \
	--set plugin.image.tag="${TAG}" \
	--set plugin.image.pullPolicy=Never \
	--wait --timeout 5m

echo "==> waiting for ResourceSlices"
for _ in $(seq 60); do
	if [[ -n "$(kubectl get resourceslices -o name)" ]]; then break; fi
	sleep 2
done
kubectl get resourceslices -o wide

echo "==> running the sample workload"
kubectl delete -f "${ROOT}/hack/kind/sample-workload.yaml" --ignore-not-found --wait
kubectl apply -f "${ROOT}/hack/kind/sample-workload.yaml"
kubectl wait --for=jsonpath='{.status.phase}'=Succeeded pod/accel-dra-sample --timeout=3m || {
	kubectl describe pod accel-dra-sample
	exit 1
}
kubectl logs pod/accel-dra-sample
kubectl get resourceclaims -o wide
echo "==> done; hack/kind/down.sh deletes the cluster"
