#!/usr/bin/env bash
# Runs accel-dra's benchmarks against real components and prints per-run results plus medians.
#   BENCH_COUNT   runs of each benchmark (default 5); medians are taken over them
#   BENCH_TIME    -benchtime per run (default 2000x for the node plugin)
#   BENCH_PUBLISHER=0 skips the template publisher's benchmark
#   BENCH_PROFILE_DIR=dir runs the plugin with --profiling and writes 10 s CPU profiles of it and
#                 of the kube-apiserver during each measured loop to dir/<loop>-plugin.pprof and
#                 dir/<loop>-apiserver.pprof
#   BENCH_SCHED=0 skips the scheduling benchmark (e2e/schedbench, docs/scheduling-benchmark.md);
#   SCHED_BENCH_COUNT bursts per fleet size and model (default 1), SCHED_BENCH_NODES fleet sizes
#                 (default 50,200,1000), SCHED_BENCH_MODELS models (default all),
#                 SCHED_BENCH_PODS burst size (default min(600, 6 x nodes)),
#                 SCHED_BENCH_PROFILE_DIR=dir a CPU profile of the scheduler per burst,
#                 SCHED_BENCH_PERCENTAGE_OF_NODES_TO_SCORE the scheduler's percentageOfNodesToScore,
#                 SCHED_BENCH_SCHEDULER_FLAGS extra kube-scheduler flags
set -euo pipefail
cd "$(dirname "$0")/.."
count=${BENCH_COUNT:-5}
btime=${BENCH_TIME:-2000x}
export KUBE_BIN_DIR=${KUBE_BIN_DIR:-$(hack/build-k8s.sh)}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "== node plugin over its gRPC socket, claims in a real apiserver (count=$count, benchtime=$btime)"
go test -tags e2e -run '^$' -bench . -benchtime "$btime" -count "$count" -timeout 60m ./e2e/bench/ | tee -a "$out"
if [ "${BENCH_PUBLISHER:-1}" != 0 ] && [ -d e2e/publisher ] && grep -rq 'func BenchmarkPublisher' e2e/publisher; then
  echo "== template publisher against a real apiserver (count=${PUBLISHER_BENCH_COUNT:-1})"
  go test -tags e2e -run '^$' -bench Publisher -benchtime 1x -count "${PUBLISHER_BENCH_COUNT:-1}" -timeout 60m ./e2e/publisher/ | tee -a "$out"
fi
echo "== MIG (docs/mig.md): dynamic-MIG prepare p50 on the mock, ResourceSlice bytes per GPU in MIG mode"
go test -run '^$' -bench PrepareDynamicMIG -benchtime 300x -count "$count" ./pkg/driver/ | tee -a "$out"
go test -run '^$' -bench SliceBytes -benchtime 1x -count 1 ./pkg/mig/ | tee -a "$out"

if [ "${BENCH_SCHED:-1}" != 0 ]; then
  sched=$(mktemp)
  trap 'rm -f "$out" "$sched"' EXIT
  echo "== scheduling: the real kube-scheduler, fake nodes with the plugin's pools, one-device claims (count=${SCHED_BENCH_COUNT:-1})"
  # The whole output goes to $sched; the terminal gets the results and failures as they come.
  set +e +o pipefail
  go test -tags e2e -run '^$' -bench Scheduling -benchtime 1x -count "${SCHED_BENCH_COUNT:-1}" -timeout 180m ./e2e/schedbench/ 2>&1 \
    | tee "$sched" | grep --line-buffered -E '^(Benchmark|--- FAIL|FAIL|ok|PASS)|schedbench_test.go'
  rc=${PIPESTATUS[0]}
  set -e -o pipefail
  hack/schedtable.awk "$sched" || true
  if [ "$rc" != 0 ]; then echo "scheduling benchmark failed (exit $rc)" >&2; exit "$rc"; fi
fi

echo
echo "== medians over $count runs"
# Every "value unit" pair of each benchmark line, median per (benchmark, unit).
awk '/^Benchmark/ {
  name=$1; sub(/-[0-9]+$/, "", name)
  for (i = 3; i < NF; i += 2) { key = name " " $(i+1); vals[key] = vals[key] " " $i }
}
END {
  for (k in vals) {
    n = split(substr(vals[k], 2), v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    printf "%-70s %12.3f\n", k, m
  }
}' "$out" | sort
