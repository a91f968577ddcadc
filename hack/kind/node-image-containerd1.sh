#!/usr/bin/env bash
# Builds a variant of the offline kind node image (hack/kind/node-image.sh) whose container
# runtime is containerd 1.7, with its CRI plugin's default enable_cdi = false, and prints its
# name. Such a runtime starts a container without the CDI devices the kubelet asks for, and
# without an error (containerd v1.7 pkg/cri/server/container_create_linux.go: the CDI spec
# option is applied only `if c.config.EnableCDI`): the node on which the plugin must say so
# (e2e/kind/runtime_test.go, issue #27 item 5).
#
# Kubelet v1.37 still runs on containerd 1.7: where a runtime does not implement the CRI's
# RuntimeConfig, it takes the cgroup driver from its own configuration (kind's: systemd) and
# only counts kubelet_cri_losing_support{version="1.38.0"} (cmd/kubelet/app/server.go
# getCgroupDriverFromCRI); CHANGELOG-1.37 moved that removal to 1.38 "to align with containerd
# v1.7 support".
#
# The variant is the standard image with containerd's binaries replaced: the images kubeadm
# runs are exported by the standard image's containerd and imported again by 1.7's into a fresh
# /var/lib/containerd (1.7 is not made to read 2.x's metadata). kind's containerd
# configuration is version 2, which both read. Cached in the Docker engine under a tag that
# hashes this script and the standard image's name; the binaries under the cache directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../versions.env
source "$root/hack/versions.env"
log() { echo "node-image-containerd1: $*" >&2; }
# The newest containerd 1.7 the Go module proxy serves.
CONTAINERD1_VERSION=v1.7.35

cache=${ACCEL_DRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accel-dra}
base=$("$here/node-image.sh")
key=$( { cat "$0"; echo "$base"; } | sha256sum | cut -c1-16)
image=accel-dra.local/kind-node-containerd1:$KUBE_VERSION-$key
if docker image inspect "$image" >/dev/null 2>&1; then echo "$image"; exit 0; fi

work=$(mktemp -d)
builder=""
cleanup() { [ -z "$builder" ] || docker rm -f "$builder" >/dev/null 2>&1 || true; chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# containerd 1.7's go.mod has an exclude directive, so `go install @version` refuses it (it
# builds a module's packages only where its go.mod means the same as a dependency's): it is
# built in a copy of the module, with its own go.mod and go.sum, as its maintainers build it,
# and with the version as their Makefile sets it (git describe: v1.7.35; the Node reports
# containerd://1.7.35, the kubelet drops the v as it parses the version).
bin=$cache/bin/containerd-$CONTAINERD1_VERSION-$(sha256sum < "$0" | cut -c1-16)
want=(containerd containerd-shim-runc-v2 ctr)
complete() { for f in "${want[@]}"; do [ -x "$bin/$f" ] || return 1; done; }
if ! complete; then
  src=$(cd "$root" && go mod download -json "github.com/containerd/containerd@$CONTAINERD1_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -f "$src/go.mod" ] || { log "github.com/containerd/containerd@$CONTAINERD1_VERSION: no module source"; exit 1; }
  cp -r "$src" "$work/src"
  chmod -R u+w "$work/src"
  log "go build containerd $CONTAINERD1_VERSION (${want[*]})"
  mkdir -p "$bin"
  (cd "$work/src" && GOTOOLCHAIN=local GOFLAGS=-trimpath CGO_ENABLED=0 go build -tags "no_btrfs no_devmapper no_zfs no_aufs" \
    -ldflags "-s -w -X github.com/containerd/containerd/version.Version=$CONTAINERD1_VERSION" \
    -o "$bin/" ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr) >&2
  complete
fi

log "building $image from $base"
builder=$(docker run -d --init --privileged --entrypoint sleep "$base" infinity)
# start_containerd waits until the containerd on the PATH answers.
start_containerd='nohup containerd >/var/log/containerd-import.log 2>&1 &
  for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done
  cat /var/log/containerd-import.log; exit 1'
stop_containerd='pkill -x containerd; while pgrep -x containerd >/dev/null; do sleep 0.2; done; rm -f /var/log/containerd-import.log'
docker exec "$builder" bash -c "$start_containerd" >&2
docker exec "$builder" bash -c 'ctr --namespace=k8s.io images export --platform linux/'"$(go env GOARCH)"' /images.tar $(ctr --namespace=k8s.io images list -q | grep -v "^sha256:")' >&2
docker exec "$builder" bash -c "$stop_containerd; rm -rf /var/lib/containerd/*"
docker cp "$bin/containerd" "$builder:/usr/local/bin/containerd"
docker cp "$bin/containerd-shim-runc-v2" "$builder:/usr/local/bin/containerd-shim-runc-v2"
docker cp "$bin/ctr" "$builder:/usr/local/bin/ctr"
docker exec "$builder" bash -c "$start_containerd" >&2
docker exec "$builder" bash -c 'containerd --version | grep -q " '"$CONTAINERD1_VERSION"' " && ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned --no-unpack --digests /images.tar >/dev/null && rm /images.tar' >&2
docker exec "$builder" bash -c "$stop_containerd"
# enable_cdi = false is 1.7's default (pkg/cri/config/config_unix.go); written out so that a
# reader of the node's configuration sees it.
# TOML allows a table once: the key goes under kind's own CRI section.
docker exec "$builder" bash -c 'sed -i "/^\[plugins\.\"io\.containerd\.grpc\.v1\.cri\"\]\$/a\  enable_cdi = false" /etc/containerd/config.toml
  grep -q "^  enable_cdi = false\$" /etc/containerd/config.toml && containerd config dump | grep -q "enable_cdi = false"' >&2
docker commit \
  --change 'ENTRYPOINT ["/usr/local/bin/accel-dra-node-entrypoint", "/sbin/init"]' \
  --change 'CMD []' "$builder" "$image" >/dev/null
docker rm -f "$builder" >/dev/null
builder=""
docker images --format '{{.Repository}}:{{.Tag}}' accel-dra.local/kind-node-containerd1 | grep -vx "$image" | xargs -r docker rmi >/dev/null 2>&1 || true
echo "$image"
