# syntax=docker/dockerfile:1
#
# accel-dra's images, from one build stage:
#
#   docker build --target plugin    -t accel-dra-kubelet-plugin:dev .
#   docker build --target publisher -t accel-dra-template-publisher:dev .
#
# `docker build .` (make image) builds the last stage, the plugin image. The Helm chart's
# plugin.image and publisher.image default to these repository names.
#
# The binaries are built exactly as `make build` builds them: the same loop, flags and cgo
# settings (see the Makefile's build target). CI has no Docker engine, so it runs `make build`
# and never this file; keep the two in step.

# The builder's Debian release must be the runtime's (distroless base-debian12 is Debian 12,
# glibc 2.36): a cgo binary built against a newer glibc than the runtime has fails to start.
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
WORKDIR /src
# The toolchain in the image, never a download; no VCS stamping (.git is not in the context).
ENV GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
# go.mod replaces the template reader module with this directory.
COPY api/template/go.mod api/template/go.sum api/template/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The kubelet plugin needs cgo: go-nvml's types are cgo and it dlopens libnvidia-ml.so.1 at run
# time. The publisher and accelctl are static. A binary whose cmd/ directory does not exist yet
# is skipped, as `make build` skips it.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -eu; \
    mkdir -p /out/cgo /out/static; \
    for b in accel-dra-kubelet-plugin accel-dra-template-publisher accelctl; do \
      if [ ! -d "cmd/$b" ]; then echo "skipping $b: no cmd/$b"; continue; fi; \
      case "$b" in accel-dra-kubelet-plugin) cgo=1; out=/out/cgo;; *) cgo=0; out=/out/static;; esac; \
      echo "go build $b (CGO_ENABLED=$cgo)"; \
      CGO_ENABLED=$cgo go build -trimpath -ldflags "-s -w" -o "$out/$b" "./cmd/$b"; \
    done; \
    test -x /out/cgo/accel-dra-kubelet-plugin

# The template publisher (and accelctl): static binaries on a static, non-root base.
FROM gcr.io/distroless/static-debian12:nonroot AS publisher
COPY --from=build /out/static/ /usr/bin/
USER 65532:65532
ENTRYPOINT ["/usr/bin/accel-dra-template-publisher"]

# The kubelet plugin: glibc for cgo and for the host's libnvidia-ml.so.1, which it dlopens (the
# chart mounts the host's driver root and points LD_LIBRARY_PATH there).
#
# It runs as root, which is why this is distroless base and not its :nonroot variant: it creates
# its socket and state under /var/lib/kubelet/plugins and registers in
# /var/lib/kubelet/plugins_registry, writes CDI specs to /var/run/cdi (all root-owned host
# directories, mode 0750/0755, mounted from the host), and with the NVML backend opens
# /dev/nvidiactl and /dev/nvidia*, which are root-only on most hosts. The chart adds
# `privileged: true` for the device cgroup; its mock values drop that.
FROM gcr.io/distroless/base-debian12 AS plugin
COPY --from=build /out/cgo/ /usr/bin/
USER 0:0
ENTRYPOINT ["/usr/bin/accel-dra-kubelet-plugin"]
