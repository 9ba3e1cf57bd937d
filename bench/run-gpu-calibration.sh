#!/usr/bin/env bash
# Build and run every calibration benchmark on one NVIDIA GPU node (nvcc, cuBLAS, PyTorch), writing
# the CSVs into OUT_DIR: what bench/data/<device>-*.csv hold and `offsim calibrate` fits.
#
#   bench/run-gpu-calibration.sh OUT_DIR DEVICE_KIND [HOST_NAME]
#
# On AMD (hipcc, hipBLAS) build with CMake instead (bench/hip/README.md); the steps are the same.
set -euo pipefail
out=$1
kind=$2
host=${3:-$(hostname)}
here=$(cd "$(dirname "$0")" && pwd)
build=$(mktemp -d)
log=$out/$kind-run.log
mkdir -p "$out"
{
  echo "# $(date -u +%FT%TZ) $kind on $host"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,pcie.link.gen.max,pcie.link.width.max,power.limit --format=csv || true
  nvcc --version | tail -2 || true
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket|NUMA node\(s\)|L3' || true
  free -g | head -2 || true
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' || true
} >"$log" 2>&1

nvcc -std=c++17 -O2 -x cu "$here/hip/gemm_bench.cpp" -o "$build/gemm_bench" -lcublas
nvcc -std=c++17 -O2 -x cu "$here/hip/membound_bench.cpp" -o "$build/membound_bench"
nvcc -std=c++17 -O2 -x cu "$here/hip/transfer_bench.cpp" -o "$build/transfer_bench"
g++ -std=c++17 -O3 -march=native -fopenmp "$here/hip/cpu_adam_bench.cpp" -o "$build/cpu_adam_bench"

# GEMMs: the square sweep, then a grid over m (tokens of a micro-batch) x n x k (the shapes
# tensor-parallel splits produce); at least 50 ms (square) or 20 ms (grid) of repetitions per shape.
"$build/gemm_bench" --device-kind "$kind" --host "$host" --min-ms 50 >"$out/$kind-gemm.csv"
shapes=""
for m in 1024 2048 4096 8192 16384 32768; do
  for n in 256 512 1024 2048 4096 8192 16384 32768; do
    for k in 256 512 1024 2048 4096 8192 16384 32768; do shapes+="$m,$n,$k;"; done
  done
done
"$build/gemm_bench" --device-kind "$kind" --host "$host" --min-ms 20 --shapes "${shapes%;}" | tail -n +2 >>"$out/$kind-gemm.csv"
echo "gemm done $(date -u +%T)" >>"$log"
"$build/membound_bench" --device-kind "$kind" --host "$host" >"$out/$kind-membound.csv"
echo "membound done $(date -u +%T)" >>"$log"
"$build/transfer_bench" --device-kind "$kind" --host "$host" --no-peer --max-bytes $((1 << 30)) >"$out/$kind-transfer.csv"
echo "transfer done $(date -u +%T)" >>"$log"
threads=$(nproc)
OMP_PROC_BIND=close OMP_PLACES=cores "$build/cpu_adam_bench" --threads "1,$((threads / 4)),$((threads / 2)),$threads" \
  --host "$host" >"$out/$kind-host-cpu-adam.csv"
echo "cpu adam done $(date -u +%T)" >>"$log"
PYTHONUNBUFFERED=1 python3 "$here/torch/transformer_bench.py" --out "$out" --device-kind "$kind" 2>>"$log"
echo "torch done $(date -u +%T)" >>"$log"
