#!/usr/bin/env python3
"""Fit offsim's non-GEMM kernel efficiencies from transformer_bench.py's ops CSV.

For each kernel class, the achieved bandwidth (the bytes transformer_bench.py counts for it,
which are the bytes offsim's layer_elementwise_kernels charges, over its measured time), relative
to the same GPU's streaming copy rate (membound_bench's mem_copy at its largest size). Only rows
of at least --min-elements elements are used (smaller ones measure launch cost, which offsim
charges separately); the median over them is written, with their spread.

Backward times are corrected for the benchmark's own gradient accumulation: its inputs are leaf
tensors reused across repetitions, so every backward also adds the new gradient into each
input's .grad (read 2 + 2 B, write 2 B per element), which a training step's activations never
do. That add is charged at the measured residual-add forward rate (the same kernel) and taken off.
A residual add's backward is then no kernel at all (autograd hands the gradient to both inputs);
the sum where the residual and branch gradients meet is one add, so offsim charges it 6 B per
element at the forward add's efficiency, and this script writes that.

  fit_kernels.py OPS_CSV MEMBOUND_CSV --out configs/calibration/NAME.kernels.yaml
"""
import argparse
import csv
import os
import statistics
import sys

# transformer_bench.py op -> offsim kernel class (models/transformer/transformer.hpp)
CLASSES = {"layernorm": "layernorm", "gelu": "activation", "attention_softmax": "attention_softmax",
           "dropout": "dropout", "residual_add": "residual_add"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ops_csv")
    ap.add_argument("membound_csv")
    ap.add_argument("--out", required=True)
    ap.add_argument("--min-elements", type=int, default=1 << 24)
    a = ap.parse_args()
    copies = [r for r in csv.DictReader(open(a.membound_csv)) if r["benchmark"] == "mem_copy"]
    largest = max(copies, key=lambda r: int(r["bytes"]))
    stream = int(largest["bytes"]) / float(largest["time_s"])
    rows = [r for r in csv.DictReader(open(a.ops_csv))
            if r["op"] in CLASSES and int(r["elements"]) >= a.min_elements]
    add_rate = statistics.median(int(r["bytes_fwd"]) / float(r["fwd_s"]) for r in rows if r["op"] == "residual_add")
    # elements of the benchmark's leaf inputs, per row (attention_softmax's input is the scores)
    leaf_inputs = {"layernorm": 1, "gelu": 1, "attention_softmax": 1, "dropout": 1, "residual_add": 2}
    by_class = {}
    for r in rows:
        cls = CLASSES[r["op"]]
        f = int(r["bytes_fwd"]) / float(r["fwd_s"]) / stream
        if r["op"] == "residual_add":
            b = f
        else:
            accumulate = 6.0 * leaf_inputs[r["op"]] * int(r["elements"]) / add_rate
            kernel = float(r["bwd_s"]) - accumulate
            if kernel <= 0.0:
                sys.exit(f"fit_kernels: {r['op']} row with {r['elements']} elements: backward shorter than its "
                         "gradient accumulation")
            b = int(r["bytes_bwd"]) / kernel / stream
        by_class.setdefault(cls, ([], []))
        by_class[cls][0].append(f)
        by_class[cls][1].append(b)
    if not by_class:
        sys.exit("fit_kernels: no rows left to fit")
    lines = [
        "# Written by bench/torch/fit_kernels.py: do not edit by hand, re-run the command.",
        f"command: \"bench/torch/fit_kernels.py {a.ops_csv} {a.membound_csv} --out {a.out}\"",
        f"source: \"median achieved bandwidth of PyTorch eager kernels at GPT layer shapes ({a.ops_csv}, rows of at "
        f"least {a.min_elements} elements; bytes as offsim's layer_elementwise_kernels counts them) over the same "
        f"GPU's streaming copy rate ({largest['benchmark']} of {int(largest['bytes'])} B: {stream / 1e9:.0f} GB/s, "
        f"{a.membound_csv}); backward times less the benchmark's gradient accumulation at the measured add rate "
        f"({add_rate / 1e9:.0f} GB/s)\"",
        "relative_to_streaming:",
    ]
    for cls in sorted(by_class):
        fwd, bwd = by_class[cls]
        lines.append(f"  {cls}: {{forward: {statistics.median(fwd):.3f}, backward: {statistics.median(bwd):.3f}}}"
                     f"  # {len(fwd)} rows; forward {min(fwd):.3f}..{max(fwd):.3f}, backward {min(bwd):.3f}..{max(bwd):.3f}")
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
