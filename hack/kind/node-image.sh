#!/usr/bin/env bash
# Builds the offline kind node image and prints its name. Nothing is downloaded but Debian's
# packages (apt, through mmdebstrap) and Go modules (the proxy): the node's root is Debian
# bookworm; containerd, runc, crictl and the CNI plugins come from hack/kind/tools.sh;
# Kubernetes (kubeadm, kubelet, kubectl and the control plane's images) is the project's own
# v1.37.1 build (hack/build-k8s.sh); the control-plane, etcd, kube-proxy and pause images are
# made here from those binaries. kind's published node images are the online alternative
# (hack/kind/up.sh --images=published).
#
# The image is cached in the Docker engine under a tag that hashes everything it is built from,
# so a second run prints the name at once; images of older hashes are removed.
#
# Needs: a Docker engine (hack/kind/docker.sh starts one in CI), mmdebstrap, gcc with a static
# C library (the pause binary), libseccomp-dev (runc), as root for mmdebstrap.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../versions.env
source "$root/hack/versions.env"
log() { echo "node-image: $*" >&2; }

cache=${ACCEL_DRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accel-dra}
tools=$("$here/tools.sh")
kube=$("$root/hack/build-k8s.sh" --for-kind)
kinddir=$(cd "$root" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
kubedir=$(cd "$root" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$kinddir/images/base/files" ] && [ -f "$kubedir/build/pause/linux/pause.c" ] || { log "kind or kubernetes module sources missing"; exit 1; }

# What kubeadm v1.37.1 asks for (cmd/kubeadm/app/constants): its etcd is the v3.7.0 we build.
registry=registry.k8s.io
pause_image=$registry/pause:3.10.2
etcd_image=$registry/etcd:${ETCD_VERSION#v}-0
grep -q "DefaultEtcdVersion = \"${ETCD_VERSION#v}-0\"" "$kubedir/cmd/kubeadm/app/constants/constants.go" \
  && grep -q 'PauseVersion = "3.10.2"' "$kubedir/cmd/kubeadm/app/constants/constants.go" \
  || { log "kubeadm $KUBE_VERSION wants other etcd or pause versions than this script builds"; exit 1; }

packages=systemd,systemd-sysv,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,jq,procps,curl
key=$( {
  cat "$0" "$root/hack/versions.env"; echo "$packages $tools $kube"
  (cd "$here/node" && find . -type f | sort | xargs sha256sum)
  (cd "$root/hack/kind/runcwrap" && find . -name '*.go' | sort | xargs sha256sum)
  for b in kubeadm kubelet kubectl kube-proxy kube-apiserver kube-controller-manager kube-scheduler etcd; do sha256sum < "$kube/$b"; done
} | sha256sum | cut -c1-16)
image=accel-dra.local/kind-node:$KUBE_VERSION-$key
if docker image inspect "$image" >/dev/null 2>&1; then echo "$image"; exit 0; fi

work=$(mktemp -d)
builder=""
cleanup() { [ -z "$builder" ] || docker rm -f "$builder" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

# The Debian root, cached by its package list: mmdebstrap takes about 30-100 s.
pkgkey=$(echo "bookworm minbase $packages" | sha256sum | cut -c1-16)
rootimg=accel-dra.local/kind-node-root:$pkgkey
if ! docker image inspect "$rootimg" >/dev/null 2>&1; then
  log "mmdebstrap bookworm ($packages)"
  mmdebstrap --quiet --variant=minbase --include="$packages" bookworm "$work/root.tar" >&2
  docker import "$work/root.tar" "$rootimg" >/dev/null
  rm -f "$work/root.tar"
fi

# The node's build context.
ctx=$work/node
mkdir -p "$ctx"/{bin,sbin,cni,kube}
cp -r "$here/node/." "$ctx/"
cp -r "$kinddir/images/base/files" "$ctx/kind-base"
rm -rf "$ctx/kind-base/LICENSES"
chmod -R u+w,go-w,a+rX "$ctx/kind-base"
find "$ctx/kind-base" -type f -exec chmod 0644 {} +
chmod 0755 "$ctx"/kind-base/usr/local/bin/* "$ctx"/kind-base/kind/bin/*
echo -n "$KUBE_VERSION" > "$ctx/files/kind/version"
cp "$tools"/node/{containerd,containerd-shim-runc-v2,ctr,crictl} "$ctx/bin/"
(cd "$root" && CGO_ENABLED=0 GOFLAGS=-trimpath go build -ldflags "-s -w" -o "$ctx/bin/runcwrap" ./hack/kind/runcwrap)
cp "$tools/node/runc" "$ctx/sbin/"
cp "$tools"/node/{bridge,host-local,loopback,portmap} "$ctx/cni/"
cp "$kube"/{kubeadm,kubelet,kubectl} "$ctx/kube/"
log "docker build $image (node)"
docker build -q --build-arg ROOT_IMAGE="$rootimg" --build-arg PAUSE_IMAGE="$pause_image" -t "$image-base" "$ctx" >/dev/null

# The images kubeadm runs, from the same binaries; kube-proxy needs iptables and conntrack, so
# it is built on the node's Debian root, the others are static binaries on an empty image.
img() { # img <name> <from> <binary...>
  local name=$1 from=$2; shift 2
  local d=$work/img-${name//[\/:]/_}
  mkdir -p "$d/rootfs/usr/local/bin" "$d/rootfs/tmp" "$d/rootfs/etc"
  chmod 1777 "$d/rootfs/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' > "$d/rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$d/rootfs/etc/group"
  cp "$@" "$d/rootfs/usr/local/bin/"
  {
    echo "FROM $from"
    echo "COPY rootfs/ /"
    echo "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
  } > "$d/Dockerfile"
  [ "$name" != "$pause_image" ] || echo 'ENTRYPOINT ["/usr/local/bin/pause"]' >> "$d/Dockerfile"
  docker build -q -t "$name" "$d" >/dev/null
}
gcc -Os -static -o "$work/pause" -DVERSION=3.10.2 "$kubedir/build/pause/linux/pause.c"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  img "$registry/$c:$KUBE_VERSION" scratch "$kube/$c"
done
img "$registry/kube-proxy:$KUBE_VERSION" "$rootimg" "$kube/kube-proxy"
img "$etcd_image" scratch "$kube/etcd"
img "$pause_image" scratch "$work/pause"
images=("$registry/kube-apiserver:$KUBE_VERSION" "$registry/kube-controller-manager:$KUBE_VERSION"
  "$registry/kube-scheduler:$KUBE_VERSION" "$registry/kube-proxy:$KUBE_VERSION" "$etcd_image" "$pause_image")

# Preload them into the node's containerd, as `kind build node-image` does: containerd runs in a
# container of the node image just for the import, which is then committed.
log "importing ${#images[@]} images into the node's containerd"
builder=$(docker run -d --init --privileged --entrypoint sleep "$image-base" infinity)
docker exec "$builder" bash -c 'nohup containerd >/var/log/containerd-import.log 2>&1 &
  for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done
  cat /var/log/containerd-import.log; exit 1' >&2
docker save "${images[@]}" | docker exec -i "$builder" ctr --namespace=k8s.io images import \
  --label=io.cri-containerd.pinned=pinned --no-unpack --digests - >/dev/null
docker exec "$builder" bash -c 'pkill containerd; while pgrep -x containerd >/dev/null; do sleep 0.2; done; rm -f /var/log/containerd-import.log' 
docker commit \
  --change 'ENTRYPOINT ["/usr/local/bin/accel-dra-node-entrypoint", "/sbin/init"]' \
  --change 'CMD []' "$builder" "$image" >/dev/null
docker rm -f "$builder" >/dev/null
builder=""
docker rmi "$image-base" "${images[@]}" >/dev/null
# Older builds of this image are of no use any more.
docker images --format '{{.Repository}}:{{.Tag}}' accel-dra.local/kind-node | grep -vx "$image" | xargs -r docker rmi >/dev/null 2>&1 || true
echo "$image"
