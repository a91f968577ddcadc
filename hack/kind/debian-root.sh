#!/usr/bin/env bash
# Makes a Debian root file system of some packages, unpacked without running their scripts
# (mmdebstrap's extract variant), as a tar, and prints the tar's path:
#
#   hack/kind/debian-root.sh trixie libc6     # Debian trixie's C library, about 3 s and 14 MB
#
# e2e/kind makes NVIDIA driver roots of it whose C library differs from the plugin image's
# (bookworm's), as a host's does. The tar is cached under $ACCEL_DRA_CACHE (default
# ~/.cache/accel-dra) by the suite, the packages and this script's text; Debian's mirror may
# have moved on since, which is no matter for a root that only has to differ from bookworm.
# Needs mmdebstrap, as root.
set -euo pipefail
[ $# = 2 ] || { echo "usage: $0 <suite> <package,package...>" >&2; exit 2; }
suite=$1 packages=$2
cache=${ACCEL_DRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accel-dra}
key=$( { echo "$suite extract $packages"; cat "$0"; } | sha256sum | cut -c1-16)
dir=$cache/debian-roots
tar=$dir/$suite-$key.tar
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [ ! -s "$tar" ]; then
  echo "debian-root: mmdebstrap $suite ($packages)" >&2
  # mmdebstrap picks the output's format by its name's ending.
  tmp=$dir/.$suite-$key.tmp.tar
  mmdebstrap --quiet --variant=extract --include="$packages" "$suite" "$tmp" >&2
  mv "$tmp" "$tar"
fi
echo "$tar"
