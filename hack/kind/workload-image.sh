#!/usr/bin/env bash
# Builds, without a registry, the image the kind tests' and the sample's containers run, and
# prints its name: Debian bookworm's busybox (a shell and the usual tools), glibc and ldconfig
# (the CDI hooks update the container's ld cache, and tests read it with `ldconfig -p`). Cached
# in the Docker engine by the package list.
set -euo pipefail
packages=busybox-static,libc-bin,libc6,libgcc-s1
key=$( { echo "bookworm extract $packages"; cat "$0"; } | sha256sum | cut -c1-16)
image=accel-dra.local/workload:$key
if docker image inspect "$image" >/dev/null 2>&1; then echo "$image"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "workload-image: mmdebstrap bookworm ($packages)" >&2
mmdebstrap --quiet --variant=extract --include="$packages" bookworm "$work/root.tar" >&2
docker import "$work/root.tar" "$image-root" >/dev/null
# busybox's applets as commands; ldconfig's cache made once, as dpkg's trigger would.
printf 'FROM %s\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nRUN ["/sbin/ldconfig"]\nENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n' "$image-root" > "$work/Dockerfile"
docker build -q -t "$image" "$work" >/dev/null
docker rmi "$image-root" >/dev/null
echo "$image"
