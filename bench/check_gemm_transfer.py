#!/usr/bin/env python3
"""How well does a measured GEMM grid of one GPU predict another GPU's GEMMs by shape?

offsim's `gemm.shape_from` costs a device without a grid of its own as its best-shape efficiency
times another device's measured efficiency by shape relative to that device's best. This script
checks that assumption on published GEMM timings (microbenchmarks, never training times) and
prints the mean |error| and bias, beside the tile-and-wave quantization model for comparison.

  bench/check_gemm_transfer.py [--grid bench/data/h100-sxm-gemm-grid.csv --grid-peak 989.4]
      [--published bench/data/published-gemm.csv --device a100 --peak 312 --best 271.2]
"""
import argparse
import csv
import itertools
import math


def grid_model(path, peak_tflops):
    grid = {}
    for r in csv.DictReader(open(path)):
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        grid[(m, n, k)] = 2 * m * n * k / float(r["time_s"]) / (peak_tflops * 1e12)
    axes = [sorted({key[i] for key in grid}) for i in range(3)]

    def locate(axis, v):
        x, logs = math.log(v), [math.log(a) for a in axis]
        if x <= logs[0]:
            return 0, 0.0
        if x >= logs[-1]:
            return len(logs) - 2, 1.0
        i = max(j for j in range(len(logs) - 1) if logs[j] <= x)
        return i, (x - logs[i]) / (logs[i + 1] - logs[i])

    def at(m, n, k):  # trilinear in log m, log n, log k, edges held: offsim's GemmGrid::at
        where = [locate(axes[i], v) for i, v in enumerate((m, n, k))]
        e = 0.0
        for corner in itertools.product((0, 1), repeat=3):
            w = 1.0
            for (i, f), c in zip(where, corner):
                w *= f if c else 1 - f
            if w:
                e += w * grid[tuple(axes[d][where[d][0] + corner[d]] for d in range(3))]
        return e

    return at, max(grid.values())


def tile_wave(m, n, units=108, tiles=((256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64),
                                      (64, 128), (64, 64))):
    best = 0.0
    for tm, tn in tiles:
        waves = math.ceil(math.ceil(m / tm) * math.ceil(n / tn) / units)
        best = max(best, m * n / (waves * units * tm * tn))
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="bench/data/h100-sxm-gemm-grid.csv")
    ap.add_argument("--grid-peak", type=float, default=989.4, help="TFLOP/s")
    ap.add_argument("--published", default="bench/data/published-gemm.csv")
    ap.add_argument("--device", default="a100", help="device_kind prefix of the published rows")
    ap.add_argument("--peak", type=float, default=312.0, help="TFLOP/s of the published device")
    ap.add_argument("--best", type=float, default=271.2, help="best-shape TFLOP/s of the published device")
    ap.add_argument("--min-size", type=int, default=1024, help="smallest cube root of m n k kept")
    a = ap.parse_args()
    at, grid_best = grid_model(a.grid, a.grid_peak)
    best = a.best / a.peak
    transfer, tiling = [], []
    for r in csv.DictReader(open(a.published)):
        if not r["device_kind"].startswith(a.device) or r["dtype"] not in ("bf16", "fp16"):
            continue
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        if m * n * k < a.min_size ** 3:
            continue
        measured = float(r["tflops"]) / a.peak
        transfer.append(best * at(m, n, k) / grid_best / measured - 1)
        tiling.append(best * tile_wave(m, n) / measured - 1)
    for name, errors in (("grid shape transfer", transfer), ("tile and wave quantization", tiling)):
        print(f"{name:28s} rows {len(errors)}  mean |error| {100 * sum(map(abs, errors)) / len(errors):.1f}%  "
              f"bias {100 * sum(errors) / len(errors):+.1f}%")


if __name__ == "__main__":
    main()
