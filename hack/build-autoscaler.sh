#!/usr/bin/env bash
# Builds the real Cluster Autoscaler (clusterapi provider) four ways from the pinned, unmodified
# sources in third_party/cluster-autoscaler and third_party/cluster-autoscaler-1.36 (see their
# READMEs), caches the binaries by the hash of everything they are built from, and prints the
# directory that holds them:
#
#   cluster-autoscaler-released   a released autoscaler (the newest 1.36.x tag at hand) as tagged:
#                                 what platform teams run today
#   cluster-autoscaler-pinned     as pinned (synthetic template pool with resourceSliceCount 0)
#   cluster-autoscaler-slicefix   with hack/autoscaler/slice-count-fix.patch: the merged,
#                                 unreleased fix (upstream PR 10200, resourceSliceCount 1) only
#   cluster-autoscaler-accel-dra  with slice-count-fix.patch and then
#                                 hack/autoscaler/accel-dra-template.patch: the provider builds
#                                 template nodes' ResourceSlices from the versioned
#                                 capacity.cluster-autoscaler.kubernetes.io/dra-resource-slices
#                                 annotation (the change proposed upstream, docs/upstream-proposal.md)
#
#   hack/build-autoscaler.sh           # build (or reuse) and print the bin dir
#   hack/build-autoscaler.sh --test    # also check that both patches apply with git apply
#                                      # --check, run the patched provider's unit tests and
#                                      # fuzz its annotation decoder for $AUTOSCALER_FUZZTIME (20s)
#
# Sources: $AUTOSCALER_SRC (default third_party/cluster-autoscaler of this repository) and
# $AUTOSCALER_RELEASED_SRC (default third_party/cluster-autoscaler-1.36).
# Cache: $ACCEL_DRA_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/accel-dra).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
src=${AUTOSCALER_SRC:-$repo/third_party/cluster-autoscaler}
src=$(cd "$src" && pwd)
released_src=${AUTOSCALER_RELEASED_SRC:-$repo/third_party/cluster-autoscaler-1.36}
released_src=$(cd "$released_src" && pwd)
run_tests=false
[ "${1:-}" = --test ] && run_tests=true

log() { echo "build-autoscaler: $*" >&2; }
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

# Everything the binaries are built from: the sources, the patches, the Go release. Any change gives a new directory; old ones stay until the cache is cleared.
key=$(
  {
    (cd "$src" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
    (cd "$released_src" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
    (cd "$repo" && sha256sum hack/autoscaler/*.patch)
    go version
  } | sha256sum | cut -c1-16
)
cache=${ACCEL_DRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accel-dra}
bindir="$cache/bin/cluster-autoscaler-$key"
variants=(released pinned slicefix accel-dra)

complete() {
  for v in "${variants[@]}"; do [ -x "$bindir/cluster-autoscaler-$v" ] || return 1; done
}
if complete && ! $run_tests; then echo "$bindir"; exit 0; fi

mkdir -p "$bindir"
# Concurrent runs (parallel test packages, a second shell) would write the same .tmp files; the
# later one waits here and then finds the binaries built.
exec 9>"$bindir/.lock"
if command -v flock >/dev/null; then
  flock 9 || { log "waiting for the build lock failed"; exit 1; }
  if complete && ! $run_tests; then echo "$bindir"; exit 0; fi
fi
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$src/core" "$work/core"
chmod -R u+w "$work"

# prepare VARIANT PATCH...: a copy of the autoscaler module with the patches applied in order,
# each first checked with git apply --check, as an upstream reviewer would apply it ($work is
# outside any git repository, so git apply works on the plain files).
prepare() {
  local v=$1; shift
  cp -r "$src/autoscaler" "$work/$v"
  chmod -R u+w "$work/$v"
  cd "$work/$v"
  for p in "$@"; do
    git apply --check "$repo/hack/autoscaler/$p" || { log "$p does not apply to the pinned sources (after: ${*})"; exit 1; }
    git apply "$repo/hack/autoscaler/$p"
  done
  go mod edit -replace "sigs.k8s.io/cluster-autoscaler=$work/core"
}

for v in "${variants[@]}"; do
  case $v in
    # One module of its own (its apis module is replaced by ./apis), no patch.
    released) cp -r "$released_src/autoscaler" "$work/$v" && chmod -R u+w "$work/$v" && cd "$work/$v" ;;
    pinned) prepare "$v" ;;
    slicefix) prepare "$v" slice-count-fix.patch ;;
    accel-dra) prepare "$v" slice-count-fix.patch accel-dra-template.patch ;;
  esac
  if [ ! -x "$bindir/cluster-autoscaler-$v" ]; then
    log "go build cluster-autoscaler-$v (cold: about as long as one Kubernetes component)"
    go build -tags clusterapi -trimpath -ldflags "-s -w" -o "$bindir/cluster-autoscaler-$v.tmp" .
    mv "$bindir/cluster-autoscaler-$v.tmp" "$bindir/cluster-autoscaler-$v"
  fi
done

if $run_tests; then
  # The provider's tests are behind the clusterapi build tag, as its sources are.
  log "go test the patched clusterapi provider"
  cd "$work/accel-dra" && go test -count=1 -tags clusterapi ./cloudprovider/clusterapi/ >&2
  # -fuzz builds every package of the test with coverage instrumentation, a second compile of
  # the dependencies; AUTOSCALER_FUZZTIME=0 skips it (the seed corpus ran with the tests above).
  if [ "${AUTOSCALER_FUZZTIME:-20s}" != 0 ]; then
    log "fuzz the dra-resource-slices decoder for ${AUTOSCALER_FUZZTIME:-20s}"
    go test -tags clusterapi -run '^$' -fuzz '^FuzzDecodeDRAResourceSlices$' -fuzztime "${AUTOSCALER_FUZZTIME:-20s}" ./cloudprovider/clusterapi/ >&2
  fi
fi
echo "$bindir"
