#!/usr/bin/env bash
# The PyTorch measurements behind training.framework hf-transformers and FP8 on one NVIDIA GPU, each
# part under its own time limit so that one slow part keeps the others' files:
#
#   bench/run-gpu-hf-fp8.sh OUT_DIR DEVICE_KIND
#
#   OUT_DIR/DEVICE_KIND-gemm-fp8-e5m2.csv   bench/torch/fp8_gemm_bench.py  (bf16, E4M3xE4M3, E4M3xE5M2)
#   OUT_DIR/DEVICE_KIND-host-dispatch.csv   bench/torch/dispatch_bench.py  (host cost per eager op)
#   OUT_DIR/DEVICE_KIND-hf-modules.csv      bench/torch/hf_modules_bench.py (transformers' eager modules)
#   OUT_DIR/DEVICE_KIND-sdpa-attention.csv  the same script (SDPA by backend)
#   OUT_DIR/DEVICE_KIND-hf-training.csv     bench/torch/hf_training_bench.py (validation only)
#   OUT_DIR/DEVICE_KIND-hf-run.log          versions, clocks and each part's output
set -uo pipefail
out=$1
kind=$2
here=$(cd "$(dirname "$0")" && pwd)
log=$out/$kind-hf-run.log
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{
  echo "# $(date -u +%FT%TZ) $kind on $(hostname)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, torch.version.cuda, "transformers", transformers.__version__)'
  lscpu | grep -E 'Model name|^CPU\(s\)'
} >"$log" 2>&1
part() {  # part SECONDS NAME COMMAND...
  local limit=$1 name=$2
  shift 2
  local t0=$SECONDS
  echo "## $name (limit $limit s) $(date -u +%T)" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  echo "## $name exit $? after $((SECONDS - t0)) s" >>"$log"
}
part 90 fp8-gemm python3 "$here/torch/fp8_gemm_bench.py" --out "$out" --device-kind "$kind"
part 60 host-dispatch python3 "$here/torch/dispatch_bench.py" --out "$out" --device-kind "$kind"
part 150 hf-modules python3 "$here/torch/hf_modules_bench.py" --out "$out" --device-kind "$kind"
part 230 hf-training python3 "$here/torch/hf_training_bench.py" --out "$out" --device-kind "$kind"
echo "# done $(date -u +%T)" >>"$log"
