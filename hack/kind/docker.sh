#!/usr/bin/env bash
# Makes sure a Docker engine answers, for hack/kind/up.sh and the kind e2e tests.
#
#   hack/kind/docker.sh start   # an engine that answers is used as it is; otherwise, as root
#                               # with dockerd installed (CI installs Debian's docker.io), start
#                               # one and print its PID (stop it with `hack/kind/docker.sh stop`)
#   hack/kind/docker.sh stop    # stops the engine `start` started, and only that one
#   hack/kind/docker.sh check   # exit 0 if an engine answers
#
# The engine it starts keeps its images under the cache ($ACCEL_DRA_CACHE/docker), so that a
# node image built once is there on the next run, and leaves the machine's IP forwarding alone
# (--ip-forward=false: kind's nodes share one bridge and need no forwarding).
#
# Machines whose capability bounding set lacks a capability runc knows (CAP_SYS_RESOURCE on
# the CI machines) cannot start privileged containers ("unable to apply caps"); there the
# engine gets hack/kind/runcwrap as its default runtime, which leaves the missing capabilities
# out. On a machine with the full set nothing of that happens.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${ACCEL_DRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accel-dra}
state=$cache/dockerd
log() { echo "docker.sh: $*" >&2; }

answers() { docker info >/dev/null 2>&1; }

case "${1:-}" in
check)
  answers
  ;;
start)
  if answers; then exit 0; fi
  if ! command -v dockerd >/dev/null || [ "$(id -u)" != 0 ]; then
    log "no Docker engine answers, and this is not root with dockerd installed: install Docker (Debian: apt-get install docker.io) and start it"
    exit 1
  fi
  mkdir -p "$state" "$cache/docker"
  args=(--data-root "$cache/docker" --exec-root /run/accel-dra-docker --pidfile "$state/dockerd.pid"
    --ip-forward=false --log-level warn)
  (cd "$root" && CGO_ENABLED=0 GOFLAGS=-trimpath go build -o "$state/runcwrap" ./hack/kind/runcwrap)
  missing=$("$state/runcwrap" --missing)
  if [ -n "$missing" ]; then
    log "the capability bounding set lacks $missing: the engine runs runc through hack/kind/runcwrap"
    args+=(--add-runtime "runcwrap=$state/runcwrap" --default-runtime runcwrap)
  fi
  setsid dockerd "${args[@]}" >"$state/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 100); do
    if answers; then cat "$state/dockerd.pid"; echo; exit 0; fi
    sleep 0.2
  done
  log "dockerd did not answer within 20 s:"; tail -n 20 "$state/dockerd.log" >&2
  exit 1
  ;;
stop)
  [ -f "$state/dockerd.pid" ] || exit 0
  pid=$(cat "$state/dockerd.pid")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$state/dockerd.pid"
  ;;
*)
  echo "usage: $0 start|stop|check" >&2; exit 2
  ;;
esac
