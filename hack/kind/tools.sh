#!/usr/bin/env bash
# Builds, from the Go module proxy, the tools of the offline kind path and caches them by the
# versions in hack/versions.env and this script's text. Prints the directory that holds them:
#
#   node/     containerd, containerd-shim-runc-v2, ctr, runc, crictl, the CNI plugins: what
#             hack/kind/node-image.sh puts into the node image
#   kind, helm (the real Helm CLI of the version go.mod uses for the chart's tests)
#
# runc is built with cgo and its seccomp support (Debian: libseccomp-dev), as runc's releases
# are: a runc without it refuses every container that asks for a seccomp profile.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../versions.env
source "$root/hack/versions.env"

cache=${ACCEL_DRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accel-dra}
key=$( { cat "$root/hack/versions.env" "$0"; grep -E '^\s*helm.sh/helm/v[0-9]+ v' "$root/go.mod"; } | sha256sum | cut -c1-16)
dir="$cache/bin/kind-tools-$key"
want=(node/containerd node/containerd-shim-runc-v2 node/ctr node/runc node/crictl node/bridge node/host-local node/loopback node/portmap kind helm)
complete() { for f in "${want[@]}"; do [ -x "$dir/$f" ] || return 1; done; }
if complete; then echo "$dir"; exit 0; fi

log() { echo "kind-tools: $*" >&2; }
mkdir -p "$dir/node"
exec 9>"$dir/.lock"
flock 9
if complete; then echo "$dir"; exit 0; fi
if ! [ -e /usr/include/seccomp.h ]; then
  log "runc needs libseccomp's headers: apt-get install libseccomp-dev"
  exit 1
fi
export GOTOOLCHAIN=local GOFLAGS=-trimpath
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ld=(-ldflags "-s -w")

# go install builds each module with its own go.mod, as its maintainers test it.
inst() { # inst <cgo> <tags> <outdir> <package@version>...
  local cgo=$1 tags=$2 out=$3; shift 3
  log "go install $*"
  GOBIN="$work/gobin" CGO_ENABLED=$cgo go install -tags "$tags" "${ld[@]}" "$@" >&2
  for p in "$@"; do
    local b=${p%@*}; b=${b##*/}
    mv "$work/gobin/$b" "$out/$b"
  done
}
inst 0 "no_btrfs no_devmapper no_zfs no_aufs" "$dir/node" \
  "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
  "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
  "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION"
inst 1 "seccomp urfave_cli_no_docs" "$dir/node" "github.com/opencontainers/runc@$RUNC_VERSION"
inst 0 "" "$dir/node" \
  "github.com/containernetworking/plugins/plugins/main/bridge@$CNI_PLUGINS_VERSION" \
  "github.com/containernetworking/plugins/plugins/ipam/host-local@$CNI_PLUGINS_VERSION" \
  "github.com/containernetworking/plugins/plugins/main/loopback@$CNI_PLUGINS_VERSION" \
  "github.com/containernetworking/plugins/plugins/meta/portmap@$CNI_PLUGINS_VERSION"
inst 0 "" "$dir" "sigs.k8s.io/kind@$KIND_VERSION"
# cri-tools: the proxy lists none of its versions, so `go install @version` is refused (it asks
# for the list to check deprecation); a module that requires it builds it.
mkdir -p "$work/crictl" && (
  cd "$work/crictl"
  export GOFLAGS="-mod=mod -trimpath"
  printf 'module accel-dra.local/crictlbuild\ngo 1.26\nrequire sigs.k8s.io/cri-tools %s\n' "$CRICTL_VERSION" > go.mod
  printf 'package crictlbuild\n\nimport _ "sigs.k8s.io/cri-tools/cmd/crictl"\n' > tools.go
  log "go build sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  go mod tidy >&2
  CGO_ENABLED=0 go build "${ld[@]}" -o "$dir/node/crictl" sigs.k8s.io/cri-tools/cmd/crictl >&2
)
# The real Helm CLI, from this module: the version the chart's tests render with.
(cd "$root" && CGO_ENABLED=0 go build "${ld[@]}" -o "$dir/helm" helm.sh/helm/v4/cmd/helm)
complete
echo "$dir"
