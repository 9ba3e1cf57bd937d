#!/usr/bin/env bash
# Issue 35's engine figures in one run (Release build in build/; run from anywhere):
#   - GPT-3 175B on 1,024 A100 (tp 8, pp 16, dp 8, micro-batch 1, interleaved 2), flow fidelity
#     (target <= 0.3 s, <= 200 MB);
#   - GPT-1T Megatron on all 9,408 Frontier nodes, without and with --out (targets <= 0.5 s and
#     <= 150 MB; <= 2 s and <= 500 MB);
#   - the event queue at 1k and 1 M queued (target >= 15 M events/s at 1 M), and the flow network's
#     whole and per-component reshares (bench/perf/engine_bench.cpp).
# Each run: wall seconds, CPU seconds (user + sys: on a shared machine the steadier figure) and peak
# RSS, from GNU time, process start and YAML included; the median of 3 by wall time.
#   bench/perf/engine_figures.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
offsim=./build/offsim
[ -x "$offsim" ] || { echo "build first: ./run build" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

measure() {
  for _ in 1 2 3; do
    rm -rf "$tmp/out"
    /usr/bin/time -f "%e %U %S %M" -o "$tmp/t" "$@" >/dev/null 2>&1
    cat "$tmp/t"
  done | sort -n | awk 'NR == 2 {printf "%7.2f s wall  %7.2f s CPU  %6.0f MB", $1, $2 + $3, $4 / 1024}'
}

echo "offsim engine figures, $(date -u +%F), $(nproc) cores"
printf "GPT-3 175B, 1,024 A100, flow fidelity:     %s\n" "$(measure "$offsim" run \
  configs/experiments/scale/gpt3-175b-a100-1024.yaml --set strategy.pp=16 --set strategy.dp=8 \
  --set strategy.schedule=interleaved --set strategy.virtual_stages=2 --set strategy.collectives.fidelity=flow)"
printf "GPT-1T, 9,408 Frontier nodes:              %s\n" \
  "$(measure "$offsim" run configs/experiments/scale/gpt-1t-frontier-full.yaml)"
printf "GPT-1T, 9,408 Frontier nodes, with --out:  %s\n" \
  "$(measure "$offsim" run configs/experiments/scale/gpt-1t-frontier-full.yaml --out "$tmp/out")"
if [ -x build/bench/perf/offsim_bench_perf ]; then
  echo "engine (items/s = events/s or flows/s, CPU time):"
  build/bench/perf/offsim_bench_perf \
    --benchmark_filter='BM_EventQueue/(1000|1000000)$|BM_EventChain|BM_MaxMinReshare/10000|BM_FlowSimulation' \
    2>/dev/null | grep -E "^BM_" | awk '{print "  " $0}'
fi
