#!/usr/bin/env bash
# Builds etcd and the Kubernetes control-plane, kubelet and kubectl binaries from the Go module
# proxy and caches them by version. Prints the directory that holds them.
#
#   hack/build-k8s.sh                 # build (or reuse) and print the bin dir
#   hack/build-k8s.sh --with-kubectl  # also kubectl, for people (make demo prints a command)
#   hack/build-k8s.sh --for-kind      # also kubeadm, kube-proxy and kubectl, for the offline kind
#                                     # node image (hack/kind/node-image.sh)
#
# The tests run no kubectl, and its 194 packages of its own (cli-runtime, kustomize, printers)
# and its link are CPU that a cold CI run on 2 cores spends for nothing, so it is built only
# when asked for.
#
# Cache: $ACCEL_DRA_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/accel-dra).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${ACCEL_DRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accel-dra}
bindir="$cache/bin/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"
components=(kube-apiserver kube-scheduler kube-controller-manager kubelet)
case "${1:-}" in
  --with-kubectl) components+=(kubectl) ;;
  --for-kind) components+=(kubectl kubeadm kube-proxy) ;;
esac

complete() {
  for c in "${components[@]}" etcd; do [ -x "$bindir/$c" ] || return 1; done
}
if complete; then echo "$bindir"; exit 0; fi

log() { echo "build-k8s: $*" >&2; }
mkdir -p "$bindir"
# Concurrent runs (parallel test packages, a second shell) would write the same .tmp files; the
# later one waits here and then finds the binaries built.
exec 9>"$bindir/.lock"
if command -v flock >/dev/null; then
  flock 9 || { log "waiting for the build lock failed"; exit 1; }
  if complete; then echo "$bindir"; exit 0; fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

# kubernetes' go.mod replaces its staging modules with local paths, so `go install` cannot build it.
# A throwaway module that requires it and points every staging module at its proxy release can.
missing=()
for c in "${components[@]}"; do [ -x "$bindir/$c" ] || missing+=("$c"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "building Kubernetes $KUBE_VERSION (cold: ~10 min on 2 cores)"
  mkdir -p "$work/kube" && cd "$work/kube"
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module accel-dra.local/kubebuild"
    echo "go 1.26"
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    # every staging module kubernetes requires at v0.0.0, pinned to the matching release
    grep -E '^\s+k8s\.io/[a-z0-9-]+ v0\.0\.0$' "$gomod" | awk '{print $1}' | sort -u \
      | grep -v -e sample-cli-plugin -e sample-controller \
      | while read -r m; do echo "replace $m => $m $KUBE_STAGING_VERSION"; done
  } > go.mod
  cat > tools.go <<'GO'
package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  go mod tidy >&2
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
  for c in "${missing[@]}"; do
    log "go build $c"
    go build -trimpath -ldflags "$ldflags" -o "$bindir/$c.tmp" "k8s.io/kubernetes/cmd/$c"
    mv "$bindir/$c.tmp" "$bindir/$c"
  done
fi

if [ ! -x "$bindir/etcd" ]; then
  # `go install go.etcd.io/etcd/server/v3@...` is refused (replace directives); a module that
  # requires it builds its root package, which is etcd's main.
  log "building etcd $ETCD_VERSION"
  mkdir -p "$work/etcd" && cd "$work/etcd"
  printf 'module accel-dra.local/etcdbuild\ngo 1.26\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
  printf 'package etcdbuild\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
  go mod tidy >&2 || true
  go build -trimpath -ldflags "-s -w" -o "$bindir/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$bindir/etcd.tmp" "$bindir/etcd"
fi
echo "$bindir"
