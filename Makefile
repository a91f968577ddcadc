# accel-dra: the targets a developer and CI use. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
BIN ?= $(CURDIR)/bin
# Every platform `make build` builds (hack/build.sh): bin/<os>_<arch>/<binary> for each, and
# bin/<binary> for this machine's, which the e2e tests, the demo and the benchmarks run. The
# plugin's arm64 build needs the C cross compiler aarch64-linux-gnu-gcc (Debian:
# gcc-aarch64-linux-gnu); `make build PLATFORMS=linux/amd64` builds without it.
PLATFORMS ?= linux/amd64 linux/arm64
# Every go command here builds with -trimpath, as `make build` (and so the Dockerfile) does: a
# package compiled with and without it are two entries in the build cache, so without this a
# cold `make build test` compiled every dependency twice per platform (build, then vet, e2e and
# the arm64 tests). The e2e harness finds the module root without source paths
# (e2e/cluster/binaries.go).
export GOFLAGS += -trimpath

.PHONY: all build unit test test-arm64 e2e demo bench k8s-binaries fmt vet image chart chart-push release clean

all: build

# The plugin is built with cgo (go-nvml), the others static; the Dockerfile runs the same script.
build:
	GO=$(GO) BIN=$(BIN) PLATFORMS="$(PLATFORMS)" hack/build.sh

# Unit tests: every package, with the race detector (which needs cgo). The reader module, on its
# own (older) k8s.io/api, starts no goroutines: its tests run without the race detector, on the
# packages `make vet` compiled, instead of compiling its 140 dependencies once more for it.
unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...
	cd api/template && $(GO) test -count=1 ./...

# The unit tests of every package the kubelet plugin links, cross compiled for linux/arm64 and
# run under qemu-user emulation (Debian: gcc-aarch64-linux-gnu, qemu-user, libc6-arm64-cross).
# Without those tools it says so and passes, except in CI (CI=true), where it fails.
test-arm64:
	GO=$(GO) hack/test-arm64.sh

# Control plane, kubelet and etcd binaries built from the Go module proxy, cached by version.
k8s-binaries:
	hack/build-k8s.sh

# End-to-end tests on a real control plane and real kubelets (no Docker).
e2e: build k8s-binaries
	KUBE_BIN_DIR=$$(hack/build-k8s.sh) AUTOSCALER_BIN_DIR=$$(hack/build-autoscaler.sh) ACCEL_DRA_BIN_DIR=$(BIN) \
		$(GO) test -tags e2e -count=1 -timeout 60m -v ./e2e/...

# The whole test suite, as CI runs it.
test: vet unit test-arm64 e2e

# A local cluster with the plugin on a mock profile and a sample workload; Ctrl-C stops it.
# `make demo DEMO_ARGS=--once` prints and exits.
demo: build k8s-binaries
	KUBE_BIN_DIR=$$(hack/build-k8s.sh --with-kubectl) ACCEL_DRA_BIN_DIR=$(BIN) $(GO) run ./hack/demo $(DEMO_ARGS)

# Benchmarks; medians over BENCH_COUNT runs are printed by hack/bench.sh.
bench: build k8s-binaries
	KUBE_BIN_DIR=$$(hack/build-k8s.sh) ACCEL_DRA_BIN_DIR=$(BIN) hack/bench.sh

fmt:
	gofmt -l -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/...
	cd api/template && $(GO) vet ./...

# Needs a Docker engine with buildx (the CI machine has none; CI runs `make build`, which runs
# the same hack/build.sh). One multi-platform image per target, for both architectures; the
# build stage runs on the build machine's own platform and cross compiles, nothing is emulated:
#
#   docker buildx build --platform linux/amd64,linux/arm64 --target plugin \
#       -t REGISTRY/accel-dra-kubelet-plugin:TAG --push .
#
# IMAGE_PLATFORMS is the --platform list; a multi-platform image must be pushed (IMAGE_PUSH=1,
# IMAGE_REGISTRY=...) or the engine must use the containerd image store to keep it locally.
comma := ,
IMAGE_PLATFORMS ?= $(subst $(eval) ,$(comma),$(strip $(PLATFORMS)))
IMAGE_REGISTRY ?=
# The release is the chart's version; its images are tagged v<version>, which is the chart's
# default image tag (deployments/helm's TestImageTagsFollowTheRelease).
VERSION := $(shell sed -n 's/^version: *//p' deployments/helm/accel-dra/Chart.yaml)
IMAGE_TAG ?= v$(VERSION)
image:
	docker buildx build --platform $(IMAGE_PLATFORMS) --target plugin \
		-t $(IMAGE_REGISTRY)accel-dra-kubelet-plugin:$(IMAGE_TAG) $(if $(IMAGE_PUSH),--push) .
	docker buildx build --platform $(IMAGE_PLATFORMS) --target publisher \
		-t $(IMAGE_REGISTRY)accel-dra-template-publisher:$(IMAGE_TAG) $(if $(IMAGE_PUSH),--push) .

# The chart as bin/accel-dra-<version>.tgz (helm package, with Helm's own code: no helm binary).
chart:
	$(GO) run ./hack/chart package $(BIN)

# Pushes that package to the OCI repository CHART_REGISTRY (oci://registry.example/charts), with
# the credentials of `helm registry login`; CHART_PLAIN_HTTP=1 for a registry without TLS.
# Users then install it with: helm install accel-dra oci://registry.example/charts/accel-dra --version <version>
CHART_REGISTRY ?=
chart-push: chart
	@test -n "$(CHART_REGISTRY)" || { echo "set CHART_REGISTRY=oci://<registry>/<path>"; exit 2; }
	$(GO) run ./hack/chart push $(if $(CHART_PLAIN_HTTP),--plain-http) $(BIN)/accel-dra-$(VERSION).tgz $(CHART_REGISTRY)

# accelctl's release archives, in which it is the kubectl plugin kubectl-accel, and their krew
# manifest (hack/krew, docs/accelctl.md): $(BIN)/release/kubectl-accel_v<version>_<os>_<arch>.tar.gz
# for each RELEASE_PLATFORMS, and $(BIN)/release/accel.yaml, whose uri are RELEASE_URL/<archive>;
# upload the archives there. The archives are reproducible, and the manifest is verified against
# them (sha256, and `kubectl-accel version` of this machine's archive) before the target ends.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
RELEASE_URL ?= https://github.com/accel-dra/accel-dra/releases/download/v$(VERSION)
release:
	GO=$(GO) BIN=$(BIN) PLATFORMS="$(RELEASE_PLATFORMS)" VERSION=v$(VERSION) \
		$(foreach p,$(RELEASE_PLATFORMS),ONLY_$(subst /,_,$(p))=accelctl) hack/build.sh
	$(GO) run ./hack/krew pack -bin $(BIN) -version v$(VERSION) -url $(RELEASE_URL) -out $(BIN)/release $(RELEASE_PLATFORMS)
	$(GO) run ./hack/krew verify $(BIN)/release/accel.yaml

clean:
	rm -rf $(BIN)
