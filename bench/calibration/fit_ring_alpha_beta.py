#!/usr/bin/env python3
"""Fit the per-step latency and link efficiency of offsim's bidirectional-ring collective model
to measured single-node collectives (bench/data/frontier-rccl-collectives.csv, RCCL, 8 GCDs).

Model (models/strategies/data_parallel.cpp): a collective over g ranks is g-1 ring steps in each
direction; each step moves S/(2g) bytes per direction over the ring's bottleneck link at
`efficiency` x its peak, after `step_latency`. So
    t(S) = (g-1) * step_latency + (g-1)/g * S / (efficiency * 2 * bottleneck)
which is linear in S: ordinary least squares on (S, t) gives both. The bottleneck of the ring
gcd0-1-3-2-4-5-7-6 on Frontier is a single Infinity Fabric link, 50 GB/s per direction
(configs/hardware/frontier-node.yaml).

Usage: fit_ring_alpha_beta.py [CSV]   (prints the YAML fragment for configs/calibration/)
"""
import csv
import os
import sys

BOTTLENECK_BYTES_PER_S = 50e9  # one IF link per direction, OLCF Frontier User Guide
RANKS = 8


def fit(rows):
    xs = [(RANKS - 1) / RANKS * float(r["total_bytes"]) for r in rows]
    ys = [float(r["mean_time_s"]) for r in rows]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    residual = max(abs(intercept + slope * x - y) / y for x, y in zip(xs, ys))
    return intercept, slope, residual


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "data", "frontier-rccl-collectives.csv")
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["library"] == "rccl" and int(r["gcds"]) == RANKS]
    for collective in ("reduce_scatter", "all_gather"):
        sel = [r for r in rows if r["collective"] == collective]
        intercept, slope, residual = fit(sel)
        busbw = 1.0 / slope
        print(f"{collective}:")
        print(f"  step_latency: \"{intercept / (RANKS - 1) * 1e6:.2f} us\"")
        print(f"  efficiency: {busbw / (2 * BOTTLENECK_BYTES_PER_S):.4f}   # fitted busbw {busbw / 1e9:.2f} GB/s")
        print(f"  fit: {{rows: {len(sel)}, max_relative_residual: {residual:.3f}}}")


if __name__ == "__main__":
    main()
