#!/usr/bin/env python3
"""Write bench/data/mi250x-gemm-tensile.csv from bench/data/mi250x-published-figures.csv.

The source rows are rocBLAS's Tensile tuning logic for aldebaran (gfx90a, MI200-series GCDs):
each tuned size [M, N, batch, K] has a winning kernel and its `DeviceEfficiency` in percent (see
bench/data/mi250x-published-figures.md). This script keeps the bf16 (BBS) training shapes and
writes them in the benchmark format that `offsim calibrate` reads:

  * one row per shape: the mean efficiency over the layouts (NN, TN, NT) tuned at that shape
    (a transformer layer runs its GEMMs in all three: forward NT, backward NN and TN);
  * only shapes with m >= 1024 rows: a training GEMM has m = micro-batch x sequence tokens
    (1,024 and more), and the table that uses these rows interpolates by work (m n k) alone, which
    cannot tell a 16-row decode GEMM from a cube of the same work (16 x 8192 x 8192 = 1024^3);
  * time_s = 2 m n k / (efficiency x 191.5 TFLOP/s), DERIVED: Tensile's efficiency is relative to
    the clock the GCD held while tuning, not to the nominal peak, so the table is used for the
    shape dependence only (gemm.shape_from in configs/calibration/mi250x-gcd.yaml, which scales
    it to the measured best-shape rate).

Deterministic: the same input gives the same bytes. Run from the repository root:
  python3 bench/mi250x_tensile_gemm.py
"""

import csv
import re
import sys
from collections import OrderedDict

SRC = "bench/data/mi250x-published-figures.csv"
OUT = "bench/data/mi250x-gemm-tensile.csv"
PEAK = 191.5e12  # MI250X GCD bf16 dense peak (OLCF guide: 1024 FLOP/clock/CU x 110 CU x 1.7 GHz)
MIN_ROWS = 1024


def main() -> int:
    shapes: "OrderedDict[tuple, list]" = OrderedDict()
    with open(SRC, newline="") as f:
        for row in csv.DictReader(f):
            if row["kind"] != "gemm_efficiency" or "(BBS)" not in row["dtype"]:
                continue
            m = re.search(r"M=(\d+) N=(\d+) batch=1 K=(\d+) layout=(\w+)", row["shape_or_size"])
            if not m:
                print(f"{SRC}: cannot read shape {row['shape_or_size']!r}", file=sys.stderr)
                return 1
            mm, n, k, layout = int(m[1]), int(m[2]), int(m[3]), m[4]
            if mm < MIN_ROWS:
                continue
            locator = row["source"].split(" ")[0] + " " + row["source"].split(" ")[1] + " " + row["locator"]
            shapes.setdefault((mm, n, k), []).append((layout, float(row["value"]), locator))
    with open(OUT, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["benchmark", "device_kind", "m", "n", "k", "dtype", "bytes", "time_s", "efficiency_percent",
                    "layouts", "source"])
        for (mm, n, k), entries in shapes.items():
            eff = sum(e for _, e, _ in entries) / len(entries)
            time_s = 2.0 * mm * n * k / (eff / 100.0 * PEAK)
            operand_bytes = 2 * (mm * k + k * n + mm * n)  # bf16 A, B and C, as bench/ writes it
            w.writerow(["gemm", "mi250x-gcd", mm, n, k, "bf16", operand_bytes, f"{time_s:.6e}", f"{eff:.3f}",
                        "|".join(l for l, _, _ in entries), "; ".join(s for _, _, s in entries)])
    print(f"wrote {OUT}: {len(shapes)} shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
