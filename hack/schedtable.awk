#!/usr/bin/awk -f
# Prints the scheduling benchmark's table (e2e/schedbench, docs/scheduling-benchmark.md) from
# `go test -bench Scheduling` output: per fleet size and model, medians over the runs of pods/s,
# p50/p99 from creation to binding, the scheduler's DynamicResources Filter time per node
# examined and PreFilter time per pod (sampled by the scheduler), devices per node, and the
# model's throughput as a ratio to whole GPUs (how many times slower) on the same fleet, and the
# scheduler's CPU time per pod and its ratio to whole GPUs (steadier on a shared machine), and
# that CPU time per node the scheduler examines per pod (its numFeasibleNodesToFind): whether
# the cost per node stays flat as the fleet grows.
function median(list,    n, v, i, j, t) {
  n = split(substr(list, 2), v, " ")
  if (n == 0) return ""
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
  return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
# num formats a median, or "-" where no run reported the figure (the scheduler samples plugin
# times in a tenth of its cycles, so a small burst may have none).
function num(v, fmt) { return (v == "") ? "-" : sprintf(fmt, v) }
# A log line the benchmark's process writes while a run starts (the mock backend's klog) lands
# after the benchmark's name, and the run's figures come on a line of their own: join them.
/^BenchmarkScheduling\/nodes=[0-9]+\/model=/ && $2 !~ /^[0-9]+$/ { pending = $1; next }
pending != "" && /^[ \t]+[0-9]+[ \t]+[0-9.]+ ns\/op/ { $0 = pending " " $0; pending = "" }
/^BenchmarkScheduling\/nodes=[0-9]+\/model=/ {
  split($1, part, "/")
  nodes = substr(part[2], 7); model = substr(part[3], 7); sub(/-[0-9]+$/, "", model)
  if (!((nodes, model) in seen)) {
    seen[nodes, model] = 1
    if (!(nodes in nseen)) { nseen[nodes] = 1; norder[++nn] = nodes }
    if (!(model in mseen)) { mseen[model] = 1; morder[++nm] = model }
  }
  for (i = 3; i < NF; i += 2) vals[nodes, model, $(i + 1)] = vals[nodes, model, $(i + 1)] " " $i
}
END {
  if (nn == 0) { print "no scheduling results"; exit 1 }
  printf "%-6s %-20s %8s %9s %9s %10s %10s %8s %8s %10s %9s %9s %11s\n", "nodes", "model", "pods/s", "p50-ms", "p99-ms", "filter-us", "prefilt-us", "filt/pod", "dev/node", "x slower", "cpu-ms", "x cpu", "cpu-us/node"
  for (a = 1; a <= nn; a++) {
    n = norder[a]
    base = median(vals[n, "gpu", "pods/s"]); basecpu = median(vals[n, "gpu", "sched-cpu-ms/pod"])
    for (b = 1; b <= nm; b++) {
      m = morder[b]
      if (!((n, m) in seen)) continue
      r = median(vals[n, m, "pods/s"])
      ratio = (base != "" && r + 0 > 0) ? sprintf("%.2f", base / r) : "-"
      cpu = median(vals[n, m, "sched-cpu-ms/pod"])
      cratio = (basecpu + 0 > 0 && cpu != "") ? sprintf("%.2f", cpu / basecpu) : "-"
      filt = median(vals[n, m, "filters/pod"])
      examined = median(vals[n, m, "examined/pod"])
      if (examined == "") examined = filt
      pernode = (examined + 0 > 0 && cpu != "") ? sprintf("%.0f", cpu * 1000 / examined) : "-"
      cpu = (cpu != "") ? sprintf("%.1f", cpu) : "-"
      printf "%-6s %-20s %8.1f %9.0f %9.0f %10s %10s %8s %8.0f %10s %9s %9s %11s\n", n, m, r, median(vals[n, m, "p50-ms"]), median(vals[n, m, "p99-ms"]), num(median(vals[n, m, "dra-filter-us"]), "%.0f"), num(median(vals[n, m, "dra-prefilter-us"]), "%.0f"), num(filt, "%.0f"), median(vals[n, m, "devices/node"]), ratio, cpu, cratio, pernode
    }
  }
}
