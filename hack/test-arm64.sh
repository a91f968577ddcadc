#!/usr/bin/env bash
# Runs the unit tests of every package the kubelet plugin links, built for linux/arm64 and run
# under user-mode emulation, so that the arm64 plugin that Grace Hopper / Grace Blackwell nodes
# run is tested and not only built.
#
# Needs (Debian bookworm): gcc-aarch64-linux-gnu (the cgo cross compiler), libc6-arm64-cross
# (the arm64 C library under /usr/aarch64-linux-gnu) and qemu-user (qemu-aarch64). Without them
# it says what is missing and exits 0, except in CI (CI=true), where a missing tool fails.
#
#   GO            the go command (default go)
#   CC_arm64      the C cross compiler (default aarch64-linux-gnu-gcc)
#   QEMU_AARCH64  the emulator (default qemu-aarch64)
#   ARM64_SYSROOT the arm64 C library's root (default /usr/aarch64-linux-gnu)
#   ARM64_PKGS    the packages to test, instead of those the plugin links
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
CC_arm64=${CC_arm64:-aarch64-linux-gnu-gcc}
QEMU_AARCH64=${QEMU_AARCH64:-qemu-aarch64}
ARM64_SYSROOT=${ARM64_SYSROOT:-/usr/aarch64-linux-gnu}

missing=()
command -v "$CC_arm64" >/dev/null || missing+=("$CC_arm64 (gcc-aarch64-linux-gnu)")
command -v "$QEMU_AARCH64" >/dev/null || missing+=("$QEMU_AARCH64 (qemu-user)")
[ -e "$ARM64_SYSROOT/lib/ld-linux-aarch64.so.1" ] || missing+=("$ARM64_SYSROOT/lib/ld-linux-aarch64.so.1 (libc6-arm64-cross)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "hack/test-arm64.sh: cannot run the arm64 unit tests; missing: ${missing[*]}" >&2
  if [ "${CI:-}" = true ]; then
    echo "hack/test-arm64.sh: CI=true, so this is a failure (.ci/run installs them)" >&2
    exit 1
  fi
  echo "hack/test-arm64.sh: SKIPPED (install them with apt to run these tests; CI does)" >&2
  exit 0
fi

# The module's packages that the plugin's binary links and that have tests: the code that runs
# on an arm64 node. Computed, so that a package the plugin starts to link is tested too.
if [ -n "${ARM64_PKGS:-}" ]; then
  read -r -a pkgs <<<"$ARM64_PKGS"
else
  mod=$("$GO" list -m)
  mapfile -t pkgs < <(
    GOOS=linux GOARCH=arm64 CGO_ENABLED=1 "$GO" list -deps \
      -f '{{if and (not .Standard) (or .TestGoFiles .XTestGoFiles)}}{{.ImportPath}}{{end}}' \
      ./cmd/accel-dra-kubelet-plugin | grep "^$mod/" | sort
  )
fi
if [ ${#pkgs[@]} -eq 0 ]; then
  echo "hack/test-arm64.sh: no packages to test" >&2
  exit 1
fi

echo "arm64 unit tests under $("$QEMU_AARCH64" --version | head -1), ${#pkgs[@]} packages:"
printf '  %s\n' "${pkgs[@]}"
# go test cross compiles each test binary and runs it in its package directory through -exec,
# so testdata paths work as they do natively. No race detector: it does not run under qemu-user.
GOOS=linux GOARCH=arm64 CGO_ENABLED=1 CC="$CC_arm64" \
  "$GO" test -count=1 -exec "$QEMU_AARCH64 -L $ARM64_SYSROOT" "${pkgs[@]}"
