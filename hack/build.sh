#!/usr/bin/env bash
# Builds accel-dra's binaries for every platform in PLATFORMS. `make build` and the Dockerfile
# both run this script, so the binaries in an image are built exactly as CI builds them.
#
#   PLATFORMS  space-separated os/arch list (default "linux/amd64 linux/arm64")
#   BIN        output directory (default ./bin): BIN/<os>_<arch>/<binary> for every platform,
#              and BIN/<binary> as well for the host's platform, which is what the e2e tests,
#              the demo and the benchmarks run (ACCEL_DRA_BIN_DIR=BIN)
#   GO         the go command (default go)
#   VERSION, REVISION  the labels of accel_dra_build_info (default: git describe, git rev-parse)
#   ONLY_<os>_<arch>  build only these binaries (space-separated names) for that platform, e.g.
#              CI's ONLY_linux_arm64: the cgo plugin and its hook
#   CC_<arch>  the C cross compiler for a foreign arch (default CC_arm64=aarch64-linux-gnu-gcc,
#              CC_amd64=x86_64-linux-gnu-gcc, Debian's gcc-aarch64-linux-gnu and
#              gcc-x86-64-linux-gnu packages)
#
# The kubelet plugin needs cgo (go-nvml's types are cgo and it dlopens libnvidia-ml.so.1 at run
# time), so building it for a foreign architecture needs that architecture's C compiler and C
# library; the publisher and accelctl are static and cross compile with Go alone. Without that
# compiler the plugin is skipped for that platform with a message, except in CI (CI=true), where
# it is an error. A binary whose cmd/ directory does not exist is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=${BIN:-$PWD/bin}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
# name, or name=package for a binary of another module: nvidia-cdi-hook is the NVIDIA container
# toolkit's hook, from the toolkit version go.mod requires, which the plugin image ships and the
# plugin installs on the node for the CDI specs' hooks (docs/cdi.md). accel-dra-mock-nvidia is
# the GPU mock's driver tools (nvidia-smi, ...), which the plugin image ships beside the plugin
# for the mock's driver root; containers run it, so it is static (no cgo) like the publisher.
BINARIES=(accel-dra-kubelet-plugin accel-dra-template-publisher accelctl accel-dra-mock-nvidia
  nvidia-cdi-hook=github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook)
CGO_BINARIES=" accel-dra-kubelet-plugin nvidia-cdi-hook "
# The hook runs on the node, outside any image, so it must not depend on the node's C library:
# it is linked statically (go-nvml makes it cgo; the hooks the specs name never load NVML, so
# glibc's warning about dlopen in a static binary does not apply to them).
STATIC_BINARIES=" nvidia-cdi-hook "
# VERSION and REVISION label accel_dra_build_info and `accelctl version` (pkg/buildinfo); by default from git, "dev" and
# "unknown" without it (the image build has no .git: pass them in).
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
# -trimpath: no build machine paths in the binaries; -s -w: no symbol tables or DWARF.
FLAGS=(-trimpath -ldflags "-s -w -X github.com/accel-dra/accel-dra/pkg/buildinfo.Version=$VERSION -X github.com/accel-dra/accel-dra/pkg/buildinfo.Revision=$REVISION")
: "${CC_arm64:=aarch64-linux-gnu-gcc}"
: "${CC_amd64:=x86_64-linux-gnu-gcc}"

host_os=$("$GO" env GOHOSTOS)
host_arch=$("$GO" env GOHOSTARCH)

for platform in $PLATFORMS; do
  os=${platform%/*} arch=${platform#*/}
  if [ -z "$os" ] || [ -z "$arch" ] || [ "$os/$arch" != "$platform" ]; then
    echo "hack/build.sh: bad platform \"$platform\" in PLATFORMS (want os/arch, e.g. linux/arm64)" >&2
    exit 2
  fi
  out=$BIN/${os}_${arch}
  mkdir -p "$out"
  cc=""
  if [ "$os/$arch" != "$host_os/$host_arch" ]; then
    var=CC_$arch
    cc=${!var:-}
  fi
  for entry in "${BINARIES[@]}"; do
    b=${entry%%=*} src=./cmd/$b
    only_var=ONLY_${os}_${arch}
    [ -z "${!only_var:-}" ] || case " ${!only_var} " in *" $b "*) ;; *) continue ;; esac
    [ "$b" = "$entry" ] || src=${entry#*=}
    [ "$b" != "$entry" ] || [ -d "cmd/$b" ] || continue
    cgo=0
    case "$CGO_BINARIES" in *" $b "*) cgo=1 ;; esac
    env=(CGO_ENABLED=$cgo GOOS=$os GOARCH=$arch)
    if [ "$cgo" = 1 ] && [ -n "$cc" ]; then
      if ! command -v "$cc" >/dev/null; then
        pkg=gcc-$(echo "${cc%-gcc}" | tr _ -)
        if [ "${CI:-}" = true ]; then
          echo "hack/build.sh: $b for $platform needs cgo and the C cross compiler $cc, which is not installed (Debian: $pkg)" >&2
          exit 1
        fi
        # A developer without the cross compiler still gets every other binary, and this
        # machine's plugin for the demo and the e2e tests; CI (CI=true) fails instead.
        echo "hack/build.sh: SKIPPING $b for $platform: the C cross compiler $cc is not installed (Debian: apt-get install $pkg; or set CC_$arch)" >&2
        continue
      fi
      env+=(CC="$cc")
    fi
    flags=("${FLAGS[@]}")
    case "$STATIC_BINARIES" in *" $b "*) flags=(-trimpath -tags osusergo,netgo -ldflags "-s -w -extldflags=-static") ;; esac
    exe=""; [ "$os" != windows ] || exe=.exe   # accelctl's release archives (make release)
    echo "go build $b ($platform, ${env[*]})"
    env "${env[@]}" "$GO" build "${flags[@]}" -o "$out/$b$exe" "$src" 2> >(grep -v -e "requires at runtime the shared libraries" -e "_Cfunc_dlopen'" -e "^# $src\$" >&2)
    if [ "$os/$arch" = "$host_os/$host_arch" ]; then
      cp -f "$out/$b" "$BIN/$b"
    fi
  done
done
