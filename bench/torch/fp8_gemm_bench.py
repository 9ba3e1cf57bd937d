#!/usr/bin/env python3
"""FP8 GEMMs in both of Transformer Engine's operand formats against bf16, by shape, on one GPU.

  python3 bench/torch/fp8_gemm_bench.py --out DIR --device-kind h100-sxm [--quick]

Writes <kind>-gemm-fp8-e5m2.csv in the columns `offsim calibrate` reads (bench/hip/bench_csv.hpp,
as bench/data/h100-sxm-gemm-fp8.csv): one `gemm` row per shape and dtype, dtype bf16, fp8_e4m3
(E4M3 x E4M3: Transformer Engine's forward GEMMs) and fp8_e4m3_e5m2 (E4M3 x E5M2: its gradient GEMMs, dgrad and wgrad, take the E5M2 gradient).

C = A . B^T with A m x k and B n x k row-major, bf16 result; torch.mm for bf16 and
torch._scaled_mm (cuBLASLt, its heuristic algorithm, as Transformer Engine's GEMMs) with unit
per-tensor scales for FP8. The grid is the one h100-sxm.gemm-fp8.yaml keeps: m and n
1024..8192, k 1024..16384. Timing: CUDA events around 20 calls after 5 warm-up, mean per call;
random data.
"""
import argparse
import os
import socket

import torch

from bench_io import timed, write_csv

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device-kind", required=True)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    one = torch.tensor(1.0, device="cuda")
    sizes = (1024, 4096) if a.quick else (1024, 2048, 4096, 8192)
    ks = (1024, 4096) if a.quick else (1024, 2048, 4096, 8192, 16384)
    rows = []
    host = socket.gethostname()
    for m in sizes:
        for n in sizes:
            for k in ks:
                a_bf = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b_bf = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                a8, b8, b5 = a_bf.to(E4M3), b_bf.to(E4M3), b_bf.to(E5M2)
                cases = [("bf16", lambda: torch.mm(a_bf, b_bf.t()), 2),
                         ("fp8_e4m3", lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16), 1),
                         ("fp8_e4m3_e5m2",
                          lambda: torch._scaled_mm(a8, b5.t(), one, one, out_dtype=torch.bfloat16), 1)]
                for dtype, fn, width in cases:
                    try:
                        t = timed(fn)
                    except RuntimeError as e:  # a format pair this cuBLASLt refuses: say so
                        print(dtype, m, n, k, "skipped:", e, flush=True)
                        continue
                    rows.append(dict(benchmark="gemm", device_kind=a.device_kind, host=host, src="", dst="",
                                     memory="device", ranks="", m=m, n=n, k=k, dtype=dtype, threads="",
                                     bytes=width * (m * k + n * k) + 2 * m * n, elements=0, time_s=repr(t)))
                    print(dtype, m, n, k, f"{2.0 * m * n * k / t / 1e12:.0f} TFLOP/s", flush=True)
                del a_bf, b_bf, a8, b8, b5
    path = os.path.join(a.out, f"{a.device_kind}-gemm-fp8-e5m2.csv")
    write_csv(path, rows)
    print(path, len(rows), "rows", flush=True)


if __name__ == "__main__":
    main()
