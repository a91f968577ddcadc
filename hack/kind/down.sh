#!/usr/bin/env bash
# Deletes the kind cluster hack/kind/up.sh made.
set -euo pipefail
kind delete cluster --name "${KIND_CLUSTER_NAME:-accel-dra}"
