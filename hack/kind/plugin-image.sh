#!/usr/bin/env bash
# Builds accel-dra's kubelet plugin image from the Dockerfile's stages without a registry, from
# the binaries `make build` made, and prints its name:
#
#   hack/kind/plugin-image.sh [TAG]     # default tag: a hash of what goes into the image
#
# The Dockerfile's prebuilt stage (BINARIES=prebuilt) takes bin/linux_<arch>/ instead of
# compiling again, and its base is built here from Debian bookworm's packages (mmdebstrap), the
# release distroless base-debian12 is made from: glibc, CA certificates, time zones, and
# /etc/passwd with root and nonroot (65532). The published-image path is the Dockerfile as
# `make image` runs it; this is the path for machines that reach no registry.
#
# BIN (default ./bin) is where `make build` put the binaries. Needs a Docker engine with
# BuildKit (Docker 20.10+'s own, or the buildx plugin) and, once, mmdebstrap as root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
log() { echo "plugin-image: $*" >&2; }
BIN=${BIN:-$root/bin}
arch=$(go env GOARCH)
bins=(accel-dra-kubelet-plugin accel-dra-template-publisher accelctl nvidia-cdi-hook accel-dra-mock-nvidia)
for b in "${bins[@]}"; do
  [ -x "$BIN/linux_$arch/$b" ] || { log "$BIN/linux_$arch/$b is missing: run make build"; exit 1; }
done

# A Docker CLI that builds with BuildKit: the Dockerfile's unused build stage must not run.
buildkit=()
for c in docker /usr/bin/docker; do
  command -v "$c" >/dev/null || continue
  if "$c" buildx version >/dev/null 2>&1; then buildkit=("$c" buildx build --load); break; fi
  v=$("$c" version --format '{{.Client.Version}}' 2>/dev/null || true)
  if [ -n "$v" ] && [ "${v%%.*}" -lt 23 ]; then buildkit=(env DOCKER_BUILDKIT=1 "$c" build); break; fi
done
[ ${#buildkit[@]} -gt 0 ] || { log "no Docker CLI with BuildKit: install the buildx plugin (Debian: docker-buildx)"; exit 1; }

packages=base-files,netbase,tzdata,libc6,libgcc-s1,ca-certificates
basekey=$( { echo "bookworm extract $packages"; sed -n '/^# base image$/,/^# end$/p' "$0"; } | sha256sum | cut -c1-16)
base=accel-dra.local/base-debian12:$basekey
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! docker image inspect "$base" >/dev/null 2>&1; then
  log "mmdebstrap bookworm ($packages)"
  mmdebstrap --quiet --variant=extract --include="$packages" bookworm "$work/root.tar" >&2
  docker import "$work/root.tar" "$base-root" >/dev/null
  mkdir -p "$work/base/etc/ssl/certs"
  # base image
  # ca-certificates' bundle is made by its maintainer script, which the extract variant runs not.
  tar -xOf "$work/root.tar" --wildcards './usr/share/ca-certificates/mozilla/*.crt' > "$work/base/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$work/base/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n' > "$work/base/etc/group"
  printf 'FROM %s\nCOPY etc/ /etc/\n' "$base-root" > "$work/base/Dockerfile"
  # end
  rm -f "$work/root.tar"
  docker build -q -t "$base" "$work/base" >/dev/null
  docker rmi "$base-root" >/dev/null
fi

ctx=$work/ctx
mkdir -p "$ctx/bin/linux_$arch"
for b in "${bins[@]}"; do cp "$BIN/linux_$arch/$b" "$ctx/bin/linux_$arch/"; done
tag=${1:-$( { cat "$root/Dockerfile"; echo "$base"; sha256sum "$ctx/bin/linux_$arch"/*; } | sha256sum | cut -c1-16)}
image=accel-dra-kubelet-plugin:$tag
if docker image inspect "$image" >/dev/null 2>&1 && [ $# = 0 ]; then echo "$image"; exit 0; fi
log "building $image"
"${buildkit[@]}" -q --target plugin --build-arg BINARIES=prebuilt --build-arg PLUGIN_BASE_IMAGE="$base" \
  --build-arg PUBLISHER_BASE_IMAGE="$base" -f "$root/Dockerfile" -t "$image" "$ctx" >/dev/null
echo "$image"
