#!/usr/bin/env bash
# The scale and speed figures of issue 13, in one run (Release build in build/; run from anywhere):
#   - NeoX-20B on 384 Frontier GCDs (ZeRO-3, ZeRO++, 3-level): time per run, analytic and flow, and
#     time per config inside a sweep (180 points of the three, analytic, one job);
#   - the shipped partitioning sweep: configs/s with 1 and 2 jobs (analytic, the sweep default);
#   - GPT-1T on all 9,408 Frontier nodes: time and peak RSS, without and with the output files;
#   - GPT-3 175B on 1,024 A100 (the Calculon comparison point): time and peak RSS, with the steady-state
#     extrapolation of its 64 micro-batches and without (--all-micro-batches);
#   - SC21's 530B PTD-P on 560 A100 (1,120 micro-batches, 280 ranks simulated): time and peak RSS;
#   - the engine's events per second (bench/perf BM_EventChain).
# Each single run is the median of 3 wall-clock times (GNU time), process start and YAML included.
#   bench/perf/scale.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
offsim=./build/offsim
[ -x "$offsim" ] || { echo "build first: ./run build" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# median wall seconds and max peak RSS (MB) of 3 runs of "$@"
measure() {
  for _ in 1 2 3; do /usr/bin/time -f "%e %M" -o "$tmp/t" "$@" >/dev/null 2>&1; cat "$tmp/t"; done |
    sort -n | awk '{t[NR]=$1; if ($2>m) m=$2} END {printf "%8.3f s  %7.0f MB", t[2], m/1024}'
}

echo "offsim scale benchmark, $(date -u +%F), $(nproc) cores"
echo
echo "NeoX-20B, 384 GCDs (one run each)       analytic                  flow"
for e in neox20b-frontier-zero3 neox20b-frontier-zeropp neox20b-frontier-3level; do
  a=$(measure "$offsim" run "configs/experiments/$e.yaml" --set strategy.collectives.fidelity=analytic)
  f=$(measure "$offsim" run "configs/experiments/$e.yaml" --set strategy.collectives.fidelity=flow)
  printf "  %-36s %s   %s\n" "$e" "$a" "$f"
done
# Per config inside a sweep: 60 micro-batch values for each of the three (every point a full
# iteration on 384 GCDs), on one thread; the time includes the process start and the sweep file.
{
  echo "name: neox20b-384gcd-points"
  echo "axes:"
  echo "  - key: experiment"
  echo "    values:"
  for e in neox20b-frontier-zero3 neox20b-frontier-zeropp neox20b-frontier-3level; do
    echo "      - $PWD/configs/experiments/$e.yaml"
  done
  echo "  - {key: training.micro_batch, range: {from: 1, to: 60, step: 1}}"
} >"$tmp/neox384.yaml"
start=$(date +%s.%N)
"$offsim" sweep "$tmp/neox384.yaml" --out "$tmp/neox384.csv" --jobs 1 >/dev/null 2>&1
end=$(date +%s.%N)
points=$(($(wc -l <"$tmp/neox384.csv") - 1))
awk -v s="$start" -v e="$end" -v n="$points" \
  'BEGIN {printf "  inside a sweep (analytic, 1 job): %d points in %.2f s, %.1f ms per config\n", n, e - s, 1000 * (e - s) / n}'
echo
for jobs in 1 2; do
  rm -f "$tmp/sweep.csv"
  start=$(date +%s.%N)
  "$offsim" sweep configs/sweeps/frontier-partitioning.yaml --out "$tmp/sweep.csv" --jobs "$jobs" >/dev/null 2>&1
  end=$(date +%s.%N)
  points=$(($(wc -l <"$tmp/sweep.csv") - 1))
  awk -v s="$start" -v e="$end" -v n="$points" -v j="$jobs" \
    'BEGIN {printf "shipped sweep, %d points, --jobs %d: %.2f s, %.0f configs/s, %.1f ms per config\n", n, j, e - s, n / (e - s), 1000 * (e - s) / n}'
done
echo
printf "GPT-1T, 9,408 Frontier nodes, simulation only:  %s\n" \
  "$(measure "$offsim" run configs/experiments/scale/gpt-1t-frontier-full.yaml)"
/usr/bin/time -f "%e %M" -o "$tmp/t" "$offsim" run configs/experiments/scale/gpt-1t-frontier-full.yaml \
  --out "$tmp/g1t" >/dev/null 2>&1
printf "GPT-1T, 9,408 Frontier nodes, with --out:       %s (one run; outputs %s)\n" \
  "$(awk '{printf "%8.3f s  %7.0f MB", $1, $2/1024}' "$tmp/t")" "$(du -sh "$tmp/g1t" | cut -f1)"
printf "GPT-3 175B, 1,024 A100 (Calculon: ~1.5 ms):     %s\n" \
  "$(measure "$offsim" run configs/experiments/scale/gpt3-175b-a100-1024.yaml)"
printf "  the same, every micro-batch simulated:         %s\n" \
  "$(measure "$offsim" run configs/experiments/scale/gpt3-175b-a100-1024.yaml --all-micro-batches)"
printf "SC21 530B PTD-P, 560 A100, 1,120 micro-batches: %s\n" \
  "$(measure "$offsim" run configs/experiments/gpt-530b-ptdp-selene.yaml)"
echo
if [ -x build/bench/perf/offsim_bench_perf ]; then
  echo "engine:"
  build/bench/perf/offsim_bench_perf --benchmark_filter='BM_EventChain' --benchmark_min_time=0.2 2>/dev/null |
    grep -E "BM_EventChain" | awk '{print "  " $0}'
fi
