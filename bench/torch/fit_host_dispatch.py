#!/usr/bin/env python3
"""The host dispatch table of eager frameworks from dispatch_bench.py's CSV (no fitting: means).

Reads <kind>-host-dispatch.csv (op, mode, calls, host_s_per_call, gpu_s_per_call) and writes a
host table with one section, dispatch: the host's wall clock per eager operator as offsim charges
it (models/strategies/host_dispatch.hpp), by the classes the model's kernel lists distinguish:
  linear      the linear row (F.linear: one GEMM)
  layer_norm  the layer_norm row (one fused norm)
  softmax     the softmax row
  elementwise the mean of the simple one-kernel operators (add, mul, silu, to_float32, rsqrt, cat,
              neg) and pow_mean over its two kernels: every other operator the model lists
all forward_grad (training records autograd), and backward_node the backward row (one autograd
node of a chain of one-kernel nodes, per node). The forward_nograd rows are not used (training).
With --extra (hf_host_bench.py's <kind>-host-dispatch-extra.csv: calls that launch no kernel), a
section python: the host's cost of the Python-level calls around the operators (configs/frameworks'
python_host entries):
  module_call  the module_call_identity row (an nn.Identity module's __call__)
  view         the mean of the view, transpose and reshape rows (a view-producing call)

  fit_host_dispatch.py bench/data/h100-sxm-host-dispatch.csv --device-kind xeon-platinum \\
      --extra bench/data/h100-sxm-host-dispatch-extra.csv \\
      --out configs/calibration/xeon-platinum-host.dispatch.yaml
"""
import argparse
import csv
import os
import statistics

SIMPLE = ["add", "mul", "silu", "to_float32", "rsqrt", "cat", "neg"]
VIEWS = ["view", "transpose", "reshape"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--device-kind", required=True, help="the host's kind (as its host table names it)")
    ap.add_argument("--extra", help="hf_host_bench.py's <kind>-host-dispatch-extra.csv (module call, views)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    by = {(r["op"], r["mode"]): float(r["host_s_per_call"]) for r in rows}
    grad = lambda op: by[(op, "forward_grad")]
    per_kernel = [grad(op) for op in SIMPLE] + [grad("pow_mean") / 2.0]
    classes = {
        "linear": (grad("linear"), "linear"),
        "layer_norm": (grad("layer_norm"), "layer_norm"),
        "softmax": (grad("softmax"), "softmax"),
        "elementwise": (statistics.mean(per_kernel), "mean of " + ", ".join(SIMPLE) + ", pow_mean / 2"),
    }
    backward = by[("mul_chain", "backward")]
    name = os.path.basename(a.csv)
    extra_arg = f" --extra bench/data/{os.path.basename(a.extra)}" if a.extra else ""
    lines = [
        "# Written by bench/torch/fit_host_dispatch.py: do not edit by hand, re-run the script.",
        f"# command: bench/torch/fit_host_dispatch.py bench/data/{name} --device-kind {a.device_kind}{extra_arg} --out {a.out}",
        "# The host of the lent H100 SXM (a 16-core Intel Xeon virtual machine, Python 3.12, PyTorch 2.11),",
        "# the host xeon-platinum-host.yaml describes: its wall clock per eager operator, to be named as",
        "# calibration.host by experiments that ran there (bench/data/h100-sxm-hf-fp8.md).",
        f"device_kind: {a.device_kind}",
        f'source: "bench/data/{name} (bench/torch/dispatch_bench.py on the lent H100 SXM, 2026-11-26)"',
        "dispatch:",
        f'  source: "{a.device_kind}: bench/data/{name}, means of 2,000 calls on 16 x 896 bf16 (the GPU waited on the host)"',
        "  forward:  # per operator, recording autograd (forward_grad rows)",
    ]
    for cls, (t, what) in classes.items():
        lines.append(f'    {cls}: "{t * 1e6:.2f} us"  # {what}')
    lines.append(f'  backward_node: "{backward * 1e6:.2f} us"  # mul_chain backward: one node per forward operator')
    if a.extra:
        extra = {r["op"]: float(r["host_s_per_call"]) for r in csv.DictReader(open(a.extra)) if r["mode"] == "forward_grad"}
        extra_name = os.path.basename(a.extra)
        lines += [
            "  python:  # Python-level calls that launch no kernel (configs/frameworks' python_host)",
            f'    source: "bench/data/{extra_name} (bench/torch/hf_host_bench.py extra_ops on the second lent H100, 2026-11-26: means of 2,000 calls on a 16 x 896 bf16 tensor that requires grad)"',
            f'    module_call: "{extra["module_call_identity"] * 1e6:.2f} us"  # module_call_identity (nn.Identity()(x))',
            f'    view: "{statistics.mean(extra[op] for op in VIEWS) * 1e6:.2f} us"  # mean of ' + ", ".join(VIEWS),
        ]
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
