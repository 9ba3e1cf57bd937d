#!/usr/bin/env bash
# Every figure of issue 35's "done when", in one run (Release build; run from anywhere):
#   - offsim search over the Megatron tp 8 space of GPT-3 175B on 1,024 A100
#     (configs/experiments/scale/gpt3-175b-a100-1024.yaml --kind megatron --tp 8): configs/s with
#     1 and 2 jobs, its serial part and the bound that puts on 2 jobs / 1 job, two --jobs 1
#     searches side by side (what the two cores give two searches that share nothing), and
#     whether `mpirun -np 2 offsim search` writes the single-process files;
#   - that job in one run with flow fidelity (the documented default): time and peak RSS;
#   - GPT-1T Megatron on all 9,408 Frontier nodes: time and peak RSS, without and with --out (the
#     compact trace, and --trace full), and the size of the --out files;
#   - the shipped sweep (configs/sweeps/frontier-partitioning.yaml): configs/s with 1 and 2 jobs;
#   - the engine's event queue at 1 M queued events (bench/perf BM_EventQueue/1000000);
#   - Calculon on the same GPT-3 175B job, when a copy of it is present (bench/perf/README.md).
# Times are wall clock (the median of 3 runs for single runs, of 5 for searches and sweeps, read
# from the nanosecond clock around GNU time, whose own %e has 10 ms steps: a fifth of a shipped
# sweep) and, since a shared machine's load inflates wall clock, the CPU time (user + system, GNU
# time's 10 ms steps) next to them. configs/s counts the points simulated over the whole process
# (start, YAML, plan and outputs included).
#   bench/perf/run_all.sh                 # ./build/offsim
#   OFFSIM=/path/to/offsim bench/perf/run_all.sh
#   CALCULON=/path/to/calculon bench/perf/run_all.sh   # default: bench/perf/calculon if present
set -euo pipefail
cd "$(dirname "$0")/../.."
offsim=${OFFSIM:-./build/offsim}
bench=${OFFSIM_BENCH:-$(dirname "$offsim")/bench/perf/offsim_bench_perf}
calculon=${CALCULON:-bench/perf/calculon}
[ -x "$offsim" ] || { echo "build first: ./run build (or set OFFSIM)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job=configs/experiments/scale/gpt3-175b-a100-1024.yaml
gpt1t=configs/experiments/scale/gpt-1t-frontier-full.yaml

# "wall cpu rss_kb" of one run of "$@" (its output discarded)
once() {
  local start end
  start=$(date +%s%N)
  /usr/bin/time -f "%U %S %M" -o "$tmp/t" "$@" >/dev/null 2>&1 || true
  end=$(date +%s%N)
  awk -v s="$start" -v e="$end" '{printf "%.4f %.2f %s\n", (e - s) / 1e9, $1 + $2, $3}' "$tmp/t"
}
# The run of median wall clock among 5 of "$@", after `prepare` (which clears the last run's output).
median5() {
  local prepare=$1
  shift
  for _ in 1 2 3 4 5; do
    $prepare
    once "$@"
  done | sort -n | sed -n 3p
}
# median wall and CPU seconds and max peak RSS (MB) of 3 runs of "$@"
measure() {
  for _ in 1 2 3; do once "$@"; done | sort -n |
    awk '{t[NR]=$1; c[NR]=$2; if ($3>m) m=$3} END {printf "%8.3f s (CPU %6.2f s)  %6.0f MB", t[2], c[2], m/1024}'
}
# a search of the job's Megatron tp 8 space into $1 with --jobs $2 (the median of 5); prints
# "points wall cpu rss_kb"
search() {
  local t
  search_out=$1
  t=$(median5 clear_search "$offsim" search "$job" --kind megatron --tp 8 --out "$1" --jobs "$2")
  echo "$(($(wc -l <"$1/search.csv") - 1)) $t"
}
clear_search() { rm -rf "$search_out"; }
clear_sweep() { rm -f "$tmp/sweep.csv"; }

echo "offsim issue 35 benchmark, $(date -u '+%F %H:%M') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary: $offsim ($("$offsim" --version 2>/dev/null || echo 'no --version'))"
echo
echo "Megatron tp 8 search, GPT-3 175B on 1,024 A100 ($job):"
declare -A rate
for jobs in 1 2; do
  read -r points wall cpu rss < <(search "$tmp/search$jobs" "$jobs")
  rate[$jobs]=$(awk -v n="$points" -v t="$wall" 'BEGIN {printf "%.1f", n / t}')
  awk -v n="$points" -v t="$wall" -v c="$cpu" -v j="$jobs" -v m="$rss" 'BEGIN {
    printf "  --jobs %d: %d points in %.3f s: %.1f configs/s (CPU %.2f s: %.1f configs per CPU second), peak %.0f MB\n",
      j, n, t, n / t, c, n / c, m / 1024 }'
done
awk -v a="${rate[1]}" -v b="${rate[2]}" 'BEGIN {printf "  2 jobs / 1 job (wall clock): %.2fx\n", b / a}'
# The serial part no --jobs can share: the same search with no point to simulate (micro-batch 3:
# 1,024 sequences do not divide by it), i.e. the process's start and exit, the base's YAML, the
# plan and the files. Were the points' time exactly halved by two jobs, two jobs would take
# serial + (one job - serial) / 2: the most this search's 2 jobs / 1 job can be on this machine.
search_out=$tmp/search0
read -r serial _ < <(median5 clear_search "$offsim" search "$job" --kind megatron --tp 8 --micro-batch 3 \
  --out "$tmp/search0" --jobs 1)
awk -v s="$serial" -v n="$points" -v r="${rate[1]}" 'BEGIN {
  t = n / r
  printf "  serial part (the search with no point to simulate): %.4f s of %.4f s; were the points exactly halved, 2 jobs would be %.2fx 1 job\n",
    s, t, t / (s + (t - s) / 2) }'
# What the two cores give two searches that share nothing: two --jobs 1 processes side by side,
# against one alone, alternated (5 rounds: this machine's speed drifts between minutes). Each runs
# slower than alone (caches, memory, the hypervisor), and a --jobs 2 search's workers pay that too,
# on top of its serial part (the start, the base's YAML and plan, the outputs) and each worker's
# first point. Two such processes answer 2 x points / (the pair's time) configs/s together: what
# two independent searches get from this machine, an upper bound for --jobs 2 on it.
side_by_side() {
  local start end
  rm -rf "$tmp/pair1" "$tmp/pair2"
  start=$(date +%s%N)
  if [ "$1" = pair ]; then
    "$offsim" search "$job" --kind megatron --tp 8 --out "$tmp/pair1" --jobs 1 >/dev/null 2>&1 &
  fi
  "$offsim" search "$job" --kind megatron --tp 8 --out "$tmp/pair2" --jobs 1 >/dev/null 2>&1 || true
  wait || true
  end=$(date +%s%N)
  awk -v s="$start" -v e="$end" -v w="$1" 'BEGIN {printf "%s %.4f\n", w, (e - s) / 1e9}'
}
for _ in 1 2 3 4 5; do side_by_side alone; side_by_side pair; done | sort -k1,1 -k2n |
  awk -v n="$points" '{t[$1] = t[$1] " " $2} END {
    split(t["alone"], a, " "); split(t["pair"], p, " ")
    printf "  two --jobs 1 searches side by side: %.3f s for both, one alone %.3f s (each %.0f%% slower): %.1f configs/s together, %.2fx one\n",
      p[3], a[3], 100 * (p[3] / a[3] - 1), 2 * n / p[3], 2 * a[3] / p[3] }'
if cmp -s "$tmp/search1/search.csv" "$tmp/search2/search.csv" && cmp -s "$tmp/search1/pareto.csv" "$tmp/search2/pareto.csv"; then
  echo "  --jobs 2 gives the --jobs 1 files: yes"
else
  echo "  --jobs 2 gives the --jobs 1 files: NO"
fi
if command -v mpirun >/dev/null; then
  extra=()
  [ "$(id -u)" -eq 0 ] && extra+=(--allow-run-as-root)
  rm -rf "$tmp/search-mpi"
  mpi_start=$(date +%s.%N)
  mpirun "${extra[@]}" --oversubscribe -np 2 "$offsim" search "$job" --kind megatron --tp 8 --out "$tmp/search-mpi" \
    >"$tmp/mpi.log" 2>&1 || true
  mpi_end=$(date +%s.%N)
  if cmp -s "$tmp/search1/search.csv" "$tmp/search-mpi/search.csv" &&
    cmp -s "$tmp/search1/pareto.csv" "$tmp/search-mpi/pareto.csv"; then same=yes; else same=no; fi
  awk -v s="$mpi_start" -v e="$mpi_end" -v y="$same" \
    'BEGIN {printf "  mpirun -np 2 offsim search gives the single-process files: %s (%.2f s)\n", y, e - s}'
else
  echo "  mpirun -np 2 offsim search: no mpirun on this machine"
fi
echo
printf "GPT-3 175B, 1,024 A100, one run, flow fidelity:    %s\n" \
  "$(measure "$offsim" run "$job" --set strategy.collectives.fidelity=flow)"
printf "GPT-3 175B, 1,024 A100, one run, analytic:         %s\n" "$(measure "$offsim" run "$job")"
if [ -f "$calculon/bin/calculon" ]; then
  # The same job for Calculon (its llm command: one execution of a model on a system); Calculon
  # has no bfloat16 vector rate for the A100, so float16 (the same peak).
  cat >"$tmp/calculon-exe.json" <<'JSON'
{"num_procs": 1024, "tensor_par": 8, "pipeline_par": 8, "data_par": 16, "tensor_par_net": 0,
 "pipeline_par_net": 1, "data_par_net": 1, "batch_size": 1024, "microbatch_size": 1,
 "datatype": "float16", "fused_activation": true, "attention_type": "multihead",
 "activation_recompute": "full", "pipeline_interleaving": 1, "optimizer_sharding": true,
 "tensor_par_comm_type": "rs_ag", "tensor_par_overlap": "none", "seq_par_ag_redo": false,
 "data_par_overlap": false, "weight_offload": false, "activations_offload": false,
 "optimizer_offload": false, "training": true}
JSON
  python=${CALCULON_PYTHON:-python3}
  printf "Calculon, the same job (%s llm):  %s\n" "$calculon" "$(measure env PYTHONPATH="$calculon" "$python" \
    "$calculon/bin/calculon" llm "$calculon/models/gpt3-175B.json" "$tmp/calculon-exe.json" \
    "$calculon/systems/a100_80g.json" "$tmp/calculon-stats.json")"
  if [ -f "$tmp/calculon-stats.json" ]; then
    echo "  (Calculon's batch time: $("$python" -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["total_time"], 3))' \
      "$tmp/calculon-stats.json" 2>/dev/null || echo '?') s)"
  fi
else
  echo "Calculon: not found at $calculon (bench/perf/README.md says how to fetch it)"
fi
echo
printf "GPT-1T Megatron, 9,408 Frontier nodes:             %s\n" "$(measure "$offsim" run "$gpt1t")"
read -r wall cpu rss < <(once "$offsim" run "$gpt1t" --out "$tmp/g1t")
printf "GPT-1T Megatron, 9,408 Frontier nodes, --out:      %8.3f s (CPU %6.2f s)  %6.0f MB (one run; the files: %s)\n" \
  "$wall" "$cpu" "$(awk -v k="$rss" 'BEGIN {print k / 1024}')" "$(du -sh "$tmp/g1t" | cut -f1)"
# The same with every simulated rank's detail (the default writes the compact trace above
# --trace-limit: README, run --out).
read -r wall cpu rss < <(once "$offsim" run "$gpt1t" --out "$tmp/g1t-full" --trace full)
printf "GPT-1T Megatron, 9,408 Frontier nodes, --trace full: %6.3f s (CPU %6.2f s)  %6.0f MB (one run; the files: %s)\n" \
  "$wall" "$cpu" "$(awk -v k="$rss" 'BEGIN {print k / 1024}')" "$(du -sh "$tmp/g1t-full" | cut -f1)"
rm -rf "$tmp/g1t-full"
echo
for jobs in 1 2; do
  read -r wall cpu _ < <(median5 clear_sweep "$offsim" sweep configs/sweeps/frontier-partitioning.yaml \
    --out "$tmp/sweep.csv" --jobs "$jobs")
  points=$(($(wc -l <"$tmp/sweep.csv") - 1))
  awk -v n="$points" -v t="$wall" -v c="$cpu" -v j="$jobs" 'BEGIN {
    printf "shipped sweep, %d points, --jobs %d: %.3f s, %.0f configs/s (CPU %.3f s: %.0f configs per CPU second)\n", n, j, t, n / t, c, n / c }'
done
echo
if [ -x "$bench" ]; then
  echo "engine event queue (BM_EventQueue, events/s):"
  "$bench" --benchmark_filter='BM_EventQueue/' --benchmark_min_time=0.2 2>/dev/null |
    awk '/BM_EventQueue/ {for (i = 1; i <= NF; ++i) if ($i ~ /items_per_second=/) {sub("items_per_second=", "", $i); sub("/s$", "", $i); printf "  %-26s %s events/s\n", $1, $i}}'
else
  echo "engine bench: $bench not built (cmake --build build --target offsim_bench_perf)"
fi
