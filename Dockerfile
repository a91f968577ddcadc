# accel-dra's images, from one build stage, for linux/amd64 and linux/arm64:
#
#   docker buildx build --platform linux/amd64,linux/arm64 --target plugin    -t REGISTRY/accel-dra-kubelet-plugin:TAG --push .
#   docker buildx build --platform linux/amd64,linux/arm64 --target publisher -t REGISTRY/accel-dra-template-publisher:TAG --push .
#
# (`make image` runs these; `docker build --target plugin .` builds the engine's own platform.)
# `docker build .` builds the last stage, the plugin image. The Helm chart's plugin.image and
# publisher.image default to these repository names.
#
# The build stage runs on the build machine's platform (BUILDPLATFORM) and cross compiles for
# TARGETARCH: Go does that alone for the static binaries, and the cgo plugin uses Debian's C
# cross compiler for the target, so nothing runs under emulation. The binaries are built by
# hack/build.sh, the script `make build` runs: the same flags and cgo settings. CI has no Docker
# engine, so it runs `make build` and never this file.

# No `# syntax=` line: it makes BuildKit pull its frontend from Docker Hub, and every feature used
# here (RUN --mount) is in the frontend built into Docker 20.10 and later, so this also builds
# where no registry is reachable.
#
# Offline (CI, hack/kind/plugin-image.sh): BINARIES=prebuilt takes the binaries `make build`
# made (bin/<os>_<arch>/ in the build context) instead of compiling them again, and
# PLUGIN_BASE_IMAGE / PUBLISHER_BASE_IMAGE name bases built locally from Debian bookworm's
# packages, the release distroless debian12 is made from. The stages are the same.
ARG BINARIES=build
ARG PLUGIN_BASE_IMAGE=gcr.io/distroless/base-debian12
ARG PUBLISHER_BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

# The builder's Debian release must be the runtime's (distroless base-debian12 is Debian 12,
# glibc 2.36, as is bookworm's libc6-dev-arm64-cross): a cgo binary built against a newer glibc
# than the runtime has fails to start.
ARG GO_IMAGE=golang:1.26-bookworm

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
ARG TARGETOS=linux
ARG TARGETARCH
WORKDIR /src
# The toolchain in the image, never a download; no VCS stamping (.git is not in the context).
ENV GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# The plugin's cgo needs a C compiler and C library for the target; for a foreign target that is
# Debian's cross toolchain (hack/build.sh's CC_<arch> defaults name its compilers).
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked --mount=type=cache,target=/var/lib/apt,sharing=locked \
    set -eu; \
    target=${TARGETARCH:-$(go env GOARCH)}; \
    if [ "$target" != "$(go env GOARCH)" ]; then \
      case "$target" in \
        arm64) pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross";; \
        amd64) pkgs="gcc-x86-64-linux-gnu libc6-dev-amd64-cross";; \
        *) echo "unsupported TARGETARCH $target (linux/amd64 and linux/arm64 are built)" >&2; exit 1;; \
      esac; \
      apt-get update -q && apt-get install -y -q --no-install-recommends $pkgs; \
    fi
COPY go.mod go.sum ./
# go.mod replaces the template reader module with this directory.
COPY api/template/go.mod api/template/go.sum api/template/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The plugin goes to /out/cgo (a glibc base); the static ones (the publisher, accelctl, the hook,
# the GPU mock's tools) to /out/static.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -eu; \
    target=${TARGETARCH:-$(go env GOARCH)}; \
    PLATFORMS="$TARGETOS/$target" BIN=/out/bin hack/build.sh; \
    mkdir -p /out/cgo /out/static; \
    for f in /out/bin/"${TARGETOS}_$target"/*; do \
      case "$(basename "$f")" in accel-dra-kubelet-plugin) mv "$f" /out/cgo/;; *) mv "$f" /out/static/;; esac; \
    done; \
    test -x /out/cgo/accel-dra-kubelet-plugin

# The same layout from binaries `make build` made (BINARIES=prebuilt; the context holds
# bin/<os>_<arch>/).
FROM scratch AS prebuilt
ARG TARGETOS=linux
ARG TARGETARCH
COPY bin/${TARGETOS}_${TARGETARCH}/accel-dra-kubelet-plugin /out/cgo/
COPY bin/${TARGETOS}_${TARGETARCH}/accel-dra-template-publisher bin/${TARGETOS}_${TARGETARCH}/accelctl bin/${TARGETOS}_${TARGETARCH}/nvidia-cdi-hook bin/${TARGETOS}_${TARGETARCH}/accel-dra-mock-nvidia /out/static/

FROM ${BINARIES} AS binaries

# The template publisher (and accelctl): static binaries on a static, non-root base.
FROM ${PUBLISHER_BASE_IMAGE} AS publisher
COPY --from=binaries /out/static/accel-dra-template-publisher /out/static/accelctl /usr/bin/
USER 65532:65532
ENTRYPOINT ["/usr/bin/accel-dra-template-publisher"]

# The kubelet plugin: glibc for cgo and for the host's libnvidia-ml.so.1, which it dlopens by
# its full path under the driver root the chart mounts (never through LD_LIBRARY_PATH, which
# would make this image's loader take the host's C library too).
#
# It runs as root, which is why this is distroless base and not its :nonroot variant: it creates
# its socket and state under /var/lib/kubelet/plugins and registers in
# /var/lib/kubelet/plugins_registry, writes CDI specs to /var/run/cdi (all root-owned host
# directories, mode 0750/0755, mounted from the host), and with the NVML backend opens
# /dev/nvidiactl and /dev/nvidia*, which are root-only on most hosts. The chart adds
# `privileged: true` for the device cgroup; its mock values drop that.
FROM ${PLUGIN_BASE_IMAGE} AS plugin
COPY --from=binaries /out/cgo/ /usr/bin/
# The NVIDIA toolkit's hook, which the GPU specs' createContainer hooks run; the plugin copies
# it onto the node (docs/cdi.md), so nodes need no toolkit of their own.
COPY --from=binaries /out/static/nvidia-cdi-hook /usr/bin/
# The GPU mock's driver tools (static): the mock backend's driver root holds them as nvidia-smi
# and the other driver binaries, which containers on mock nodes run (docs/install.md).
COPY --from=binaries /out/static/accel-dra-mock-nvidia /usr/bin/
USER 0:0
ENTRYPOINT ["/usr/bin/accel-dra-kubelet-plugin"]
