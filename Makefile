# accel-dra: the targets a developer and CI use. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
BIN ?= $(CURDIR)/bin
BINARIES := accel-dra-kubelet-plugin accel-dra-template-publisher accelctl
GO_BUILD_FLAGS ?= -trimpath -ldflags "-s -w"
# The kubelet plugin needs cgo: go-nvml's types are cgo and it dlopens libnvidia-ml at run time.
# The other binaries are static. The Dockerfile builds them the same way.
CGO_BINARIES := accel-dra-kubelet-plugin

.PHONY: all build unit test e2e demo bench k8s-binaries fmt vet image clean

all: build

build:
	@mkdir -p $(BIN)
	@for b in $(BINARIES); do \
		cgo=0; case " $(CGO_BINARIES) " in *" $$b "*) cgo=1;; esac; \
		if [ -d cmd/$$b ]; then echo "go build $$b (CGO_ENABLED=$$cgo)"; CGO_ENABLED=$$cgo $(GO) build $(GO_BUILD_FLAGS) -o $(BIN)/$$b ./cmd/$$b || exit 1; fi; \
	done

# Unit tests: every package, with the race detector (which needs cgo).
unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...
	cd api/template && CGO_ENABLED=1 $(GO) test -race -count=1 ./... # the reader module, on its own (older) k8s.io/api

# Control plane, kubelet and etcd binaries built from the Go module proxy, cached by version.
k8s-binaries:
	hack/build-k8s.sh

# End-to-end tests on a real control plane and real kubelets (no Docker).
e2e: build k8s-binaries
	KUBE_BIN_DIR=$$(hack/build-k8s.sh) AUTOSCALER_BIN_DIR=$$(hack/build-autoscaler.sh) ACCEL_DRA_BIN_DIR=$(BIN) \
		$(GO) test -tags e2e -count=1 -timeout 45m -v ./e2e/...

# The whole test suite, as CI runs it.
test: vet unit e2e

# A local cluster with the plugin on a mock profile and a sample workload; Ctrl-C stops it.
# `make demo DEMO_ARGS=--once` prints and exits.
demo: build k8s-binaries
	KUBE_BIN_DIR=$$(hack/build-k8s.sh) ACCEL_DRA_BIN_DIR=$(BIN) $(GO) run ./hack/demo $(DEMO_ARGS)

# Benchmarks; medians over BENCH_COUNT runs are printed by hack/bench.sh.
bench: build k8s-binaries
	KUBE_BIN_DIR=$$(hack/build-k8s.sh) ACCEL_DRA_BIN_DIR=$(BIN) hack/bench.sh

fmt:
	gofmt -l -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/...
	cd api/template && $(GO) vet ./...

# Needs a Docker engine (the CI machine has none; CI runs `make build`, the same go build).
image:
	docker build --target plugin -t accel-dra-kubelet-plugin:dev .
	docker build --target publisher -t accel-dra-template-publisher:dev .

clean:
	rm -rf $(BIN)
